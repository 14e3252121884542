import CoreMetrics
import Dispatch
import FUSE
import IOThreads
import Logging
import ObjectStore

#if canImport(Glibc)
  import Glibc
#endif

/// The filesystem: a bucket (or a sub-tree of one) as directories and files,
/// with object metadata as extended attributes. A thin facade: each FUSE
/// operation goes to the components it owns, each with its own state and
/// lock (docs/ARCHITECTURE.md).
public final class BucketFileSystem: FileSystem, MountComponent, Sendable {
  /// The store, settings, diagnostics, clock and task owner every component shares.
  let context: MountContext
  private let onMounted: @Sendable () -> Void
  /// Inodes: their nodes, full metadata and staged files.
  let inodes: KnownInodes
  /// Every open handle: files, stages and directories (HandleTable.swift).
  let handles = HandleTable()
  /// What is known of each directory's contents (DirectoryCache.swift).
  let directoryCache: DirectoryCache
  let readService: ReadService
  /// What bucketfs chose of the files it stored, and which it created lately.
  let provenance: Provenance
  /// The stages' bytes on local disk (StageStore.swift).
  let stageStore: StageStore
  /// Uploads of staged files at close and fsync (Uploader.swift).
  let uploader: Uploader
  /// Opens, setattr's size change and closes of staged files (WriteHandles.swift).
  let writers: WriteHandles
  let entries: AttributeBuilder
  let nameLookup: NameLookup
  let directories: Directories
  /// When the kernel may keep directories' listings (KernelListings.swift).
  let kernelListings: KernelListings
  let namespace: Namespace
  let symlinks: Symlinks
  let extendedAttributes: ExtendedAttributes

  public convenience init(
    store: any ObjectStore, configuration: Configuration, logger: Logger,
    clock: @escaping @Sendable () -> Double = BucketFileSystem.monotonicSeconds,
    onMounted: @escaping @Sendable () -> Void = {}, metrics: any MetricsFactory = MetricsSystem.factory,
    diskWork: IOPool? = nil
  ) {
    self.init(
      store: store, configuration: configuration, logger: logger, clock: clock, onMounted: onMounted,
      stageFiles: LocalStageFiles(), metrics: metrics, diskWork: diskWork)
  }

  /// `metrics` gets the gauges `bucketfs_read_ahead_bytes` and `bucketfs_staged_bytes`.
  init(
    store inner: any ObjectStore, configuration: Configuration, logger: Logger,
    clock: @escaping @Sendable () -> Double, onMounted: @escaping @Sendable () -> Void,
    stageFiles: any StageFiles, metrics: any MetricsFactory = MetricsSystem.factory, diskWork: IOPool? = nil
  ) {
    let diagnostics = Diagnostics(logger: logger)
    let tasks = BackgroundTasks()
    let metadataCache = MetadataCache(
      capacity: configuration.metadataCacheEntries, maxBytes: configuration.metadataCacheBytes)
    let nodes = NodeTable(
      rootKey: configuration.rootPrefix, ttl: configuration.metadataTTL, clock: clock,
      metadata: metadataCache, limit: configuration.maxInodes, evictions: NodeEvictions(metrics: metrics))
    let kernelListings = KernelListings(ttl: configuration.listCacheTTL, nodes: nodes, clock: clock)
    let directoryCache = DirectoryCache(
      pageSize: configuration.pageSize, freshness: configuration.metadataTTL, kernelListings: kernelListings,
      clock: clock, onConflict: { diagnostics.warnConflict($0) })
    let context = MountContext(
      store: ListingAwareStore(inner: inner, directoryCache: directoryCache, clock: clock),
      configuration: configuration,
      diagnostics: diagnostics, clock: clock, tasks: tasks)
    let walks = SubtreeWalks(context: context, directoryCache: directoryCache)
    let known = KnownMetadata(context: context, nodes: nodes, metadataCache: metadataCache)
    let stagedInodes = StagedInodes()
    let inodes = KnownInodes(nodes: nodes, metadata: known, staged: stagedInodes)
    let readAhead = ReadAheadBudget(capacity: configuration.readAheadBudget, metrics: metrics)
    let prefetch = SiblingPrefetch(context: context, budget: readAhead, directoryCache: directoryCache)
    let readService = ReadService(
      context: context, nodes: nodes, known: known, handles: handles, budget: readAhead, prefetch: prefetch,
      metrics: metrics)
    let provenance = Provenance(configuration: configuration, clock: clock)
    let streams = WriteStreams(context: context)
    let stageStore = StageStore(
      context: context, stageFiles: stageFiles, diskWork: diskWork, metrics: metrics, streams: streams)
    let uploader = Uploader(context: context, streams: streams, nodes: nodes, provenance: provenance)
    let entries = AttributeBuilder(
      context: context, inodes: inodes, directoryCache: directoryCache, mountTime: Timestamp.now())
    self.context = context
    self.onMounted = onMounted
    self.inodes = inodes
    self.directoryCache = directoryCache
    self.readService = readService
    self.provenance = provenance
    self.stageStore = stageStore
    self.uploader = uploader
    self.writers = WriteHandles(
      context: context, inodes: inodes, stageStore: stageStore, uploader: uploader, provenance: provenance,
      directoryCache: directoryCache)
    self.entries = entries
    self.nameLookup = NameLookup(
      context: context, inodes: inodes, entries: entries, directoryCache: directoryCache)
    self.kernelListings = kernelListings
    self.directories = Directories(
      context: context, nodes: nodes, entries: entries, handles: handles, walks: walks,
      directoryCache: directoryCache,
      kernelListings: kernelListings)
    self.namespace = Namespace(
      context: context, inodes: inodes, entries: entries, uploader: uploader, provenance: provenance,
      changes: NameChanges(observers: [stagedInodes, readService, provenance]), directoryCache: directoryCache
    )
    self.symlinks = Symlinks(context: context, inodes: inodes, entries: entries)
    self.extendedAttributes = ExtendedAttributes(context: context, inodes: inodes, provenance: provenance)
  }

  /// The parts of ``inodes``, by their own names.
  var nodes: NodeTable { inodes.nodes }
  var known: KnownMetadata { inodes.metadata }
  var stagedInodes: StagedInodes { inodes.staged }

  public static func monotonicSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
  }

  public func mounted(kernel: KernelCache) {
    readService.staleReads.mounted(kernel: kernel)
    kernelListings.mounted(kernel: kernel)
    nodes.evictions.mounted(kernel: kernel)
    onMounted()
  }

  /// The FUSE boundary of an operation: a component's failure is logged
  /// here, once, with the operation and the object it concerned, and
  /// leaves as its errno.
  func boundary<T>(_ operation: String, _ body: () async throws -> T) async throws -> T {
    do {
      return try await body()
    } catch let failure as FileSystemError {
      diagnostics.log(failure, during: operation)
      throw failure.errno
    }
  }

  public func replyFailed(_ reply: FailedReply) {
    diagnostics.logger.debug("the kernel did not take a reply (\(reply)); undoing it")
    switch reply {
    case .lookup(let inode): if inode != 0 { forget(inode: inode, count: 1) }
    case .open(let inode, let handle): release(inode: inode, handle: handle)
    case .opendir(let inode, let handle): releasedir(inode: inode, handle: handle)
    case .create(let inode, let handle):
      release(inode: inode, handle: handle)
      forget(inode: inode, count: 1)
    }
  }

  /// Files and directories open now (of any process, through any namespace's view of the mount).
  public var openHandleCount: Int { handles.count() }

  /// Ends, within at most `seconds`, the work the mount started apart from
  /// any request: cache fills are cancelled, and uploads and the deletes of
  /// streamed parts awaited. Called once the session has ended, so an
  /// unmount leaves no parts behind.
  public func settleBackgroundWork(within seconds: Double) {
    let done = DispatchSemaphore(value: 0)
    let tasks = self.tasks
    // The one task no owner holds: the unmount's own, awaited here.
    Task.detached {
      await tasks.settle()
      done.signal()
    }
    if done.wait(timeout: .now() + seconds) == .timedOut {
      diagnostics.logger.warning(
        "unmounting with uploads or part deletes still under way after \(Int(seconds)) s; `bucketfs clean-parts` removes the parts they leave"
      )
    }
  }
}

import FUSE
import Logging
import ObjectStore
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// The filesystem: a bucket (or a sub-tree of one) as directories and files,
/// with object metadata as extended attributes.
public final class BucketFileSystem: FileSystem, Sendable {
  let store: any ObjectStore
  let configuration: Configuration
  let logger: Logger
  let mountTime = Timestamp.now()
  let clock: @Sendable () -> Double
  private let onMounted: @Sendable () -> Void
  /// Tells the kernel to drop cached attributes, pages and names; none until mounted.
  let kernel = Mutex<KernelCache>(.none)
  /// Memory read-ahead may hold, shared by all open files.
  let readAhead: ReadAheadBudget
  /// Small files fetched ahead of a reader going through a directory (SiblingPrefetch.swift).
  let prefetch: SiblingPrefetch

  struct State {
    var inodes: InodeTable
    var directories: [UInt64: DirectoryStream] = [:]
    var files: [UInt64: FileReader] = [:]
    var nextHandle: UInt64 = 1
    /// Keys already warned about (conflicts, access denied), bounded.
    var warned: Set<ObjectKey> = []
    /// Lookups under way per directory key, and the listing a burst of them shares.
    var bursts: [ObjectKey: LookupBurst] = [:]
    /// The bucket answered that it cannot move objects: renames copy and delete.
    var moveUnsupported = false
    /// Refreshes after a read found its generation gone, per inode.
    var staleReads: [UInt64: Task<Void, Never>] = [:]
    var readDeadlines: ReadDeadlines
  }
  struct LookupBurst {
    var inFlight = 0
    var page: Task<DatedPage, any Error>?
    /// When `page` was asked for: lookups that keep a burst alive must not
    /// answer from one page forever.
    var pageAskedAt: Double = 0
  }
  /// A lookup that finds this many others under way in its directory joins
  /// one shared list call instead of making two requests of its own: fifty
  /// parallel `stat`s of cold files then cost about one request's time.
  static let burstSize = 3
  let state: Mutex<State>
  /// Files being written (Writes/), apart from `state` so reads and stats
  /// of untouched files never wait on them; `stagedCount` spares them the lock.
  let writes = Mutex(StagedFiles())
  let stagedCount = Atomic<Int>(0)
  let stages = Mutex<StageDirectory?>(nil)
  /// The calls that write the stages' bytes.
  let stageFiles: any StageFiles
  let contentTypes: ContentTypes
  let listings: SharedListings
  /// Tree walks and the listings they fetch ahead (SubtreeWalk.swift).
  let walks: SubtreeWalks

  public convenience init(
    store: any ObjectStore, configuration: Configuration, logger: Logger,
    clock: @escaping @Sendable () -> Double = BucketFileSystem.monotonicSeconds,
    onMounted: @escaping @Sendable () -> Void = {}
  ) {
    self.init(
      store: store, configuration: configuration, logger: logger, clock: clock, onMounted: onMounted,
      stageFiles: LocalStageFiles())
  }

  init(
    store: any ObjectStore, configuration: Configuration, logger: Logger,
    clock: @escaping @Sendable () -> Double, onMounted: @escaping @Sendable () -> Void,
    stageFiles: any StageFiles
  ) {
    self.stageFiles = stageFiles
    let listings = SharedListings()
    let warner = ConflictWarner()
    let walks = SubtreeWalks(
      store: store, pageSize: configuration.pageSize, freshness: configuration.metadataTTL, logger: logger,
      clock: clock, onConflict: { warner($0) })
    self.walks = walks
    self.listings = listings
    self.store = ListingAwareStore(inner: store, listings: listings, walks: walks, clock: clock)
    self.configuration = configuration
    self.logger = logger
    self.clock = clock
    self.onMounted = onMounted
    self.contentTypes = ContentTypes(mimeTypesPath: configuration.mimeTypesPath)
    self.readAhead = ReadAheadBudget(capacity: configuration.readAheadBudget)
    self.prefetch = SiblingPrefetch(store: store, budget: readAhead, clock: clock)
    self.state = Mutex(
      State(
        inodes: InodeTable(
          rootKey: configuration.rootPrefix, metadataCapacity: configuration.metadataCacheEntries),
        readDeadlines: ReadDeadlines(seconds: configuration.retryDeadline)))
    warner.set { [weak self] in self?.warnConflict($0) }
  }

  public static func monotonicSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
  }

  public func mounted(kernel: KernelCache) {
    self.kernel.withLock { $0 = kernel }
    onMounted()
  }

  public func replyFailed(_ reply: FailedReply) {
    logger.debug("the kernel did not take a reply (\(reply)); undoing it")
    switch reply {
    case .lookup(let inode): if inode != 0 { forget(inode: inode, count: 1) }
    case .open(let inode, let handle): release(inode: inode, handle: handle)
    case .opendir(let inode, let handle): releasedir(inode: inode, handle: handle)
    case .create(let inode, let handle):
      release(inode: inode, handle: handle)
      forget(inode: inode, count: 1)
    }
  }

  // MARK: - Metadata cache

  func node(_ inode: UInt64, kind: Node.Kind? = nil) throws -> Node {
    guard let node = state.withLock({ $0.inodes[inode] }) else { throw Errno.stale }
    if let kind, node.kind != kind { throw kind == .directory ? Errno.notDirectory : Errno.isDirectory }
    return node
  }

  /// The node's metadata if fetched within the TTL, else fetched now.
  func currentMetadata(inode: UInt64, node: Node) async throws -> ObjectMetadata {
    if isFresh(node), let metadata = state.withLock({ $0.inodes.metadata[node.key] }) { return metadata }
    return try await fetchMetadata(node.key)
  }

  func isFresh(_ node: Node) -> Bool {
    clock() - node.fetchedAt < configuration.metadataTTL
  }

  func fetchMetadata(_ key: String) async throws -> ObjectMetadata {
    do {
      let metadata = try await store.metadata(of: key)
      let now = clock()
      // A PATCH may have answered with newer metadata while this GET was under way.
      return state.withLock { $0.inodes.refresh(metadata, at: now) }
    } catch {
      throw failure(error, operation: "get metadata", key: key)
    }
  }

  func optionalMetadata(_ key: String) async throws -> ObjectMetadata? {
    do {
      return try await store.metadata(of: key)
    } catch StorageError.notFound {
      return nil
    } catch {
      throw failure(error, operation: "get metadata", key: key)
    }
  }

  // MARK: - Errors and warnings

  /// Maps a failure to errno, logging what deserves it.
  func failure(
    _ error: any Error, operation: String, key: String, context: ErrorMapping.Context = .metadata
  ) -> Errno {
    if let storage = error as? StorageError {
      switch storage {
      case .accessDenied(let message):
        if firstWarning("denied:" + key) {
          logger.error("\(operation) \(key): access denied: \(message)")
          if let hint = ErrorMapping.hint(for: storage) { logger.error("\(hint)") }
        }
      case .unavailable, .invalidResponse, .badRequest:
        logger.error("\(operation) \(key): \(storage)")
      default:
        break
      }
    } else if !(error is Errno) && !(error is CancellationError) {
      logger.error("\(operation) \(key): \(error)")
    }
    return ErrorMapping.errno(for: error, context: context)
  }

  func warnConflict(_ fileKey: String) {
    if firstWarning("conflict:" + fileKey) {
      logger.warning(
        "object '\(fileKey)' has the same name as a directory; the directory is shown, the object is left untouched"
      )
    }
  }

  func firstWarning(_ key: String) -> Bool {
    state.withLock { state in
      if state.warned.count > 10_000 { state.warned.removeAll() }
      return state.warned.insert(ObjectKey(key)).inserted
    }
  }
}

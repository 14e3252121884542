import CoreMetrics
import FUSE
import NIOCore
import ObjectStore
import Synchronization

/// Reads of objects through ``FileReader``s: opening an object's generation,
/// reads at hand or awaited within one retry deadline per key, and what a
/// read that finds its generation gone sets off (``StaleReads``). The
/// readers belong to their handles (``HandleTable``).
final class ReadService: MountComponent, Sendable {
  private let readDeadlines: Mutex<ReadDeadlines>
  /// Refreshes after a read found its generation gone.
  let staleReads: StaleReads
  let context: MountContext
  let nodes: NodeTable
  /// Full metadata: kept while fresh, else fetched.
  let known: KnownMetadata
  /// The open handles, whose readers a rename retargets.
  let handles: HandleTable
  /// Memory read-ahead may hold, shared by all open files.
  let budget: ReadAheadBudget
  /// Small files fetched ahead of a reader going through a directory.
  let prefetch: SiblingPrefetch
  /// `bucketfs_storage_crc32c_mismatches_total{direction="download"}`: a
  /// whole sequential read that did not match.
  private let mismatches: Counter

  init(
    context: MountContext, nodes: NodeTable, known: KnownMetadata, handles: HandleTable,
    budget: ReadAheadBudget,
    prefetch: SiblingPrefetch, metrics: any MetricsFactory = MetricsSystem.factory
  ) {
    self.mismatches = Counter(
      label: "bucketfs_storage_crc32c_mismatches_total", dimensions: [("direction", "download")],
      factory: metrics)
    self.context = context
    self.readDeadlines = Mutex(ReadDeadlines(seconds: context.configuration.retryDeadline))
    self.staleReads = StaleReads(
      nodes: nodes, known: known, tasks: context.tasks, logger: context.diagnostics.logger)
    self.nodes = nodes
    self.known = known
    self.handles = handles
    self.budget = budget
    self.prefetch = prefetch
  }

  /// Opens the object's generation the node shows (fetched again past the
  /// TTL; ESTALE if the object is gone: the kernel then looks the name up
  /// again), and what the kernel does with the pages it has of it.
  func open(inode: UInt64, node: Node) async throws -> (reader: FileReader, cache: NodeTable.PageCacheUse) {
    let facts: FileFacts
    if let known = node.facts, nodes.isFresh(node) {
      facts = known
    } else {
      facts = FileFacts(try await known.fetch(node.key, context: .inode))
    }
    let reader = FileReader(
      key: node.key, generation: facts.generation, size: facts.size, crc32c: facts.crc32c, store: store,
      maxSegment: configuration.readAheadMaxChunk, maxAhead: configuration.readAheadMaxBytes,
      maxStreams: configuration.readAheadMaxStreams,
      budget: budget, prefetched: prefetch.opened(node.key, generation: facts.generation), tasks: tasks)
    return (reader, nodes.recordOpen(inode, generation: facts.generation))
  }

  /// A reader of generation `base` (for a write handle before its stage
  /// holds the bytes).
  func reader(of base: ObjectMetadata) -> FileReader {
    FileReader(
      key: base.name, generation: base.generation, size: UInt64(base.size),
      crc32c: base.crc32c.flatMap { CRC32C.value(base64: $0) }, store: store,
      maxSegment: configuration.readAheadMaxChunk, maxAhead: configuration.readAheadMaxBytes,
      maxStreams: configuration.readAheadMaxStreams,
      budget: budget, tasks: tasks)
  }

  func readInline(_ reader: FileReader, offset: UInt64, size: Int) -> [ByteBuffer]? {
    guard let pieces = reader.buffered(offset: offset, count: size) else { return nil }
    if Self.reachesEnd(offset, size, of: reader.size) { prefetch.readToEnd(reader.key) }
    return pieces
  }

  func read(inode: UInt64, _ reader: FileReader, offset: UInt64, size: Int) async throws -> [ByteBuffer] {
    let key = reader.key
    let bound = readDeadlines.withLock { $0.begin(key) }
    do {
      let pieces = try await OperationDeadline.$current.withValue(bound) {
        try await reader.read(offset: offset, count: size)
      }
      readDeadlines.withLock { $0.end(key, nil) }
      if Self.reachesEnd(offset, size, of: reader.size) { prefetch.readToEnd(reader.key) }
      return pieces
    } catch {
      readDeadlines.withLock { $0.end(key, error) }
      if StaleReads.isGenerationGone(error) {
        staleReads.generationGone(inode: inode, key: reader.key, generation: reader.generation)
      }
      if let failure = error as? IntegrityFailure, failure.first { mismatched(inode: inode, reader) }
      throw diagnostics.failure(error, operation: "read", key: reader.key, context: .read)
    }
  }

  /// A close (flush) of a read handle whose bytes did not match fails with
  /// EIO too: the reads answered it already, or (the reads that ended the
  /// file were answered before the sum was complete) none did.
  func closing(inode: UInt64, _ reader: FileReader) throws {
    guard let failure = reader.takeMismatch() else { return }
    if failure.first { mismatched(inode: inode, reader) }
    throw diagnostics.failure(failure, operation: "close", key: reader.key, context: .read)
  }

  /// A read handle was released: once no handle whose bytes did not match
  /// is open, opens of its file use the page cache again.
  func released(inode: UInt64, _ reader: FileReader) {
    if reader.mismatched { nodes.releasedDistrusted(inode) }
  }

  /// The bytes read were not the object's: the kernel's pages of the file
  /// (after this reply) and any cached copy go, so the next read fetches anew.
  private func mismatched(inode: UInt64, _ reader: FileReader) {
    mismatches.increment()
    nodes.distrustPages(inode)
    staleReads.dropPages(inode: inode)
    store.forgetCopies(of: reader.key, generation: reader.generation)
  }

  /// Whether a read of `size` bytes at `offset` reaches the end of a file of
  /// `total` bytes; without overflow for any offset and size a caller passes.
  static func reachesEnd(_ offset: UInt64, _ size: Int, of total: UInt64) -> Bool {
    let count = UInt64(clamping: size)
    return count >= total || offset >= total - count
  }
}

extension ReadService: NameChangeObserver {
  /// Open readers of a renamed file read the same bytes at its new name.
  func observe(_ change: NameChange) {
    guard case .fileRenamed(let move) = change else { return }
    for reader in handles.objectReaders()
    where reader.key == move.from && reader.generation == move.sourceGeneration {
      reader.retarget(key: move.to.name, generation: move.to.generation)
    }
  }
}

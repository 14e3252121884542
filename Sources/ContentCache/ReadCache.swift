import Logging
import NIOCore
import ObjectStore
import Synchronization

/// Object bytes on local disk, in entries keyed by name and generation
/// (docs/SEMANTICS.md#content-cache). An entry is a sparse data file of
/// fixed-size blocks and a map of the blocks present, each with its
/// CRC-32C. Block bytes are written before the map lists them, and the map
/// is replaced atomically, so a crash never lists bytes that are not there;
/// every block is checked against its CRC-32C each time it is served, which
/// also catches bytes torn by a power loss. The cache never fails a read: a
/// disk error or a damaged entry makes the read go to the network.
final class ReadCache: Sendable {
  static let blockSize: Int64 = 64 << 10
  /// Bytes an upload is summed or copied in, and a whole entry checked in: a whole number of blocks.
  static let copyChunk = 1 << 20

  let directory: CacheDirectory
  let index: CacheIndex
  let disk: any CacheDisk
  let logger: Logger
  let metrics: CacheMetrics
  /// A write failure (a full disk) is logged once per mount.
  private let writeFailureLogged = Atomic<Bool>(false)

  init(directory: CacheDirectory, limit: Int64, disk: any CacheDisk, logger: Logger, metrics: CacheMetrics) {
    self.directory = directory
    self.index = CacheIndex(limit: limit)
    self.disk = disk
    self.logger = logger
    self.metrics = metrics
  }

  // MARK: Serving

  /// Whether the index lists every block of `range` for the key: a read
  /// worth trying from disk (``cached(_:_:spare:)`` then checks the bytes).
  func lists(_ key: EntryKey, _ range: Range<Int64>) -> Bool {
    guard let entry = index.peek(key) else { return false }
    return entry.lists(range)
  }

  /// Bytes `range` of the key's object from disk, when every block they
  /// fall in is present and intact; they land in `spare`'s buffer when it
  /// has room. Nil otherwise (a damaged entry is discarded first).
  func cached(_ key: EntryKey, _ range: Range<Int64>, spare: SpareBuffer?) -> ByteBuffer? {
    guard let (entry, touch) = index.use(key) else { return nil }
    if touch { disk.touch(entry.mapPath) }
    guard let plan = entry.plan(range) else { return nil }
    let spanStart = plan.blocks.lowerBound * Self.blockSize
    let spanEnd = min(plan.blocks.upperBound * Self.blockSize, plan.size ?? .max)
    let length = Int(spanEnd - spanStart)
    var buffer = spare?.take() ?? ByteBufferAllocator().buffer(capacity: length)
    buffer.clear()
    guard load(entry, at: spanStart, length, into: &buffer) else { return nil }
    for (offset, sum) in zip(plan.blocks, plan.sums) {
      let at = Int((offset - plan.blocks.lowerBound) * Self.blockSize)
      let block = buffer.getSlice(at: buffer.readerIndex + at, length: min(Int(Self.blockSize), length - at))
      guard let block, CRC32C.update(0, block) == sum else {
        discard(entry, because: "block \(offset) does not match its crc32c")
        return nil
      }
    }
    let lower = Int(range.lowerBound - spanStart)
    let upper = Int(min(range.upperBound, spanEnd) - spanStart)
    buffer.moveWriterIndex(to: buffer.readerIndex + upper)
    buffer.moveReaderIndex(forwardBy: lower)
    return buffer
  }

  /// Appends `length` bytes from `offset` of the entry's data file to
  /// `buffer`; false, the entry discarded, if they cannot all be read.
  func load(_ entry: CacheEntry, at offset: Int64, _ length: Int, into buffer: inout ByteBuffer)
    -> Bool
  {
    let count: Int
    do {
      count = try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { raw in
        try disk.read(
          entry.dataPath, at: offset, into: UnsafeMutableRawBufferPointer(rebasing: raw[0..<length]))
      }
    } catch {
      discard(entry, because: "cannot read it (\(error))")
      return false
    }
    guard count == length else {
      discard(entry, because: "its data file is shorter than its map says")
      return false
    }
    return true
  }

  // MARK: Removing

  /// Drops a damaged entry, logging why once (it is listed no more).
  func discard(_ entry: CacheEntry, because reason: String) {
    if index.remove(entry) {
      logger.warning(
        "read cache: discarding \(entry.key.name) generation \(entry.key.generation): \(reason); reading it from the bucket"
      )
    }
    deleteFiles(of: entry)
    metrics.stored(index.used)
  }

  /// A write to the cache failed (a full disk): the entry goes, the read goes on.
  func writeFailed(_ entry: CacheEntry, _ error: DiskError) {
    if !writeFailureLogged.exchange(true, ordering: .relaxed) {
      logger.warning(
        "read cache: cannot write to \(directory.path) (\(error)); not keeping \(entry.key.name) (reads go on from the bucket; further write failures are not logged)"
      )
    }
    forget(entry)
  }

  func forget(_ entry: CacheEntry) {
    index.remove(entry)
    deleteFiles(of: entry)
    metrics.stored(index.used)
  }

  func delete(_ entries: [CacheEntry]) {
    for entry in entries { deleteFiles(of: entry) }
  }

  private func deleteFiles(of entry: CacheEntry) {
    entry.markRemoved()
    disk.remove(entry.mapPath)
    disk.remove(entry.dataPath)
  }
}

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
    return entry.state.withLock { !$0.removed && $0.map.covers(range) != nil }
  }

  /// Bytes `range` of the key's object from disk, when every block they
  /// fall in is present and intact; they land in `spare`'s buffer when it
  /// has room. Nil otherwise (a damaged entry is discarded first).
  func cached(_ key: EntryKey, _ range: Range<Int64>, spare: SpareBuffer?) -> ByteBuffer? {
    guard let (entry, touch) = index.use(key) else { return nil }
    if touch { disk.touch(entry.mapPath) }
    let plan = entry.state.withLock { state -> (blocks: Range<Int64>, sums: [UInt32], size: Int64?)? in
      guard !state.removed, let blocks = state.map.covers(range) else { return nil }
      return (blocks, blocks.map { state.map.blocks[$0] ?? 0 }, state.map.size)
    }
    guard let plan else { return nil }
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
  private func load(_ entry: CacheEntry, at offset: Int64, _ length: Int, into buffer: inout ByteBuffer)
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

  // MARK: Filling

  /// Keeps the whole blocks in `bytes`, the answer to a read of `range`.
  /// `size` and `crc` are the object's, when known. Returns the entry when
  /// this made it complete and it awaits its whole-object check.
  func keep(_ key: EntryKey, _ range: Range<Int64>, _ bytes: ByteBuffer, size known: Int64?, crc: UInt32?)
    -> CacheEntry?
  {
    let start = range.lowerBound
    let end = start + Int64(bytes.readableBytes)
    // An answer shorter than asked for reached the object's end.
    let size = Int64(bytes.readableBytes) < range.upperBound - start ? end : known
    if let size, end > size { return nil }
    let blocks = Self.wholeBlocks(from: start, to: end, size: size)
    guard !blocks.isEmpty else { return nil }
    let entry = index.entry(key) {
      CacheEntry(
        key: key, path: directory.entryPath(name: key.name, generation: key.generation),
        map: BlockMap(name: key.name, generation: key.generation, blockSize: Int(Self.blockSize)))
    }
    let present = entry.state.withLock { state -> Set<Int64>? in
      guard !state.removed, !state.handingOver, state.map.size == nil || size == nil || state.map.size == size
      else { return nil }
      return Set(state.map.blocks.keys)
    }
    guard let present else { return nil }
    let fresh = blocks.filter { !present.contains($0) }
    guard !fresh.isEmpty else { return nil }
    var sums: [Int64: UInt32] = [:]
    var total: Int64 = 0
    for index in fresh {
      let at = index * Self.blockSize - start
      let length = min(Self.blockSize, (size ?? .max) - index * Self.blockSize)
      guard let block = bytes.getSlice(at: bytes.readerIndex + Int(at), length: Int(length)) else {
        return nil
      }
      sums[index] = CRC32C.update(0, block)
      total += length
    }
    guard let victims = index.reserve(total, for: entry) else { return nil }
    delete(victims)
    do {
      for run in Self.runs(fresh) {
        let at = run.lowerBound * Self.blockSize
        let upper = min(run.upperBound * Self.blockSize, end)
        try bytes.withUnsafeReadableBytes { raw throws(DiskError) in
          let piece = UnsafeRawBufferPointer(rebasing: raw[Int(at - start)..<Int(upper - start)])
          try disk.write(entry.dataPath, at: at, piece)
        }
      }
    } catch {
      writeFailed(entry, error)
      return nil
    }
    let whole = start == 0 && end == size ? CRC32C.update(0, bytes) : nil
    return record(sums, size: size, crc: crc, whole: whole, reserved: total, in: entry)
  }

  /// Lists blocks written in the entry's map and persists it. An entry this
  /// completes is checked against the object's CRC-32C first, when it is
  /// known (`whole`: the bytes' own sum, when they were the whole object),
  /// so its map is written once; else it is returned, for a check once the
  /// CRC-32C is learnt. Another read may have listed some of the same blocks
  /// meanwhile: their reservation is given back.
  private func record(
    _ sums: [Int64: UInt32], size: Int64?, crc: UInt32?, whole: UInt32?, reserved: Int64, in entry: CacheEntry
  ) -> CacheEntry? {
    let completes = entry.state.withLock { state -> (size: Int64, crc: UInt32)? in
      var map = state.map
      map.size = map.size ?? size
      map.blocks.merge(sums) { old, _ in old }
      guard map.isComplete, !map.verified, let size = map.size, let crc = map.objectCRC ?? crc else {
        return nil
      }
      return (size, crc)
    }
    var verified = false
    if let completes {
      guard let sum = whole ?? contentSum(of: entry, size: completes.size) else { return nil }
      guard sum == completes.crc else {
        discard(entry, because: "its contents do not match the object's crc32c")
        return nil
      }
      verified = true
    }
    var added: Int64 = 0
    let map = persist(entry) { map in
      map.size = map.size ?? size
      map.objectCRC = map.objectCRC ?? crc
      for (index, sum) in sums where map.blocks[index] == nil {
        map.blocks[index] = sum
        added += map.length(of: index)
      }
      map.verified = map.verified || (verified && map.isComplete)
    }
    if map != nil && added < reserved { index.release(reserved - added, for: entry) }
    metrics.stored(index.used)
    guard let map, map.isComplete, !map.verified else { return nil }
    return entry
  }

  /// Changes the entry's map, then (with no lock held) replaces its file.
  /// One caller at a time writes an entry's map: a change made meanwhile is
  /// written by that caller after its own, so the file ends with the last
  /// map, never an older one landing late. Nil if the entry was removed,
  /// before or meanwhile (the files written for it go too), or the write
  /// failed (the entry goes).
  private func persist(_ entry: CacheEntry, _ change: (inout BlockMap) -> Void) -> BlockMap? {
    let claimed = entry.state.withLock { state -> (map: BlockMap, write: Bool)? in
      guard !state.removed else { return nil }
      change(&state.map)
      if state.writing {
        state.dirty = true
        return (state.map, false)
      }
      state.writing = true
      return (state.map, true)
    }
    if let claimed, claimed.write {
      var next: BlockMap? = claimed.map
      while let map = next {
        do {
          try disk.replace(entry.mapPath, with: map.encoded())
        } catch {
          entry.state.withLock { $0.writing = false }
          writeFailed(entry, error)
          return nil
        }
        next = entry.state.withLock { state in
          guard state.dirty, !state.removed else {
            state.writing = false
            return nil
          }
          state.dirty = false
          return state.map
        }
      }
    }
    guard claimed == nil || entry.state.withLock({ $0.removed }) else { return claimed?.map }
    disk.remove(entry.mapPath)
    disk.remove(entry.dataPath)
    return nil
  }

  /// Blocks wholly inside bytes [start, end) of an object of `size` (the last one may be short).
  static func wholeBlocks(from start: Int64, to end: Int64, size: Int64?) -> [Int64] {
    var blocks: [Int64] = []
    var index = (start + blockSize - 1) / blockSize
    while true {
      let blockStart = index * blockSize
      if let size, blockStart >= size { break }
      guard min(blockStart + blockSize, size ?? .max) <= end else { break }
      blocks.append(index)
      index += 1
    }
    return blocks
  }

  /// Sorted block indices as runs of consecutive ones.
  private static func runs(_ indices: [Int64]) -> [Range<Int64>] {
    var runs: [Range<Int64>] = []
    for index in indices {
      if let last = runs.last, last.upperBound == index {
        runs[runs.count - 1] = last.lowerBound..<(index + 1)
      } else {
        runs.append(index..<(index + 1))
      }
    }
    return runs
  }

  // MARK: Whole-object check

  /// Checks a complete entry against the object's CRC-32C: trusted as
  /// complete when they match, discarded when they do not.
  func verify(_ entry: CacheEntry, crc: UInt32) {
    guard let size = entry.state.withLock({ $0.removed ? nil : $0.map.size }),
      let sum = contentSum(of: entry, size: size)
    else { return }
    guard sum == crc else {
      discard(entry, because: "its contents do not match the object's crc32c")
      return
    }
    _ = persist(entry) { map in
      map.objectCRC = crc
      map.verified = true
    }
  }

  /// The CRC-32C of the entry's data file; nil (the entry discarded) if it cannot be read whole.
  private func contentSum(of entry: CacheEntry, size: Int64) -> UInt32? {
    var sum: UInt32 = 0
    var buffer = ByteBufferAllocator().buffer(capacity: Self.copyChunk)
    var offset: Int64 = 0
    while offset < size {
      let length = Int(min(Int64(Self.copyChunk), size - offset))
      buffer.clear()
      guard load(entry, at: offset, length, into: &buffer) else { return nil }
      sum = CRC32C.update(sum, buffer)
      offset += Int64(length)
    }
    return sum
  }

  // MARK: Uploads

  /// An entry for the object this mount just stored from `source`, with its
  /// disk reserved, when it fits; its data file is the source's own file
  /// (a hard link), else it is empty. ``finish(upload:from:linked:crc:)``
  /// then lists its blocks. Nil when there is nothing to keep.
  func adopt(upload object: ObjectMetadata, from source: any UploadSource) -> (
    entry: CacheEntry, linked: Bool, crc: UInt32
  )? {
    guard object.size > 0, object.size <= index.limit, source.size == object.size,
      let crc = object.crc32c.flatMap({ CRC32C.value(base64: $0) })
    else { return nil }
    let key = EntryKey(name: object.name, generation: object.generation)
    var made = false
    let entry = index.entry(key) {
      made = true
      var map = BlockMap(name: key.name, generation: key.generation, blockSize: Int(Self.blockSize))
      map.size = object.size
      map.objectCRC = crc
      let entry = CacheEntry(
        key: key, path: directory.entryPath(name: key.name, generation: key.generation), map: map)
      entry.state.withLock { $0.handingOver = true }
      return entry
    }
    guard made else { return nil }
    guard let victims = index.reserve(object.size, for: entry) else {
      index.remove(entry)
      return nil
    }
    delete(victims)
    disk.remove(entry.dataPath)  // a leftover of an entry removed before
    return (entry, source.link(to: entry.dataPath), crc)
  }

  /// Lists the blocks of an adopted upload's entry: reads its data file
  /// (`linked`) or copies the source into it, summing each block, and
  /// keeps it only when the whole matches the object's CRC-32C (the bytes
  /// may have changed since they were stored). Blocking disk work.
  func finish(upload entry: CacheEntry, from source: any UploadSource, linked: Bool, crc: UInt32) {
    let size = source.size
    var sums: [Int64: UInt32] = [:]
    var whole: UInt32 = 0
    var offset: Int64 = 0
    var buffer = ByteBufferAllocator().buffer(capacity: Self.copyChunk)
    do {
      while offset < size {
        let chunk: ByteBuffer
        if linked {
          buffer.clear()
          let length = Int(min(Int64(Self.copyChunk), size - offset))
          let count = try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { raw in
            try disk.read(
              entry.dataPath, at: offset, into: UnsafeMutableRawBufferPointer(rebasing: raw[0..<length]))
          }
          guard count == length else { break }
          chunk = buffer
        } else {
          chunk = try source.read(at: offset, count: Self.copyChunk)
          guard chunk.readableBytes > 0 else { break }
          try chunk.withUnsafeReadableBytes { raw throws(DiskError) in
            try disk.write(entry.dataPath, at: offset, raw)
          }
        }
        whole = CRC32C.update(whole, chunk)
        var at = 0
        while at < chunk.readableBytes {
          let length = min(Int(Self.blockSize), chunk.readableBytes - at)
          if let block = chunk.getSlice(at: chunk.readerIndex + at, length: length) {
            sums[(offset + Int64(at)) / Self.blockSize] = CRC32C.update(0, block)
          }
          at += length
        }
        offset += Int64(chunk.readableBytes)
      }
    } catch let error as DiskError where !linked {
      writeFailed(entry, error)
      return
    } catch {
      logger.debug("read cache: not keeping \(entry.key.name) (its staged bytes: \(error))")
      forget(entry)
      return
    }
    guard offset == size, whole == crc else {
      logger.debug("read cache: not keeping \(entry.key.name): its staged bytes are not what was stored")
      forget(entry)
      return
    }
    _ = persist(entry) { map in
      map.blocks = sums
      map.verified = true
    }
    entry.state.withLock { $0.handingOver = false }
    metrics.stored(index.used)
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
  private func writeFailed(_ entry: CacheEntry, _ error: DiskError) {
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
    entry.state.withLock { $0.removed = true }
    disk.remove(entry.mapPath)
    disk.remove(entry.dataPath)
  }
}

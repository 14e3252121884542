import NIOCore
import ObjectStore

// Filling: keeping the whole blocks of bytes just read, and writing an entry's map.
extension ReadCache {
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
    guard let present = entry.presentBlocks(forObjectOf: size) else { return nil }
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
    return record(sums, size: size, crc: crc, reserved: total, in: entry)
  }

  /// Lists blocks written in the entry's map and persists it. An entry this
  /// completes is checked against the object's CRC-32C first, when it is
  /// known (its blocks' sums combined), so its map is written once; else it
  /// is returned, for a check once the CRC-32C is learnt. Another read may
  /// have listed some of the same blocks meanwhile: their reservation is
  /// given back.
  private func record(
    _ sums: [Int64: UInt32], size: Int64?, crc: UInt32?, reserved: Int64, in entry: CacheEntry
  ) -> CacheEntry? {
    let completes = entry.completion(adding: sums, size: size, crc: crc)
    var verified = false
    if let completes, let sum = Self.objectSum(completes.map) {
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
  func persist(_ entry: CacheEntry, _ change: (inout BlockMap) -> Void) -> BlockMap? {
    let claimed = entry.claimMapWrite(change)
    if let claimed, claimed.write {
      var next: BlockMap? = claimed.map
      while let map = next {
        do {
          try disk.replace(entry.mapPath, with: map.encoded())
        } catch {
          entry.mapWriteFailed()
          writeFailed(entry, error)
          return nil
        }
        next = entry.nextMapToWrite()
      }
    }
    guard claimed == nil || entry.isRemoved else { return claimed?.map }
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
}

import ObjectStore

// The whole-object check: a complete entry against the object's CRC-32C.
//
// The object's checksum is combined from the blocks' own sums (each taken
// from the bytes as they arrived, before they were written), not summed
// again from the data file: reading a large entry back and summing it cost
// as much CPU as writing it, on the machine the reads run on. What the disk
// holds is still checked, block by block, each time a block is served.
extension ReadCache {
  /// Checks a complete entry against the object's CRC-32C: trusted as
  /// complete when they match, discarded when they do not.
  func verify(_ entry: CacheEntry, crc: UInt32) {
    guard let map = entry.map, let sum = Self.objectSum(map) else {
      return
    }
    guard sum == crc else {
      discard(entry, because: "its contents do not match the object's crc32c")
      return
    }
    _ = persist(entry) { map in
      map.objectCRC = crc
      map.verified = true
    }
  }

  /// The CRC-32C of the object whose blocks the map lists, from their sums;
  /// nil unless it lists them all.
  static func objectSum(_ map: BlockMap) -> UInt32? {
    guard map.isComplete, map.blockSize == Int(blockSize), let count = map.blockCount, let size = map.size
    else { return nil }
    var blocks: [UInt32] = []
    blocks.reserveCapacity(Int(count))
    for index in 0..<count {
      guard let block = map.blocks[index] else { return nil }
      blocks.append(block)
    }
    return CRC32C.joined(blocks, blockSize: blockSize, size: size)
  }
}

import NIOCore
import ObjectStore

/// What one cache entry (an object's name and generation) holds: which
/// fixed-size blocks of the object are on disk, each with its CRC-32C, and
/// what is known of the whole object. Persisted next to the entry's sparse
/// data file; a block is listed only after its bytes were written.
struct BlockMap: Sendable, Equatable {
  static let magic: [UInt8] = Array("BFSCACHE".utf8)
  static let version: UInt32 = 1

  let name: String
  let generation: Int64
  let blockSize: Int
  /// The object's size, once known (metadata seen, or a read that reached its end).
  var size: Int64?
  /// The object's CRC-32C, once known.
  var objectCRC: UInt32?
  /// Every block is present and the whole matched ``objectCRC``.
  var verified = false
  /// Present blocks: index → CRC-32C of the block's bytes.
  var blocks: [Int64: UInt32] = [:]

  init(name: String, generation: Int64, blockSize: Int) {
    self.name = name
    self.generation = generation
    self.blockSize = blockSize
  }

  /// Bytes on disk: the present blocks (the last may be short).
  var storedBytes: Int64 {
    var total: Int64 = 0
    for index in blocks.keys { total += length(of: index) }
    return total
  }

  /// The length of block `index`: a whole block, or less for the last one.
  func length(of index: Int64) -> Int64 {
    let start = index * Int64(blockSize)
    guard let size else { return Int64(blockSize) }
    return max(0, min(Int64(blockSize), size - start))
  }

  var blockCount: Int64? {
    size.map { ($0 + Int64(blockSize) - 1) / Int64(blockSize) }
  }

  var isComplete: Bool {
    guard let count = blockCount, count > 0 else { return false }
    return Int64(blocks.count) == count
  }

  /// The blocks covering `range` (clamped to the size when known), if all are present.
  func covers(_ range: Range<Int64>) -> Range<Int64>? {
    var end = range.upperBound
    if let size { end = min(end, size) }
    guard range.lowerBound < end else { return nil }
    let first = range.lowerBound / Int64(blockSize)
    let last = (end - 1) / Int64(blockSize)
    for index in first...last where blocks[index] == nil { return nil }
    return first..<(last + 1)
  }

  // MARK: Encoding

  func encoded() -> [UInt8] {
    var buffer = ByteBuffer()
    buffer.writeBytes(Self.magic)
    buffer.writeInteger(Self.version, endianness: .little)
    buffer.writeInteger(UInt32(blockSize), endianness: .little)
    buffer.writeInteger(generation, endianness: .little)
    buffer.writeInteger(size ?? -1, endianness: .little)
    buffer.writeInteger(objectCRC ?? 0, endianness: .little)
    buffer.writeInteger(UInt8(objectCRC == nil ? 0 : 1) | (verified ? 2 : 0))
    let nameBytes = Array(name.utf8)
    buffer.writeInteger(UInt32(nameBytes.count), endianness: .little)
    buffer.writeBytes(nameBytes)
    buffer.writeInteger(UInt32(blocks.count), endianness: .little)
    for index in blocks.keys.sorted() {
      buffer.writeInteger(UInt64(index), endianness: .little)
      buffer.writeInteger(blocks[index] ?? 0, endianness: .little)
    }
    buffer.writeInteger(CRC32C.update(0, buffer), endianness: .little)
    return Array(buffer.readableBytesView)
  }

  /// The map in `bytes`; nil if they are not one whole, intact map.
  init?(decoding bytes: [UInt8]) {
    var buffer = ByteBuffer(bytes: bytes)
    guard bytes.count > 12,
      let body = buffer.getSlice(at: 0, length: bytes.count - 4),
      let sum = buffer.getInteger(at: bytes.count - 4, endianness: .little, as: UInt32.self),
      CRC32C.update(0, body) == sum
    else { return nil }
    buffer = body
    guard buffer.readBytes(length: Self.magic.count) == Self.magic,
      buffer.readInteger(endianness: .little, as: UInt32.self) == Self.version,
      let blockSize = buffer.readInteger(endianness: .little, as: UInt32.self), blockSize > 0,
      let generation = buffer.readInteger(endianness: .little, as: Int64.self),
      let size = buffer.readInteger(endianness: .little, as: Int64.self),
      let crc = buffer.readInteger(endianness: .little, as: UInt32.self),
      let flags = buffer.readInteger(as: UInt8.self),
      let nameLength = buffer.readInteger(endianness: .little, as: UInt32.self),
      let name = buffer.readString(length: Int(nameLength)),
      let count = buffer.readInteger(endianness: .little, as: UInt32.self),
      buffer.readableBytes == Int(count) * 12
    else { return nil }
    self.init(name: name, generation: generation, blockSize: Int(blockSize))
    self.size = size >= 0 ? size : nil
    self.objectCRC = flags & 1 != 0 ? crc : nil
    self.verified = flags & 2 != 0
    for _ in 0..<count {
      guard let index = buffer.readInteger(endianness: .little, as: UInt64.self),
        let blockCRC = buffer.readInteger(endianness: .little, as: UInt32.self), index < UInt64(Int64.max)
      else { return nil }
      blocks[Int64(index)] = blockCRC
    }
    if let blockCount, blocks.keys.contains(where: { $0 >= blockCount }) { return nil }
  }
}

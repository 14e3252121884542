import NIOCore
import ObjectStore
import XCTest

@testable import ContentCache

final class BlockMapTests: XCTestCase {
  func testAMapSurvivesItsEncodingAndNothingDamagedDecodes() {
    var map = BlockMap(name: "dir/ü", generation: 1_700_000_000_000_001, blockSize: 65536)
    map.size = 200_000
    map.objectCRC = 0xdead_beef
    map.blocks = [0: 1, 3: 0xffff_ffff]
    let bytes = map.encoded()
    XCTAssertEqual(BlockMap(decoding: bytes), map)
    XCTAssertEqual(map.storedBytes, 65536 + (200_000 - 3 * 65536))
    for cut in [0, 1, bytes.count / 2, bytes.count - 1] {
      XCTAssertNil(BlockMap(decoding: Array(bytes.prefix(cut))), "cut at \(cut)")
    }
    var flipped = bytes
    flipped[20] ^= 1
    XCTAssertNil(BlockMap(decoding: flipped))
  }

  func testWholeBlocksOfARange() {
    let b = ReadCache.blockSize
    XCTAssertEqual(ReadCache.wholeBlocks(from: 0, to: b - 1, size: nil), [])
    XCTAssertEqual(ReadCache.wholeBlocks(from: 1, to: 3 * b, size: nil), [1, 2])
    XCTAssertEqual(ReadCache.wholeBlocks(from: 0, to: b + 10, size: b + 10), [0, 1])
    XCTAssertEqual(ReadCache.wholeBlocks(from: 0, to: b + 10, size: nil), [0])
  }

  /// The hardware path against the bitwise definition, at every alignment and tail length.
  func testCRC32CAgreesWithTheDefinition() {
    func reference(_ bytes: ArraySlice<UInt8>) -> UInt32 {
      var crc: UInt32 = 0xffff_ffff
      for byte in bytes {
        crc ^= UInt32(byte)
        for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ 0x82f6_3b78 : crc >> 1 }
      }
      return ~crc
    }
    let data = pattern(300)
    for start in 0..<9 {
      for end in stride(from: start, through: 300, by: 7) {
        XCTAssertEqual(CRC32C.update(0, ByteBuffer(bytes: data[start..<end])), reference(data[start..<end]))
      }
    }
    XCTAssertEqual(CRC32C.value(base64: CRC32C.base64(0xE306_9283)), 0xE306_9283)
    XCTAssertNil(CRC32C.value(base64: "AAAA"))
  }

  /// The whole-entry check combines the blocks' sums: the same as summing the object.
  func testTheBlocksSumsCombineToTheObjectsChecksum() {
    for size in [1, 65536, 65537, 3 * 65536, 200_000, 1_000_003] {
      let data = pattern(size, seed: UInt8(size % 251))
      var map = BlockMap(name: "f", generation: 1, blockSize: 65536)
      map.size = Int64(size)
      var at = 0
      while at < size {
        let end = min(at + 65536, size)
        map.blocks[Int64(at / 65536)] = data[at..<end].withUnsafeBytes { CRC32C.update(0, $0) }
        at = end
      }
      let whole = data.withUnsafeBytes { CRC32C.update(0, $0) }
      XCTAssertEqual(ReadCache.objectSum(map), whole, "size \(size)")
      map.blocks[0] = map.blocks[0]! ^ 1
      XCTAssertNotEqual(ReadCache.objectSum(map), whole, "size \(size), a block's sum changed")
      map.blocks[0] = nil
      XCTAssertNil(ReadCache.objectSum(map), "size \(size), incomplete")
    }
  }
}

import NIOCore
import ObjectStore
import XCTest

@testable import CloudStorage

/// The checksum a lost upload answer is recognised by must be the service's.
final class CRC32CTests: XCTestCase {
  func testKnownVectorsAndTheServicesEncoding() {
    // RFC 3720's check value for "123456789".
    XCTAssertEqual(CRC32C.update(0, ByteBuffer(string: "123456789")), 0xE306_9283)
    XCTAssertEqual(CRC32C.update(0, ByteBuffer()), 0)
    // The service's crc32c of an empty object, and of "hello" (fake-gcs-server agrees).
    XCTAssertEqual(CRC32C.base64(0), "AAAAAA==")
    XCTAssertEqual(CRC32C.base64(CRC32C.update(0, ByteBuffer(string: "hello"))), "mnG7TA==")
  }

  func testPiecesCombine() {
    let whole = ByteBuffer(bytes: (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
    let first = whole.getSlice(at: 0, length: 33_333)!
    let rest = whole.getSlice(at: 33_333, length: 100_000 - 33_333)!
    XCTAssertEqual(CRC32C.update(CRC32C.update(0, first), rest), CRC32C.update(0, whole))
  }

  /// Long inputs run three chains side by side (crc32c.c): the same sum as
  /// pieces short enough for one chain, at any length and alignment.
  /// A composite's sum from its sources' (what a compose is checked
  /// against): the whole's sum, and unknown when one source's is.
  func testSourcesConcatenateIntoTheWholesSum() {
    let bytes = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 7 ^ ($0 >> 3)) }
    let cuts = [0, 1, 4096, 4097, 10_000]
    let pieces = zip(cuts, cuts.dropFirst()).map { lower, upper in
      (
        crc32c: Optional(CRC32C.update(0, ByteBuffer(bytes: bytes[lower..<upper]))),
        size: Int64(upper - lower)
      )
    }
    XCTAssertEqual(CRC32C.concatenated(pieces), CRC32C.update(0, ByteBuffer(bytes: bytes)))
    XCTAssertEqual(CRC32C.concatenated([]), 0)
    XCTAssertNil(CRC32C.concatenated(pieces + [(crc32c: nil, size: 5)]))
  }

  func testThreeChainsSumAsOne() {
    var generator = SystemRandomNumberGenerator()
    let bytes = (0..<300_007).map { _ in UInt8.random(in: 0...255, using: &generator) }
    for (start, count) in [(0, 300_007), (3, 24_576), (5, 24_575), (1, 49_153), (7, 200_000)] {
      let whole = CRC32C.update(0, ByteBuffer(bytes: bytes[start..<(start + count)]))
      var pieces: UInt32 = 0
      var at = start
      while at < start + count {
        let end = min(at + 4099, start + count)
        pieces = CRC32C.update(pieces, ByteBuffer(bytes: bytes[at..<end]))
        at = end
      }
      XCTAssertEqual(whole, pieces, "\(count) bytes at \(start)")
    }
  }

  /// An object's sum from its blocks' sums, a short last block included.
  func testBlocksJoinIntoTheWholesSum() {
    let bytes = (0..<(5 * 4096 + 777)).map { UInt8(truncatingIfNeeded: $0 &* 11 ^ $0 >> 5) }
    let blocks = stride(from: 0, to: bytes.count, by: 4096).map { start in
      CRC32C.update(0, ByteBuffer(bytes: bytes[start..<min(start + 4096, bytes.count)]))
    }
    XCTAssertEqual(
      CRC32C.joined(blocks, blockSize: 4096, size: Int64(bytes.count)),
      CRC32C.update(0, ByteBuffer(bytes: bytes)))
    XCTAssertEqual(
      CRC32C.joined(Array(blocks.prefix(5)), blockSize: 4096, size: 5 * 4096),
      CRC32C.update(0, ByteBuffer(bytes: bytes[0..<(5 * 4096)])))
  }

  /// A shift is `combine` with a zero second checksum: the sum of the
  /// bytes followed by as many more whose own checksum is 0.
  func testAShiftIsACombineWithAZeroSum() {
    let bytes = ByteBuffer(string: "123456789")
    let crc = CRC32C.update(0, bytes)
    for length: Int64 in [1, 3, 4096, 65536, 1_000_003] {
      XCTAssertEqual(CRC32C.Shift(length: length)(crc), CRC32C.combine(crc, 0, lengthB: length), "\(length)")
    }
    let later = ByteBuffer(string: "abcdefgh")
    let laterCRC = CRC32C.update(0, later)
    XCTAssertEqual(
      CRC32C.Shift(length: Int64(later.readableBytes))(crc) ^ laterCRC,
      CRC32C.update(crc, later))
  }
}

import NIOCore
import ObjectStore
import XCTest

@testable import BucketFS

/// The CRC-32C of an object from whatever one open file fetched
/// (docs/SEMANTICS.md#integrity-what-is-checked-against-crc32c).
final class ObjectSumTests: XCTestCase {
  private let data: [UInt8] = (0..<((1 << 20) + 5000)).map { UInt8(truncatingIfNeeded: $0 &* 7 ^ $0 >> 9) }
  private var expected: UInt32 { CRC32C.update(0, ByteBuffer(bytes: data)) }

  /// Adds bytes `range` as a fetch does: cut, each piece summed; `flip` changes one byte first.
  private func fetch(_ sum: inout ObjectSum, _ range: Range<Int>, flip: Int? = nil) {
    var bytes = Array(data[range])
    if let flip { bytes[flip - range.lowerBound] ^= 1 }
    for piece in sum.cuts(UInt64(range.lowerBound)..<UInt64(range.upperBound)) {
      let lower = Int(piece.lowerBound) - range.lowerBound
      let upper = Int(piece.upperBound) - range.lowerBound
      sum.add(piece, sum: CRC32C.update(0, ByteBuffer(bytes: bytes[lower..<upper])))
    }
  }

  func testFetchesCombineInAnyOrderAndAGapLeavesTheVerdictOpen() {
    var sum = ObjectSum(size: UInt64(data.count), expected: expected)
    fetch(&sum, 600_000..<data.count)
    fetch(&sum, 262_144..<600_000)
    XCTAssertEqual(sum.verdict, .open, "bytes [0, 256 KiB) are not in")
    fetch(&sum, 0..<262_144)
    XCTAssertEqual(sum.verdict, .matched)
  }

  func testAFlippedByteIsAMismatch() {
    var sum = ObjectSum(size: UInt64(data.count), expected: expected)
    fetch(&sum, 0..<500_000)
    fetch(&sum, 500_000..<data.count, flip: 800_000)
    guard case .mismatched = sum.verdict else { return XCTFail("\(sum.verdict)") }
  }

  /// Segments fetched again from another page after a failure straddle the
  /// bytes summed: their pieces still line up.
  func testFetchesThatOverlapAtOtherPagesStillClose() {
    var sum = ObjectSum(size: UInt64(data.count), expected: expected)
    fetch(&sum, 0..<(300 << 10))
    fetch(&sum, (700 << 10)..<data.count)
    fetch(&sum, (128 << 10)..<(720 << 10))
    XCTAssertEqual(sum.verdict, .matched)
  }

  func testABlockOrPageFetchedAgainWithOtherBytesIsAMismatchAtOnce() {
    var whole = ObjectSum(size: UInt64(data.count), expected: expected)
    fetch(&whole, 0..<262_144)
    fetch(&whole, 0..<262_144, flip: 10)
    guard case .mismatched = whole.verdict else { return XCTFail("a block: \(whole.verdict)") }

    var page = ObjectSum(size: UInt64(data.count), expected: expected)
    fetch(&page, 4096..<40960)
    fetch(&page, 8192..<12288, flip: 9000)
    guard case .mismatched = page.verdict else { return XCTFail("a page: \(page.verdict)") }
  }

  func testARightFetchTwiceIsNoMismatch() {
    var sum = ObjectSum(size: UInt64(data.count), expected: expected)
    fetch(&sum, 0..<(600 << 10))
    fetch(&sum, (4 << 10)..<(520 << 10))
    fetch(&sum, (500 << 10)..<data.count)
    XCTAssertEqual(sum.verdict, .matched)
  }

  /// A reader the budget keeps short gets segments of odd sizes: every
  /// block is cut into pages, far more than are kept at once, and the sum
  /// still closes (a block's pages go once it is whole).
  func testManyOddFetchesStillClose() {
    let size = 16 << 20
    let big: [UInt8] = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 13 ^ $0 >> 7) }
    var sum = ObjectSum(size: UInt64(size), expected: CRC32C.update(0, ByteBuffer(bytes: big)))
    var start = 0
    while start < size {
      let end = min(start + 100_003, size)
      for piece in sum.cuts(UInt64(start)..<UInt64(end)) {
        sum.add(
          piece, sum: CRC32C.update(0, ByteBuffer(bytes: big[Int(piece.lowerBound)..<Int(piece.upperBound)])))
      }
      start = end
    }
    XCTAssertEqual(sum.verdict, .matched)
  }

  func testBlocksStayFewForAHugeObject() {
    let huge = ObjectSum(size: 1 << 40, expected: 0)
    XCTAssertLessThanOrEqual((1 << 40) / huge.blockSize, ObjectSum.maxBlocks)
    XCTAssertEqual(ObjectSum(size: 1 << 30, expected: 0).blockSize, 256 << 10)
    XCTAssertEqual(ObjectSum(size: 0, expected: 0).verdict, .matched)
  }
}

import ObjectStore
import XCTest

@testable import BucketFS

/// The CRC-32C of a file written in order, taken from its writes
/// (``AppendSums``): what an upload declares without reading the stage.
final class AppendSumsTests: XCTestCase {
  private let step = Int(AppendSums.step)

  private func bytes(_ count: Int) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: ($0 &* 131) ^ ($0 >> 7)) }
  }

  private func crc(_ bytes: ArraySlice<UInt8>) -> UInt32 {
    bytes.withUnsafeBytes { CRC32C.update(0, $0) }
  }

  /// `data` written in order in writes of `sizes`, taken in turn.
  private func written(_ data: [UInt8], in sizes: [Int]) -> AppendSums {
    var sums = AppendSums()
    var at = 0
    var turn = 0
    while at < data.count {
      let count = min(sizes[turn % sizes.count], data.count - at)
      let start = sums.start(at: Int64(at))
      XCTAssertNotNil(start)
      sums.add(
        start.map { from in data[at..<at + count].withUnsafeBytes { AppendSums.Written($0, from: from) } })
      at += count
      turn += 1
    }
    return sums
  }

  func testARangeBetweenMarksHasTheSumOfItsBytesWhateverTheWrites() {
    let data = bytes(3 * (1 << 20) + 1000)
    let sums = written(data, in: [1000, 128 << 10, 300_001, 1 << 20, 7])
    for lower in stride(from: 0, to: data.count, by: step) {
      for upper in [lower + step, lower + 4 * step, data.count] where upper <= data.count {
        XCTAssertEqual(
          sums.sum(of: Int64(lower)..<Int64(upper)), crc(data[lower..<upper]), "bytes \(lower)..<\(upper)")
      }
    }
    XCTAssertEqual(sums.end, AppendSums.Mark(offset: Int64(data.count), sum: crc(data[...])))
    XCTAssertNil(sums.sum(of: 1000..<Int64(step)), "1000 is no mark: those bytes are read to be summed")
    XCTAssertNil(sums.sum(of: 0..<Int64(data.count + step)), "past what was written")
  }

  func testAWriteElsewhereOrOneNotSummedEndsTheSums() {
    let data = bytes(2 * step)
    var sums = written(data, in: [step])
    XCTAssertNil(sums.start(at: 10), "a write before the end is not summed")
    let elsewhere = data[0..<10].withUnsafeBytes {
      AppendSums.Written($0, from: AppendSums.Mark(offset: 10, sum: 0))
    }
    sums.add(elsewhere)
    XCTAssertNil(sums.end)
    XCTAssertNil(sums.sum(of: 0..<Int64(step)))
    var unsummed = written(data, in: [step])
    unsummed.add(nil)
    XCTAssertNil(unsummed.sum(of: 0..<Int64(2 * step)))
    XCTAssertNil(unsummed.start(at: Int64(2 * step)))
  }

  func testForgottenMarksGiveNoSumAndTheRestAndTheWholeStay() {
    let data = bytes(4 * step)
    var sums = written(data, in: [64 << 10])
    sums.forget(below: Int64(2 * step))
    XCTAssertNil(sums.sum(of: Int64(step)..<Int64(2 * step)))
    XCTAssertNil(sums.sum(of: 0..<Int64(step)))
    XCTAssertEqual(sums.sum(of: 0..<Int64(4 * step)), crc(data[...]), "the whole file's sum stays")
    XCTAssertEqual(sums.sum(of: Int64(2 * step)..<Int64(3 * step)), crc(data[(2 * step)..<(3 * step)]))
    XCTAssertEqual(sums.sum(of: Int64(2 * step)..<Int64(4 * step)), crc(data[(2 * step)...]))
  }

  /// A file that never streams keeps at most so many marks (16,384 by
  /// default); its whole sum holds however long it grows.
  func testMarksStopAtTheirBoundAndTheWholeSumStays() {
    let piece = bytes(step)
    var sums = AppendSums(maxMarks: 16)
    var expected: UInt32 = 0
    let writes = 24
    for index in 0..<writes {
      let start = sums.start(at: Int64(index * step))
      sums.add(start.map { from in piece.withUnsafeBytes { AppendSums.Written($0, from: from) } })
      expected = piece.withUnsafeBytes { CRC32C.update(expected, $0) }
    }
    let total = Int64(writes * step)
    XCTAssertEqual(sums.end?.sum, expected)
    XCTAssertEqual(sums.sum(of: 0..<total), expected)
    XCTAssertNotNil(sums.sum(of: 0..<Int64(step)), "the first marks are kept")
    XCTAssertNil(sums.sum(of: total - 2 * Int64(step)..<total - Int64(step)), "past the bound, no marks")
  }
}

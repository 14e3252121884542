import NIOCore
import ObjectStore
import XCTest

@testable import BucketFS

/// One deadline per read as the user sees it (ReadDeadlines).
final class ReadDeadlineTests: XCTestCase {
  let start = NIODeadline.uptimeNanoseconds(1_000_000_000_000)

  func at(_ seconds: Double) -> NIODeadline { start + .milliseconds(Int64(seconds * 1000)) }

  func testReadsOfAnObjectShareTheFirstDeadlineThenTryOnce() {
    var deadlines = ReadDeadlines(seconds: 60)
    let first = deadlines.begin("f", now: at(0))
    XCTAssertEqual(first.deadline, at(60))
    XCTAssertTrue(first.retries)
    // Another read while the first is under way: the same deadline, not a new one.
    let joined = deadlines.begin("f", now: at(30))
    XCTAssertEqual(joined.deadline, at(60))
    // Another object has its own.
    XCTAssertEqual(deadlines.begin("g", now: at(30)).deadline, at(90))

    // The first gives up at its deadline; the joined one too.
    deadlines.end("f", StorageError.unavailable("503"), now: at(60))
    deadlines.end("f", StorageError.unavailable("503"), now: at(60))
    // The kernel's retry right after: one attempt, no deadline of its own.
    let retry = deadlines.begin("f", now: at(60.1))
    XCTAssertFalse(retry.retries)
    XCTAssertNil(retry.deadline)
    deadlines.end("f", StorageError.unavailable("503"), now: at(61))
    XCTAssertFalse(deadlines.begin("f", now: at(100)).retries, "still known bad")
    deadlines.end("f", CancellationError(), now: at(100))

    // The service is back: that one attempt succeeds and clears the trouble.
    XCTAssertFalse(deadlines.begin("f", now: at(110)).retries)
    deadlines.end("f", nil, now: at(110))
    let fresh = deadlines.begin("f", now: at(111))
    XCTAssertEqual(fresh.deadline, at(171))
    XCTAssertTrue(fresh.retries)
  }

  func testTroubleIsForgottenAfterTheDeadlinesLength() {
    var deadlines = ReadDeadlines(seconds: 10)
    _ = deadlines.begin("f", now: at(0))
    deadlines.end("f", StorageError.unavailable("stall"), now: at(10))
    XCTAssertFalse(deadlines.begin("f", now: at(15)).retries)
    deadlines.end("f", StorageError.unavailable("stall"), now: at(16))
    let later = deadlines.begin("f", now: at(30))
    XCTAssertTrue(later.retries)
    XCTAssertEqual(later.deadline, at(40))
  }

  func testObjectsThatFailedAndWereNeverReadAgainAreForgotten() {
    var deadlines = ReadDeadlines(seconds: 10)
    for i in 0..<5000 {
      _ = deadlines.begin("f\(i)", now: at(0))
      deadlines.end("f\(i)", StorageError.unavailable("503"), now: at(10))
    }
    XCTAssertEqual(deadlines.count, 5000, "still fresh: reads of them try once")
    // Long after, another storm of failures: the old ones are swept, not kept for good.
    for i in 0..<10000 {
      _ = deadlines.begin("g\(i)", now: at(30))
      deadlines.end("g\(i)", StorageError.unavailable("503"), now: at(40))
    }
    XCTAssertEqual(deadlines.count, 10000)
  }

  func testOrdinaryReadsLeaveNothingBehind() {
    var deadlines = ReadDeadlines(seconds: 60)
    for i in 0..<100 {
      _ = deadlines.begin("f\(i % 7)", now: at(Double(i)))
      deadlines.end("f\(i % 7)", i % 2 == 0 ? nil : StorageError.notFound, now: at(Double(i)))
    }
    XCTAssertEqual(deadlines.count, 0)
  }
}

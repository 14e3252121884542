import CloudStorage
import ObjectStore
import Synchronization
import XCTest

/// The token bucket behind `--max-requests-per-second` and `--max-bytes-per-second`,
/// on a clock the test moves: no real sleeps.
final class RequestLimiterTests: XCTestCase {
  func testAFullBucketLetsOneSecondsWorthThroughThenSpacesTheRest() {
    var bucket = TokenBucket(rate: 20, now: 0)
    for _ in 0..<20 { XCTAssertEqual(bucket.take(1, now: 0), 0) }
    XCTAssertEqual(bucket.take(1, now: 0), 0.05, accuracy: 1e-9)
    XCTAssertEqual(bucket.take(1, now: 0), 0.10, accuracy: 1e-9)
    // Refilled, but never past one second's worth.
    var idle = TokenBucket(rate: 20, now: 0)
    _ = idle.take(20, now: 0)
    XCTAssertEqual(idle.take(20, now: 100), 0)
    XCTAssertEqual(idle.take(1, now: 100), 0.05, accuracy: 1e-9)
  }

  /// Sent when told, N requests never put more than twice the rate into any one-second window.
  func testNoSecondCarriesMoreThanTwiceTheRate() {
    var bucket = TokenBucket(rate: 20, now: 0)
    var sent: [Double] = []
    var clock = 0.0
    for i in 0..<200 {
      if i % 37 == 0 { clock += 1.3 }  // pauses let the bucket refill
      sent.append(clock + bucket.take(1, now: clock))
    }
    sent.sort()
    for start in sent {
      let inWindow = sent.filter { $0 >= start && $0 < start + 1 }.count
      XCTAssertLessThanOrEqual(inWindow, 40)
    }
  }

  func testBytesAreLimitedLikeRequests() {
    var bucket = TokenBucket(rate: 1000, now: 0)
    XCTAssertEqual(bucket.take(1000, now: 0), 0)
    XCTAssertEqual(bucket.take(500, now: 0), 0.5, accuracy: 1e-9)
  }

  func testAdmitWaitsOnTheInjectedClockAndHonoursTheDeadline() async throws {
    let clock = Mutex(0.0)
    let slept = Mutex<[Double]>([])
    let limiter = RequestLimiter(
      requestsPerSecond: 2, bytesPerSecond: nil, now: { clock.withLock { $0 } },
      sleep: { seconds in
        slept.withLock { $0.append(seconds) }
        clock.withLock { $0 += seconds }
      })
    try await limiter.admit(byteCount: 0, deadline: 10, operation: "a")
    try await limiter.admit(byteCount: 0, deadline: 10, operation: "b")
    XCTAssertEqual(slept.withLock { $0 }, [])
    try await limiter.admit(byteCount: 0, deadline: 10, operation: "c")
    XCTAssertEqual(slept.withLock { $0 }, [0.5])
    // A turn past the deadline fails at once, without sleeping, and gives its token back.
    do {
      try await limiter.admit(byteCount: 0, deadline: clock.withLock { $0 } + 0.1, operation: "d")
      XCTFail("admitted past the deadline")
    } catch StorageError.unavailable(let message) {
      XCTAssertTrue(message.contains("deadline"), message)
    }
    XCTAssertEqual(slept.withLock { $0 }, [0.5])
    try await limiter.admit(byteCount: 0, deadline: 100, operation: "e")
    XCTAssertEqual(slept.withLock { $0 }.last ?? 0, 0.5, accuracy: 1e-9)
  }

  func testACancelledWaitIsCancelled() async {
    let limiter = RequestLimiter(
      requestsPerSecond: 1, bytesPerSecond: nil, now: { 0 }, sleep: { _ in throw CancellationError() })
    do {
      try await limiter.admit(byteCount: 0, deadline: 10, operation: "a")
      try await limiter.admit(byteCount: 0, deadline: 10, operation: "b")
      XCTFail("a cancelled wait went through")
    } catch StorageError.cancelled {
    } catch {
      XCTFail("\(error)")
    }
  }
}

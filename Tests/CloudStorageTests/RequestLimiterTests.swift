import CloudStorage
import ObjectStore
import Synchronization
import XCTest

/// The token bucket behind `--max-requests-per-second` and `--max-bytes-per-second`,
/// on a clock the test moves: no real sleeps.
final class RequestLimiterTests: XCTestCase {
  func testAFullBucketLetsHalfASecondsWorthThroughThenSpacesTheRest() {
    var bucket = TokenBucket(rate: 20, now: 0)
    for _ in 0..<10 { XCTAssertEqual(bucket.take(1, now: 0), 0) }
    XCTAssertEqual(bucket.take(1, now: 0), 0.05, accuracy: 1e-9)
    XCTAssertEqual(bucket.take(1, now: 0), 0.10, accuracy: 1e-9)
    // Refilled, but never past half a second's worth.
    var idle = TokenBucket(rate: 20, now: 0)
    _ = idle.take(10, now: 0)
    XCTAssertEqual(idle.take(10, now: 100), 0)
    XCTAssertEqual(idle.take(1, now: 100), 0.05, accuracy: 1e-9)
  }

  /// A rate under two a second still lets one request through at once.
  func testASlowRateHoldsOneWholeRequest() {
    var bucket = TokenBucket(rate: 0.5, now: 0)
    XCTAssertEqual(bucket.take(1, now: 0), 0)
    XCTAssertEqual(bucket.take(1, now: 0), 2, accuracy: 1e-9)
  }

  /// Sent when told, N requests never put more than 1.5 times the rate into
  /// any one-second window (the bound is twice).
  func testNoSecondCarriesMoreThanOneAndAHalfTimesTheRate() {
    var bucket = TokenBucket(rate: 20, now: 0)
    var sent: [Double] = []
    var clock = 0.0
    for i in 0..<200 {
      if i % 37 == 0 { clock += 1.3 }  // pauses let the bucket refill
      sent.append(clock + bucket.take(1, now: clock))
    }
    sent.sort()
    var busiest = 0
    for start in sent {
      busiest = max(busiest, sent.filter { $0 >= start && $0 < start + 1 - 1e-9 }.count)
    }
    XCTAssertLessThanOrEqual(busiest, 30)
    XCTAssertGreaterThan(busiest, 20, "the bucket's half second lets a burst through after a pause")
  }

  func testBytesAreLimitedLikeRequests() {
    var bucket = TokenBucket(rate: 1000, now: 0)
    XCTAssertEqual(bucket.take(500, now: 0), 0)
    XCTAssertEqual(bucket.take(500, now: 0), 0.5, accuracy: 1e-9)
  }

  /// A listing's bytes, known only from its answer, delay the next request.
  func testChargedAnswerBytesDelayLaterRequests() async throws {
    let clock = Mutex(0.0)
    let slept = Mutex<[Double]>([])
    let limiter = RequestLimiter(
      requestsPerSecond: nil, bytesPerSecond: 1000, now: { clock.withLock { $0 } },
      sleep: { seconds in
        slept.withLock { $0.append(seconds) }
        clock.withLock { $0 += seconds }
      })
    try await limiter.admit(byteCount: 0, deadline: 10, operation: "list")
    limiter.charge(byteCount: 1500)
    XCTAssertEqual(slept.withLock { $0 }, [])
    try await limiter.admit(byteCount: 0, deadline: 10, operation: "get")
    XCTAssertEqual(slept.withLock { $0 }.first ?? 0, 1.0, accuracy: 1e-9)
  }

  func testAdmitWaitsOnTheInjectedClockAndHonoursTheDeadline() async throws {
    let clock = Mutex(0.0)
    let slept = Mutex<[Double]>([])
    let limiter = RequestLimiter(
      requestsPerSecond: 4, bytesPerSecond: nil, now: { clock.withLock { $0 } },
      sleep: { seconds in
        slept.withLock { $0.append(seconds) }
        clock.withLock { $0 += seconds }
      })
    try await limiter.admit(byteCount: 0, deadline: 10, operation: "a")
    try await limiter.admit(byteCount: 0, deadline: 10, operation: "b")
    XCTAssertEqual(slept.withLock { $0 }, [])
    try await limiter.admit(byteCount: 0, deadline: 10, operation: "c")
    XCTAssertEqual(slept.withLock { $0 }, [0.25])
    // A turn past the deadline fails at once, without sleeping, and gives its token back.
    do {
      try await limiter.admit(byteCount: 0, deadline: clock.withLock { $0 } + 0.1, operation: "d")
      XCTFail("admitted past the deadline")
    } catch StorageError.unavailable(let message) {
      XCTAssertTrue(message.contains("deadline"), message)
    }
    XCTAssertEqual(slept.withLock { $0 }, [0.25])
    try await limiter.admit(byteCount: 0, deadline: 100, operation: "e")
    XCTAssertEqual(slept.withLock { $0 }.last ?? 0, 0.25, accuracy: 1e-9)
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

  /// Through the client: a listing page's bytes, known only from its answer,
  /// are charged, so the request after it waits for them.
  func testAListingsAnswerIsChargedToTheByteLimit() async throws {
    let clock = Mutex(0.0)
    let slept = Mutex<[Double]>([])
    let limiter = RequestLimiter(
      requestsPerSecond: nil, bytesPerSecond: 1024, now: { clock.withLock { $0 } },
      sleep: { seconds in
        slept.withLock { $0.append(seconds) }
        clock.withLock { $0 += seconds }
      })
    try await withFakeServer(limiter: limiter) { server, client in
      for index in 0..<40 {
        _ = server.store.put("d/" + String(repeating: "n", count: 60) + "\(index)", data: [1])
      }
      let page = try await client.list(ListRequest(prefix: "d/", delimiter: "/", pageSize: 100))
      XCTAssertEqual(page.items.count, 40)
      XCTAssertEqual(slept.withLock { $0 }, [], "the listing itself was sent at once")
      _ = try await client.metadata(of: "d/" + String(repeating: "n", count: 60) + "0")
      // 40 entries of well over 100 bytes each, at 1 KiB a second.
      XCTAssertGreaterThan(slept.withLock { $0 }.reduce(0, +), 3)
    }
  }
}

import CloudStorage
import Foundation
import NIOCore
import ObjectStore
import StorageFake
import XCTest

/// `--max-connections`: however many requests are under way, no more than N
/// connections to the service are open at once; a request beyond them waits
/// for a free one, and that wait still ends with its deadline or its task.
final class ConnectionLimitTests: XCTestCase {
  /// Twelve reads at once, each answered after 200 ms: the peak of connections the server saw.
  private func peakConnections(maxConnections: Int) async throws -> Int {
    var peak = 0
    try await withFakeServer(retry: .fast(attemptTimeout: 5, deadline: 10), maxConnections: maxConnections) {
      server, client in
      let meta = server.store.put("f", data: Array(repeating: 7, count: 4096))
      server.injectFaults(Array(repeating: .stall(.milliseconds(200)), count: 12), for: .media)
      try await withThrowingTaskGroup(of: Void.self) { group in
        for index in 0..<12 {
          group.addTask {
            let range = Int64(index * 100)..<Int64(index * 100 + 100)
            let bytes = try await client.read("f", generation: meta.generation, range: range, reusing: nil)
            XCTAssertEqual(bytes.readableBytes, 100)
          }
        }
        try await group.waitForAll()
      }
      XCTAssertEqual(server.requests(.media).count, 12)
      peak = server.peakConnections
    }
    return peak
  }

  func testNoMoreConnectionsThanTheLimitAreOpen() async throws {
    let peak = try await peakConnections(maxConnections: 3)
    XCTAssertEqual(peak, 3, "twelve reads at once use the three connections allowed, and no more")
  }

  /// The check above can fail: without the limit the same reads open a connection each.
  func testTheDefaultOpensMore() async throws {
    let peak = try await peakConnections(maxConnections: CloudStorageClient.defaultMaxConnections)
    XCTAssertGreaterThan(peak, 3)
  }

  /// One connection, held by a stalled read: a second read waiting for it
  /// fails at its operation's deadline, and a third one ends when its task is
  /// cancelled (an interrupted read), both long before the first is answered.
  func testAReadWaitingForAConnectionHonoursItsDeadlineAndCancellation() async throws {
    try await withFakeServer(retry: .fast(attemptTimeout: 10, deadline: 10), maxConnections: 1) {
      server, client in
      let meta = server.store.put("f", data: [1, 2, 3])
      server.injectFaults([.stall(.seconds(3))], for: .media)
      let first = Task { try await client.read("f", generation: meta.generation, range: 0..<1, reusing: nil) }
      let start = ContinuousClock.now
      while server.requests(.media).isEmpty {
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(2), "the first read never arrived")
        try await Task.sleep(for: .milliseconds(10))
      }

      let bound = OperationDeadline(deadline: .now() + .milliseconds(300))
      var error: StorageError?
      let waited = await elapsed {
        error = await storageError {
          try await OperationDeadline.$current.withValue(bound) {
            _ = try await client.read("f", generation: meta.generation, range: 1..<2, reusing: nil)
          }
        }
      }
      guard case .unavailable = error else {
        return XCTFail("expected unavailable at the deadline, got \(String(describing: error))")
      }
      XCTAssertLessThan(waited, 1.5, "ended by its deadline, not by the first read's answer")

      let third = Task { try await client.read("f", generation: meta.generation, range: 2..<3, reusing: nil) }
      try await Task.sleep(for: .milliseconds(100))
      third.cancel()
      let cancelled = await elapsed {
        guard case .cancelled? = await storageError({ try await third.value }) else {
          return XCTFail("expected cancelled")
        }
      }
      XCTAssertLessThan(cancelled, 1, "a cancelled wait ends at once")
      XCTAssertEqual(server.requests(.media).count, 1, "neither waiting read was sent")

      let answered = try await first.value
      XCTAssertEqual(answered.readableBytes, 1)
    }
  }
}

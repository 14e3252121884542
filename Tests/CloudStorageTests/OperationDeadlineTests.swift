import CloudStorage
import Foundation
import NIOCore
import ObjectStore
import StorageFake
import XCTest

/// A caller's OperationDeadline bounds the client's retries: an earlier
/// deadline ends them sooner; `retries: false` makes one attempt only.
final class OperationDeadlineTests: XCTestCase {
  func testAnEarlierOperationDeadlineEndsRetriesSooner() async throws {
    let policy = RetryPolicy.fast(attemptTimeout: 1, deadline: 5)
    try await withFakeServer(retry: policy) { server, client in
      let meta = server.store.put("f", data: [1])
      server.injectFaults(Array(repeating: .status(503), count: 100_000), for: .media)
      let bound = OperationDeadline(deadline: .now() + .milliseconds(800))
      var error: StorageError?
      let seconds = await elapsed {
        error = await storageError {
          try await OperationDeadline.$current.withValue(bound) {
            _ = try await client.read("f", generation: meta.generation, range: 0..<1, reusing: nil)
          }
        }
      }
      guard case .unavailable = error else {
        return XCTFail("expected unavailable, got \(String(describing: error))")
      }
      XCTAssertLessThan(seconds, 2, "ended by the operation's deadline, not the client's 5 s")
    }
  }

  func testNoRetriesMeansOneAttempt() async throws {
    try await withFakeServer(retry: .fast(attemptTimeout: 1, deadline: 5)) { server, client in
      let meta = server.store.put("f", data: [1])
      server.injectFaults([.status(503), .status(503)], for: .media)
      let once = OperationDeadline(deadline: nil, retries: false)
      let error = await storageError {
        try await OperationDeadline.$current.withValue(once) {
          _ = try await client.read("f", generation: meta.generation, range: 0..<1, reusing: nil)
        }
      }
      guard case .unavailable = error else {
        return XCTFail("expected unavailable, got \(String(describing: error))")
      }
      XCTAssertEqual(server.requests(.media).count, 1)
      // Without the bound the same read retries and succeeds.
      let bytes = try await client.read("f", generation: meta.generation, range: 0..<1, reusing: nil).array
      XCTAssertEqual(bytes, [1])
      XCTAssertEqual(server.requests(.media).count, 3)
    }
  }
}

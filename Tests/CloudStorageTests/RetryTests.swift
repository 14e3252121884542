import CloudStorage
import Foundation
import ObjectStore
import ServiceAccess
import StorageFake
import XCTest

/// Transient failures are retried with back-off inside a deadline, only when safe
/// (docs/SEMANTICS.md#errors-retries).
final class RetryTests: XCTestCase {
  func testListRetriesA503() async throws {
    try await withFakeServer { server, client in
      server.store.put("d/a", data: [1])
      server.injectFaults([.status(503)], for: .list)
      let page = try await client.list(ListRequest(prefix: "d/", delimiter: "/", pageSize: 10))
      XCTAssertEqual(page.items.map(\.name), ["d/a"])
      XCTAssertEqual(server.requests(.list).count, 2)
    }
  }

  func testMetadataRetriesA503() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1])
      server.injectFaults([.status(503)], for: .metadata)
      let meta = try await client.metadata(of: "f")
      XCTAssertEqual(meta.name, "f")
      XCTAssertEqual(server.requests(.metadata).count, 2)
    }
  }

  func testReadRetriesA503() async throws {
    try await withFakeServer { server, client in
      let meta = server.store.put("f", data: Array(0..<50))
      server.injectFaults([.status(503)], for: .media)
      let bytes = try await client.read("f", generation: meta.generation, range: 10..<20, reusing: nil).array
      XCTAssertEqual(bytes, Array(10..<20))
      let requests = server.requests(.media)
      XCTAssertEqual(requests.count, 2)
      XCTAssertEqual(requests.map { $0.header("Range") }, ["bytes=10-19", "bytes=10-19"])
    }
  }

  func testEveryRetryableStatusIsRetried() async throws {
    for status in [408, 429, 500, 502, 503, 504] {
      try await withFakeServer { server, client in
        server.store.put("f", data: [1])
        server.injectFaults([.status(status)], for: .metadata)
        let meta = try await client.metadata(of: "f")
        XCTAssertEqual(meta.name, "f", "\(status)")
        XCTAssertEqual(server.requests(.metadata).count, 2, "\(status)")
      }
    }
  }

  func testPatchWithPreconditionRetriesA503() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1])
      server.injectFaults([.status(503)], for: .patch)
      let after = try await client.patch(
        "f", MetadataPatch(fields: [.contentType: "text/plain"]), ifMetagenerationMatch: 1)
      XCTAssertEqual(after.contentType, "text/plain")
      XCTAssertEqual(after.metageneration, 2)
      let requests = server.requests(.patch)
      XCTAssertEqual(requests.count, 2)
      XCTAssertEqual(requests.map { $0.query["ifMetagenerationMatch"] }, ["1", "1"])
      XCTAssertEqual(requests[0].body, requests[1].body, "the retry sends the same body")
    }
  }

  func testPatchWithoutPreconditionIsNotRetried() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1])
      server.injectFaults([.status(503)], for: .patch)
      let error = await storageError {
        try await client.patch(
          "f", MetadataPatch(fields: [.contentType: "text/plain"]), ifMetagenerationMatch: nil)
      }
      guard case .unavailable = error else {
        return XCTFail("expected unavailable, got \(String(describing: error))")
      }
      XCTAssertEqual(server.requests(.patch).count, 1)
      XCTAssertNil(server.store.object("f")?.contentType)
    }
  }

  func testPatchWithoutPreconditionIsNotRetriedAfterAReset() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1])
      server.injectFaults([.resetConnection], for: .patch)
      let error = await storageError {
        try await client.patch(
          "f", MetadataPatch(fields: [.contentType: "text/plain"]), ifMetagenerationMatch: nil)
      }
      guard case .unavailable = error else {
        return XCTFail("expected unavailable, got \(String(describing: error))")
      }
      XCTAssertEqual(server.requests(.patch).count, 1)
    }
  }

  func testRetryAfterIsHonoured() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1])
      server.injectFaults([.status(429, retryAfter: 1)], for: .metadata)
      let seconds = try await elapsed {
        let meta = try await client.metadata(of: "f")
        XCTAssertEqual(meta.name, "f")
      }
      XCTAssertGreaterThanOrEqual(seconds, 0.9, "Retry-After: 1 must be waited out")
      XCTAssertLessThan(seconds, 2.5)
      XCTAssertEqual(server.requests(.metadata).count, 2)
    }
  }

  /// A Retry-After beyond the deadline cannot be honoured: give up now rather than sleep in vain.
  func testRetryAfterBeyondTheDeadlineGivesUpAtOnce() async throws {
    try await withFakeServer(retry: .fast(attemptTimeout: 1, deadline: 3)) { server, client in
      server.store.put("f", data: [1])
      server.injectFaults([.status(429, retryAfter: 120)], for: .metadata)
      var error: StorageError?
      let seconds = await elapsed {
        error = await storageError { try await client.metadata(of: "f") }
      }
      guard case .unavailable = error else {
        return XCTFail("expected unavailable, got \(String(describing: error))")
      }
      XCTAssertLessThan(seconds, 1)
      XCTAssertEqual(server.requests(.metadata).count, 1)
    }
  }

  /// Nothing listening: connection refused is transient, retried, and ends at the deadline.
  func testUnreachableServerEndsUnavailableWithinTheDeadline() async throws {
    let policy = RetryPolicy.fast(attemptTimeout: 1, deadline: 1.5)
    // A port held but not listening, so nothing else can start answering on it meanwhile.
    let refusing = try RefusingPort()
    let port = refusing.port
    let http = CloudStorageClient.makeHTTPClient(retry: policy)
    let client = CloudStorageClient(
      bucket: "bkt", endpoint: try Endpoint("127.0.0.1:\(port)"), http: http, tokens: nil, retry: policy,
      logger: testLogger())
    var error: StorageError?
    let seconds = await elapsed {
      error = await storageError { try await client.metadata(of: "f") }
    }
    try await http.shutdown()
    withExtendedLifetime(refusing) {}
    guard case .unavailable = error else {
      return XCTFail("expected unavailable, got \(String(describing: error))")
    }
    XCTAssertLessThan(seconds, policy.deadline + 1)
  }

  func testResetConnectionIsRetried() async throws {
    try await withFakeServer { server, client in
      let meta = server.store.put("f", data: Array(0..<10))
      server.injectFaults([.resetConnection], for: .media)
      server.injectFaults([.resetConnection], for: .list)
      let bytes = try await client.read("f", generation: meta.generation, range: 0..<10, reusing: nil).array
      XCTAssertEqual(bytes, Array(0..<10))
      XCTAssertEqual(server.requests(.media).count, 2)
      let page = try await client.list(ListRequest(prefix: "", delimiter: "/", pageSize: 10))
      XCTAssertEqual(page.items.map(\.name), ["f"])
      XCTAssertEqual(server.requests(.list).count, 2)
    }
  }

  /// A stalled attempt is abandoned after attemptTimeout and retried.
  func testStallLongerThanAttemptTimeoutIsRetried() async throws {
    try await withFakeServer(retry: .fast(attemptTimeout: 0.5, deadline: 3)) { server, client in
      server.store.put("f", data: [1])
      server.injectFaults([.stall(.seconds(5))], for: .metadata)
      let seconds = try await elapsed {
        let meta = try await client.metadata(of: "f")
        XCTAssertEqual(meta.name, "f")
      }
      XCTAssertGreaterThanOrEqual(seconds, 0.4, "the first attempt waited for its timeout")
      XCTAssertLessThan(seconds, 2.5, "the stalled attempt was abandoned, not waited out")
      XCTAssertEqual(server.requests(.metadata).count, 2)
    }
  }

  /// A body that stops after its first bytes is abandoned like a stalled
  /// head: the retry gives every byte, and nothing of the first is kept.
  func testABodyStalledLongerThanAttemptTimeoutIsRetried() async throws {
    let data = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 5) }
    try await withFakeServer(retry: .fast(attemptTimeout: 0.5, deadline: 3)) { server, client in
      let meta = server.store.put("f", data: data)
      server.injectFaults([.stallBody(after: 30_000, for: .seconds(5))], for: .media)
      let seconds = try await elapsed {
        let bytes = try await client.read("f", generation: meta.generation, range: 0..<100_000, reusing: nil)
        XCTAssertEqual(Array(bytes.readableBytesView), data)
      }
      XCTAssertGreaterThanOrEqual(seconds, 0.4, "the first attempt waited for its timeout")
      XCTAssertLessThan(seconds, 2.5, "the stalled body was abandoned, not waited out")
      XCTAssertEqual(server.requests(.media).count, 2)
    }
  }

  /// A body that trickles on past the deadline ends the read by it.
  func testAPersistentlyStalledBodyEndsWithinTheDeadline() async throws {
    let policy = RetryPolicy.fast(attemptTimeout: 0.5, deadline: 2)
    try await withFakeServer(retry: policy) { server, client in
      let meta = server.store.put("f", data: Array(repeating: 7, count: 50_000))
      server.injectFaults(
        Array(repeating: .stallBody(after: 1000, for: .seconds(30)), count: 100), for: .media)
      var error: StorageError?
      let seconds = await elapsed {
        error = await storageError {
          try await client.read("f", generation: meta.generation, range: 0..<50_000, reusing: nil)
        }
      }
      guard case .unavailable = error else {
        return XCTFail("expected unavailable, got \(String(describing: error))")
      }
      XCTAssertLessThan(seconds, policy.deadline + 1)
    }
  }

  /// Cancelled while its body is on the way: the read ends at once.
  func testACancelledReadEndsPromptlyMidBody() async throws {
    try await withFakeServer(retry: .fast(attemptTimeout: 5, deadline: 10)) { server, client in
      let meta = server.store.put("f", data: Array(repeating: 9, count: 50_000))
      server.injectFaults(
        Array(repeating: .stallBody(after: 1000, for: .seconds(30)), count: 10), for: .media)
      let task = Task {
        try await client.read("f", generation: meta.generation, range: 0..<50_000, reusing: nil)
      }
      for _ in 0..<600 where server.requests(.media).isEmpty {
        try await Task.sleep(for: .milliseconds(5))
      }
      XCTAssertEqual(server.requests(.media).count, 1)
      let seconds = await elapsed {
        task.cancel()
        switch await task.result {
        case .success: XCTFail("a cancelled read succeeded")
        case .failure(let error as StorageError): XCTAssertEqual(error, .cancelled)
        case .failure(is CancellationError): break
        case .failure(let error): XCTFail("expected cancelled, got \(type(of: error)): \(error)")
        }
      }
      XCTAssertLessThan(seconds, 1, "cancellation took too long")
    }
  }

  func testStallShorterThanAttemptTimeoutIsWaitedFor() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1])
      server.injectFaults([.stall(.milliseconds(300))], for: .metadata)
      let meta = try await client.metadata(of: "f")
      XCTAssertEqual(meta.name, "f")
      XCTAssertEqual(server.requests(.metadata).count, 1)
    }
  }

  func testPersistent503EndsUnavailableWithinTheDeadline() async throws {
    let policy = RetryPolicy.fast(attemptTimeout: 1, deadline: 2)
    try await withFakeServer(retry: policy) { server, client in
      server.store.put("f", data: [1])
      server.injectFaults(Array(repeating: .status(503), count: 100_000), for: .metadata)
      var error: StorageError?
      let seconds = await elapsed {
        error = await storageError { try await client.metadata(of: "f") }
      }
      guard case .unavailable = error else {
        return XCTFail("expected unavailable, got \(String(describing: error))")
      }
      XCTAssertLessThan(seconds, policy.deadline + 1)
      XCTAssertGreaterThan(seconds, policy.deadline / 2, "gave up long before the deadline")
      XCTAssertGreaterThan(server.requests(.metadata).count, 3, "retried several times")
    }
  }

  /// Stalls on every attempt: each is abandoned, and the whole operation still ends by its deadline.
  func testPersistentStallEndsWithinTheDeadline() async throws {
    let policy = RetryPolicy.fast(attemptTimeout: 0.5, deadline: 2)
    try await withFakeServer(retry: policy) { server, client in
      server.store.put("f", data: [1])
      server.injectFaults(Array(repeating: .stall(.seconds(30)), count: 100), for: .metadata)
      var error: StorageError?
      let seconds = await elapsed {
        error = await storageError { try await client.metadata(of: "f") }
      }
      guard case .unavailable = error else {
        return XCTFail("expected unavailable, got \(String(describing: error))")
      }
      XCTAssertLessThan(seconds, policy.deadline + 1)
    }
  }

  func testCancelledTaskEndsPromptly() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1])
      server.injectFaults(Array(repeating: .stall(.seconds(30)), count: 10), for: .metadata)
      let task = Task { try await client.metadata(of: "f") }
      // Let the request reach the server, then cancel.
      for _ in 0..<600 where server.requests(.metadata).isEmpty {
        try await Task.sleep(for: .milliseconds(5))
      }
      XCTAssertEqual(server.requests(.metadata).count, 1)
      let seconds = await elapsed {
        task.cancel()
        let result = await task.result
        switch result {
        case .success(let meta): XCTFail("a cancelled request succeeded: \(meta)")
        case .failure(let error as StorageError): XCTAssertEqual(error, .cancelled)
        case .failure(is CancellationError): break
        case .failure(let error): XCTFail("expected cancelled, got \(type(of: error)): \(error)")
        }
      }
      XCTAssertLessThan(seconds, 1, "cancellation took too long")
    }
  }

  func testCancelledWhileBackingOffEndsPromptly() async throws {
    try await withFakeServer(retry: .fast(attemptTimeout: 1, deadline: 10)) { server, client in
      server.store.put("f", data: [1])
      server.injectFaults([.status(429, retryAfter: 5)], for: .metadata)
      let task = Task { try await client.metadata(of: "f") }
      for _ in 0..<600 where server.requests(.metadata).isEmpty {
        try await Task.sleep(for: .milliseconds(5))
      }
      try await Task.sleep(for: .milliseconds(50))
      let seconds = await elapsed {
        task.cancel()
        let result = await task.result
        switch result {
        case .success(let meta): XCTFail("a cancelled request succeeded: \(meta)")
        case .failure(let error as StorageError): XCTAssertEqual(error, .cancelled)
        case .failure(is CancellationError): break
        case .failure(let error): XCTFail("expected cancelled, got \(type(of: error)): \(error)")
        }
      }
      XCTAssertLessThan(seconds, 1, "cancellation took too long")
      XCTAssertEqual(server.requests(.metadata).count, 1, "no attempt after cancellation")
    }
  }

  func testAlreadyCancelledTaskSendsNothing() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1])
      let task = Task {
        withUnsafeCurrentTask { $0?.cancel() }
        return try await client.metadata(of: "f")
      }
      let result = await task.result
      switch result {
      case .success(let meta): XCTFail("a cancelled request succeeded: \(meta)")
      case .failure(let error as StorageError): XCTAssertEqual(error, .cancelled)
      case .failure(is CancellationError): break
      case .failure(let error): XCTFail("expected cancelled, got \(type(of: error)): \(error)")
      }
      XCTAssertEqual(server.requests.count, 0)
    }
  }

  /// Cancelling a PATCH that cannot be retried still reports cancellation, not an outage.
  func testCancelledUnconditionalPatchIsCancelled() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1])
      server.injectFaults([.stall(.seconds(30))], for: .patch)
      let task = Task {
        try await client.patch("f", MetadataPatch(fields: [.contentType: "x"]), ifMetagenerationMatch: nil)
      }
      for _ in 0..<600 where server.requests(.patch).isEmpty { try await Task.sleep(for: .milliseconds(5)) }
      task.cancel()
      let result = await task.result
      switch result {
      case .success(let meta): XCTFail("a cancelled request succeeded: \(meta)")
      case .failure(let error as StorageError): XCTAssertEqual(error, .cancelled)
      case .failure(is CancellationError): break
      case .failure(let error): XCTFail("expected cancelled, got \(type(of: error)): \(error)")
      }
    }
  }
}

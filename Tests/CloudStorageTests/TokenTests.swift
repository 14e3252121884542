import CloudStorage
import Foundation
import ObjectStore
import StorageFake
import XCTest

/// Bearer tokens: sent on every request, refreshed once after a 401.
final class TokenTests: XCTestCase {
  struct TokenFailure: Error {}

  func testRequestsCarryTheBearerToken() async throws {
    let tokens = ScriptedTokens(fixed: "good-token")
    try await withFakeServer(tokens: tokens) { server, client in
      server.requireBearerToken = "good-token"
      let meta = server.store.put("d/f", data: Array(0..<10))
      _ = try await client.list(ListRequest(prefix: "d/", delimiter: "/", pageSize: 10))
      _ = try await client.metadata(of: "d/f")
      _ = try await client.read("d/f", generation: meta.generation, range: 0..<5, reusing: nil)
      _ = try await client.patch("d/f", MetadataPatch(fields: [.contentType: "x"]), ifMetagenerationMatch: 1)
      XCTAssertEqual(server.requests.count, 4)
      for request in server.requests {
        XCTAssertEqual(request.header("Authorization"), "Bearer good-token", "\(request)")
      }
      let calls = await tokens.calls
      XCTAssertEqual(calls, [false, false, false, false], "no refresh without a 401")
    }
  }

  func testStaleTokenIsRefreshedOnceAfterA401() async throws {
    let tokens = ScriptedTokens { _, refresh in refresh ? "fresh" : "stale" }
    try await withFakeServer(tokens: tokens) { server, client in
      server.requireBearerToken = "fresh"
      server.store.put("f", data: [1])
      let meta = try await client.metadata(of: "f")
      XCTAssertEqual(meta.name, "f")
      let requests = server.requests(.metadata)
      XCTAssertEqual(requests.count, 2, "one 401, one retry")
      XCTAssertEqual(requests.map { $0.header("Authorization") }, ["Bearer stale", "Bearer fresh"])
      let calls = await tokens.calls
      XCTAssertEqual(calls, [false, true], "exactly one refresh")
    }
  }

  /// After the one refresh, later retries (here after a 503) use the refreshed token as it is
  /// rather than forcing yet another refresh.
  func testRefreshIsNotRepeatedOnLaterRetries() async throws {
    let tokens = ScriptedTokens { call, refresh in call == 1 ? "stale" : "fresh" }
    try await withFakeServer(tokens: tokens) { server, client in
      server.requireBearerToken = "fresh"
      server.store.put("f", data: [1])
      // The 503 is scripted for the second request, the one made with the refreshed token.
      server.injectFaults([.status(503)]) { $0.header("Authorization") == "Bearer fresh" }
      let meta = try await client.metadata(of: "f")
      XCTAssertEqual(meta.name, "f")
      XCTAssertEqual(
        server.requests.map { $0.header("Authorization") }, ["Bearer stale", "Bearer fresh", "Bearer fresh"])
      let calls = await tokens.calls
      XCTAssertEqual(calls, [false, true, false], "one refresh after the 401, none after the 503")
    }
  }

  func testUnconditionalPatchIsRetriedAfterA401() async throws {
    // A 401 means the request was not applied, so even a PATCH without a precondition may go again.
    let tokens = ScriptedTokens { _, refresh in refresh ? "fresh" : "stale" }
    try await withFakeServer(tokens: tokens) { server, client in
      server.requireBearerToken = "fresh"
      server.store.put("f", data: [1])
      let after = try await client.patch(
        "f", MetadataPatch(fields: [.contentType: "x"]), ifMetagenerationMatch: nil)
      XCTAssertEqual(after.contentType, "x")
      XCTAssertEqual(server.requests(.patch).count, 2)
    }
  }

  func testTokenStillRejectedAfterRefreshIsAccessDenied() async throws {
    let tokens = ScriptedTokens(fixed: "wrong")
    try await withFakeServer(tokens: tokens) { server, client in
      server.requireBearerToken = "right"
      server.store.put("f", data: [1])
      let error = await storageError { try await client.metadata(of: "f") }
      XCTAssertEqual(error, .accessDenied("Invalid Credentials"))
      XCTAssertEqual(server.requests.count, 2, "one refresh, then give up")
      let calls = await tokens.calls
      XCTAssertEqual(calls, [false, true])
    }
  }

  func testFailingProviderIsAccessDenied() async throws {
    let tokens = ScriptedTokens { _, _ in throw TokenFailure() }
    try await withFakeServer(tokens: tokens) { server, client in
      server.store.put("f", data: [1])
      let error = await storageError { try await client.metadata(of: "f") }
      guard case .accessDenied = error else {
        return XCTFail("expected accessDenied, got \(String(describing: error))")
      }
      XCTAssertEqual(server.requests.count, 0, "nothing is sent without a token")
    }
  }
}

import AsyncHTTPClient
import CloudStorage
import Foundation
import Logging
import ObjectStore
import ServiceAccess
import StorageFake
import XCTest
import _CryptoExtras

@testable import Credentials

/// Service-account keys: a JWT signed with the test's own RSA key, verified by a local token
/// endpoint, then a bearer token at a local storage server.
final class ServiceAccountTests: XCTestCase {
  /// Runs `body` with a verifying token endpoint, a key file pointing at it, a storage fake and
  /// a client whose tokens come from the discovered provider. Everything is stopped afterwards.
  func withServiceAccount(
    expiresIn: Int = 3600, delay: Double = 0, refreshMargin: Double = 300, logger: Logger = quietLogger(),
    _ body: (JWTTokenEndpoint, any AccessTokenProvider, FakeStorageServer, CloudStorageClient) async throws ->
      Void
  ) async throws {
    let account = TestServiceAccount()
    let endpoint = JWTTokenEndpoint(account: account, expiresIn: expiresIn, delay: delay)
    let directory = try temporaryDirectory(self)
    try await withLocalServer(endpoint.handler) { tokenServer in
      let tokenURI = tokenServer.url + "/token"
      endpoint.audience.withLock { $0 = tokenURI }
      let path = try writeFile(
        directory.appendingPathComponent("key.json"), account.keyFile(tokenURI: tokenURI))
      let storage = FakeStorageServer(bucket: "bkt")
      try await storage.start()
      do {
        try await withHTTPClient { http in
          let provider = try discover(
            explicitFile: path, environment: ["HOME": directory.path], http: http,
            refreshMargin: refreshMargin,
            logger: logger,
            metadataServerAvailable: {
              XCTFail("no probe when a file is given"); return false
            })
          var retry = RetryPolicy()
          retry.initialBackoff = 0.01
          retry.maxBackoff = 0.05
          retry.deadline = 5
          let client = CloudStorageClient(
            bucket: "bkt", endpoint: try Endpoint(storage.endpoint), http: http, tokens: provider,
            retry: retry,
            logger: logger)
          try await body(endpoint, provider, storage, client)
        }
      } catch {
        try? await storage.stop()
        throw error
      }
      try await storage.stop()
    }
  }

  func testSignedAssertionIsVerifiedAndTheTokenReachesStorage() async throws {
    try await withServiceAccount { endpoint, provider, storage, client in
      XCTAssert(provider is ServiceAccountCredentials)
      storage.requireBearerToken = "token-1"
      storage.store.put("dir/file", data: Array("hello".utf8))
      let page = try await client.list(ListRequest(prefix: "dir/", delimiter: "/", pageSize: 10))
      XCTAssertEqual(page.items.map(\.name), ["dir/file"])
      let meta = try await client.metadata(of: "dir/file")
      XCTAssertEqual(meta.size, 5)

      XCTAssertEqual(endpoint.failures.current, [])
      XCTAssertEqual(endpoint.issued.current, ["token-1"], "one token for both requests")
      XCTAssertEqual(storage.requests.count, 2)
      for request in storage.requests {
        XCTAssertEqual(request.header("Authorization"), "Bearer token-1", "\(request)")
      }
    }
  }

  /// The endpoint's check is real: a key file whose private key is not the account's is refused.
  func testAssertionSignedWithAnotherKeyIsRefused() async throws {
    let account = TestServiceAccount()
    let endpoint = JWTTokenEndpoint(account: account)
    let directory = try temporaryDirectory(self)
    try await withLocalServer(endpoint.handler) { server in
      let tokenURI = server.url + "/token"
      endpoint.audience.withLock { $0 = tokenURI }
      let path = try writeFile(
        directory.appendingPathComponent("key.json"),
        account.keyFile(tokenURI: tokenURI, signingKey: TestKeys.second))
      try await withHTTPClient { http in
        let provider = try discover(explicitFile: path, environment: [:], http: http, logger: quietLogger())
        let message = await errorDescription { try await provider.token(refresh: false) }
        XCTAssertEqual(
          message,
          "token endpoint \(tokenURI) refused the credentials: HTTP 400 invalid_grant: Invalid JWT Signature."
        )
        XCTAssertEqual(endpoint.failures.current, ["Invalid JWT Signature."])
        XCTAssertEqual(endpoint.issued.current, [])
      }
    }
  }

  func testTokenIsReplacedBeforeItExpires() async throws {
    // A 2 s token with a 300 s margin is stale after half its life: reused at once, replaced
    // after a second, while it would still have been accepted for another one.
    try await withServiceAccount(expiresIn: 2) { endpoint, provider, _, _ in
      let first = try await provider.token(refresh: false)
      let again = try await provider.token(refresh: false)
      XCTAssertEqual(first, "token-1")
      XCTAssertEqual(again, "token-1")
      XCTAssertEqual(endpoint.issued.current.count, 1)
      try await Task.sleep(nanoseconds: 1_200_000_000)
      let later = try await provider.token(refresh: false)
      XCTAssertEqual(later, "token-2")
      XCTAssertEqual(endpoint.issued.current.count, 2)
      XCTAssertEqual(endpoint.failures.current, [])
    }
  }

  func testLongLivedTokenIsCached() async throws {
    try await withServiceAccount(expiresIn: 3600) { endpoint, provider, _, _ in
      for _ in 0..<5 { _ = try await provider.token(refresh: false) }
      XCTAssertEqual(endpoint.issued.current, ["token-1"])
    }
  }

  func testConcurrentCallersShareOneFetchAndOneRefresh() async throws {
    // The endpoint takes 300 ms, so all 20 callers arrive while the first fetch is under way.
    try await withServiceAccount(delay: 0.3) { endpoint, provider, _, _ in
      let tokens = try await withThrowingTaskGroup(of: String.self) { group in
        for _ in 0..<20 { group.addTask { try await provider.token(refresh: false) } }
        return try await group.reduce(into: [String]()) { $0.append($1) }
      }
      XCTAssertEqual(tokens, Array(repeating: "token-1", count: 20))
      XCTAssertEqual(endpoint.issued.current.count, 1, "exactly one token request")

      // Twenty callers that all saw a 401 force one refresh between them.
      let refreshed = try await withThrowingTaskGroup(of: String.self) { group in
        for _ in 0..<20 { group.addTask { try await provider.token(refresh: true) } }
        return try await group.reduce(into: [String]()) { $0.append($1) }
      }
      XCTAssertEqual(refreshed, Array(repeating: "token-2", count: 20))
      XCTAssertEqual(endpoint.issued.current.count, 2)
    }
  }

  func testA401RefreshesOnceAndRetries() async throws {
    try await withServiceAccount { endpoint, _, storage, client in
      storage.store.put("f", data: [1, 2, 3])
      storage.requireBearerToken = "token-1"
      _ = try await client.metadata(of: "f")
      // The service stops accepting the first token (revoked, or expired early).
      storage.requireBearerToken = "token-2"
      let meta = try await client.metadata(of: "f")
      XCTAssertEqual(meta.name, "f")
      XCTAssertEqual(
        storage.requests.map { $0.header("Authorization") },
        ["Bearer token-1", "Bearer token-1", "Bearer token-2"])
      XCTAssertEqual(endpoint.issued.current, ["token-1", "token-2"], "exactly one refresh")

      // A token that is refused even when fresh gives access denied after one refresh.
      storage.requireBearerToken = "never-issued"
      storage.resetRequests()
      do {
        _ = try await client.metadata(of: "f")
        XCTFail("expected access denied")
      } catch StorageError.accessDenied {
      }
      XCTAssertEqual(storage.requests.count, 2)
      XCTAssertEqual(endpoint.issued.current.count, 3)
    }
  }

  func testJWTLayout() throws {
    let account = TestServiceAccount()
    let file = try CredentialsFile.parse(
      Array(try account.keyFile(tokenURI: "https://oauth2.googleapis.com/token").utf8), path: "key.json")
    guard case .serviceAccount(let key) = file else { return XCTFail("not a service account: \(file)") }
    XCTAssertEqual(key.clientEmail, account.email)
    XCTAssertEqual(key.privateKeyID, account.keyID)
    let jwt = try ServiceAccountCredentials.assertion(
      key: key, scope: StorageScope.readWrite, now: 1_700_000_000)
    let parts = jwt.split(separator: ".").map(String.init)
    XCTAssertEqual(parts.count, 3)
    XCTAssertFalse(jwt.contains("=") || jwt.contains("+") || jwt.contains("/"), "base64url without padding")
    let header =
      try JSONSerialization.jsonObject(with: XCTUnwrap(base64URLDecode(parts[0]))) as? [String: String]
    XCTAssertEqual(header, ["alg": "RS256", "typ": "JWT", "kid": account.keyID])
    let claims = try JSONSerialization.jsonObject(with: XCTUnwrap(base64URLDecode(parts[1]))) as? NSDictionary
    XCTAssertEqual(
      claims,
      [
        "iss": account.email, "scope": "https://www.googleapis.com/auth/devstorage.read_write",
        "aud": "https://oauth2.googleapis.com/token", "iat": 1_700_000_000, "exp": 1_700_003_600,
      ] as NSDictionary)
    let signature = _RSA.Signing.RSASignature(rawRepresentation: try XCTUnwrap(base64URLDecode(parts[2])))
    XCTAssertTrue(
      account.key.publicKey.isValidSignature(
        signature, for: Array((parts[0] + "." + parts[1]).utf8), padding: .insecurePKCS1v1_5))
  }
}

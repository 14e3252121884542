import AsyncHTTPClient
import Foundation
import Logging
import ServiceAccess
import XCTest
import _CryptoExtras

@testable import Credentials

/// impersonated_service_account and external_account_authorized_user files, and a key of
/// another universe.
final class ImpersonationTests: XCTestCase {
  func testImpersonatedServiceAccountWithDelegatesFromAnAuthorizedUser() async throws {
    let fakes = FederationFakes(subjectToken: "unused")
    fakes.otherSources.withLock { $0 = ["user-token"] }
    let refreshSecret = "1//refresh-token-that-stays-private"
    let tokenEndpoint: LocalHTTPServer.Handler = { request in
      guard request.form["refresh_token"] == refreshSecret else {
        return .json(400, #"{"error":"invalid_grant"}"#)
      }
      return .json(200, #"{"access_token":"user-token","expires_in":3600,"token_type":"Bearer"}"#)
    }
    let directory = try temporaryDirectory(self)
    let (logger, lines) = capturingLogger()
    try await withLocalServer(fakes.handler) { iam in
      try await withLocalServer(tokenEndpoint) { oauth in
        let file: [String: Any] = [
          "type": "impersonated_service_account",
          "service_account_impersonation_url":
            iam.url + "/iam/v1/projects/-/serviceAccounts/\(FederationFakes.email):generateAccessToken",
          "delegates": ["projects/-/serviceAccounts/middle@example-project.iam.gserviceaccount.com"],
          "quota_project_id": "outer-project",
          "source_credentials": [
            "type": "authorized_user", "client_id": "cid", "client_secret": "csecret-private",
            "refresh_token": refreshSecret, "token_uri": oauth.url + "/token",
          ],
        ]
        let path = try writeFile(
          directory.appendingPathComponent("impersonated.json"),
          String(decoding: try JSONSerialization.data(withJSONObject: file), as: UTF8.self))
        try await withHTTPClient { http in
          let provider = try discover(explicitFile: path, environment: [:], http: http, logger: logger)
          XCTAssert(provider is ImpersonatedCredentials)
          XCTAssertEqual(provider.quotaProject, "outer-project")
          let token = try await provider.token(refresh: false)
          XCTAssertEqual(token, "impersonated-1")
        }
        let request = try XCTUnwrap(iam.requests.first)
        XCTAssertEqual(request.header("Authorization"), "Bearer user-token")
        XCTAssertNil(request.header("x-goog-user-project"), "the source names no quota project")
        let body = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any])
        XCTAssertEqual(
          body["delegates"] as? [String],
          ["projects/-/serviceAccounts/middle@example-project.iam.gserviceaccount.com"])
        XCTAssertEqual(body["lifetime"] as? String, "3600s")
        XCTAssertEqual(fakes.refusals.current, [])
      }
    }
    for line in lines.current {
      XCTAssertFalse(
        line.contains(refreshSecret) || line.contains("csecret-private") || line.contains("impersonated-1"),
        line)
    }
  }

  func testImpersonationRefusalIsOneLineWithoutTheSourceToken() async throws {
    let fakes = FederationFakes(subjectToken: "unused")  // knows no source token: 401
    let account = TestServiceAccount()
    let jwt = JWTTokenEndpoint(account: account, scope: "https://www.googleapis.com/auth/cloud-platform")
    try await withLocalServer(fakes.handler) { iam in
      try await withLocalServer(jwt.handler) { oauth in
        jwt.audience.withLock { $0 = oauth.url + "/token" }
        let source = try JSONSerialization.jsonObject(
          with: Data(account.keyFile(tokenURI: oauth.url + "/token").utf8))
        let file: [String: Any] = [
          "type": "impersonated_service_account",
          "service_account_impersonation_url":
            iam.url + "/iam/v1/projects/-/serviceAccounts/\(FederationFakes.email):generateAccessToken",
          "source_credentials": source,
        ]
        let directory = try temporaryDirectory(self)
        let path = try writeFile(
          directory.appendingPathComponent("i.json"),
          String(decoding: try JSONSerialization.data(withJSONObject: file), as: UTF8.self))
        try await withHTTPClient { http in
          let provider = try discover(explicitFile: path, environment: [:], http: http, logger: quietLogger())
          let message = await errorDescription { try await provider.token(refresh: false) }
          XCTAssertTrue(
            message.hasPrefix("token endpoint \(iam.url)/iam/v1/projects/-/serviceAccounts/"), message)
          XCTAssertTrue(
            message.hasSuffix("refused the credentials: HTTP 401 UNAUTHENTICATED: bad token"), message)
          XCTAssertFalse(message.contains("token-1"))
        }
        XCTAssertEqual(jwt.failures.current, [], "the key's JWT asked for cloud-platform")
      }
    }
  }

  func testExternalAccountAuthorizedUser() async throws {
    let refreshToken = "workforce-refresh-token-private"
    let secret = "workforce-client-secret"
    let basic = "Basic " + Data("wf-client:\(secret)".utf8).base64EncodedString()
    let sts: LocalHTTPServer.Handler = { request in
      guard request.header("Authorization") == basic, request.form["grant_type"] == "refresh_token",
        request.form["refresh_token"] == refreshToken, request.form["client_secret"] == nil
      else { return .json(400, #"{"error":"invalid_request"}"#) }
      return .json(200, #"{"access_token":"workforce-token","expires_in":3600,"token_type":"Bearer"}"#)
    }
    try await withLocalServer(sts) { server in
      let text = try jsonObject([
        "type": "external_account_authorized_user",
        "audience": "//iam.googleapis.com/locations/global/workforcePools/p/providers/q",
        "refresh_token": refreshToken, "token_url": server.url + "/v1/oauthtoken", "client_id": "wf-client",
        "client_secret": secret, "revoke_url": "https://sts.googleapis.com/v1/revoke",
        "token_info_url": "https://sts.googleapis.com/v1/introspect", "quota_project_id": "wf-project",
      ])
      let directory = try temporaryDirectory(self)
      let path = try writeFile(directory.appendingPathComponent("wf.json"), text)
      try await withHTTPClient { http in
        let provider = try discover(explicitFile: path, environment: [:], http: http, logger: quietLogger())
        XCTAssert(provider is ExternalAccountAuthorizedUserCredentials)
        XCTAssertEqual(provider.quotaProject, "wf-project")
        let token = try await provider.token(refresh: false)
        XCTAssertEqual(token, "workforce-token")
        XCTAssertFalse("\(provider)".contains(secret) || "\(provider)".contains(refreshToken))
      }
    }
  }

  func testKeyOfAnotherUniverseSignsItsOwnJWT() async throws {
    let account = TestServiceAccount()
    var members =
      try JSONSerialization.jsonObject(
        with: Data(account.keyFile(tokenURI: "https://oauth2.example.test/token").utf8))
      as! [String: String]
    members["universe_domain"] = "example-universe.test"
    let directory = try temporaryDirectory(self)
    let path = try writeFile(directory.appendingPathComponent("k.json"), try jsonObject(members))
    XCTAssertEqual(
      discoveredUniverseDomain(explicitFile: path, accessTokenFile: nil, environment: [:]),
      "example-universe.test")
    XCTAssertNil(
      discoveredUniverseDomain(explicitFile: nil, accessTokenFile: nil, environment: ["HOME": directory.path])
    )
    let provider = try discover(explicitFile: path, environment: [:], logger: quietLogger())
    XCTAssert(provider is SelfSignedJWTCredentials)
    let jwt = try await provider.token(refresh: false)
    let again = try await provider.token(refresh: false)
    XCTAssertEqual(jwt, again, "cached")
    let parts = jwt.split(separator: ".").map(String.init)
    XCTAssertEqual(parts.count, 3)
    let claims = try XCTUnwrap(
      JSONSerialization.jsonObject(with: XCTUnwrap(base64URLDecode(parts[1]))) as? [String: Any])
    XCTAssertEqual(claims["iss"] as? String, account.email)
    XCTAssertEqual(claims["sub"] as? String, account.email)
    XCTAssertEqual(claims["scope"] as? String, StorageScope.readWrite)
    XCTAssertNil(claims["aud"])
    let signature = _RSA.Signing.RSASignature(rawRepresentation: try XCTUnwrap(base64URLDecode(parts[2])))
    XCTAssertTrue(
      account.key.publicKey.isValidSignature(
        signature, for: Array((parts[0] + "." + parts[1]).utf8), padding: .insecurePKCS1v1_5))
    XCTAssertEqual(RFC3339.seconds("2026-12-01T21:00:00Z"), 1_796_158_800)
    XCTAssertEqual(RFC3339.seconds("2026-12-01T22:00:00.5+01:00"), 1_796_158_800.5)
    XCTAssertNil(RFC3339.seconds("2026-12-01 21:00:00"))
  }
}

import AsyncHTTPClient
import CloudStorage
import Foundation
import Logging
import ObjectStore
import ServiceAccess
import StorageFake
import XCTest

@testable import Credentials

/// The other sources (metadata server, authorized user, gcloud's file, static tokens), the
/// discovery order, and the errors.
final class DiscoveryTests: XCTestCase {
  let clientID = "1234-test.apps.googleusercontent.com"
  let clientSecret = "d-FL95Q19q7MQmFpd7hHD0Ty"
  let refreshToken = "1//0gTestRefreshTokenThatMustStayPrivate-xyz"

  var authorizedUserFile: (String) throws -> String {
    { [clientID, clientSecret, refreshToken] tokenURI in
      try jsonObject([
        "type": "authorized_user", "client_id": clientID, "client_secret": clientSecret,
        "refresh_token": refreshToken, "token_uri": tokenURI, "quota_project_id": "example-project",
      ])
    }
  }

  /// A stand-in for Google's token endpoint doing the refresh-token grant for one client.
  func refreshGrantHandler(issued: Locked<Int>) -> LocalHTTPServer.Handler {
    { [clientID, clientSecret, refreshToken] request in
      let form = request.form
      guard request.method == "POST", form["grant_type"] == "refresh_token" else {
        return .json(400, #"{"error":"unsupported_grant_type"}"#)
      }
      guard form["client_id"] == clientID, form["client_secret"] == clientSecret else {
        return .json(
          401, #"{"error":"invalid_client","error_description":"The OAuth client was not found."}"#)
      }
      guard form["refresh_token"] == refreshToken else {
        return .json(400, #"{"error":"invalid_grant","error_description":"Bad Request"}"#)
      }
      let count = issued.withLock { value -> Int in
        value += 1
        return value
      }
      return .json(200, #"{"access_token":"user-token-\#(count)","expires_in":3599,"token_type":"Bearer"}"#)
    }
  }

  // MARK: Metadata server

  func testMetadataServerViaGCEMetadataHost() async throws {
    let handler: LocalHTTPServer.Handler = { request in
      guard request.header("Metadata-Flavor") == "Google" else {
        return .json(403, "Missing Metadata-Flavor:Google header.")
      }
      guard request.method == "GET",
        request.path == "/computeMetadata/v1/instance/service-accounts/default/token"
      else { return .json(404, "not found") }
      return LocalHTTPServer.Response(
        status: 200, headers: [("Content-Type", "application/json"), ("Metadata-Flavor", "Google")],
        body: #"{"access_token":"vm-token","expires_in":3599,"token_type":"Bearer"}"#)
    }
    let home = try temporaryDirectory(self)
    try await withLocalServer(handler) { server in
      try await withHTTPClient { http in
        let provider = try discover(
          explicitFile: nil,
          environment: ["HOME": home.path, "GCE_METADATA_HOST": "127.0.0.1:\(server.port)"],
          http: http, logger: quietLogger(),
          metadataServerAvailable: {
            XCTFail("GCE_METADATA_HOST set: no probe"); return false
          })
        XCTAssert(provider is MetadataServerCredentials)
        let first = try await provider.token(refresh: false)
        let second = try await provider.token(refresh: false)
        XCTAssertEqual(first, "vm-token")
        XCTAssertEqual(second, "vm-token")
        XCTAssertEqual(server.requests.count, 1, "cached")
        XCTAssertEqual(server.requests.first?.header("Metadata-Flavor"), "Google")

        // And it is the bearer token at the storage service.
        let storage = FakeStorageServer(bucket: "bkt")
        try await storage.start()
        do {
          storage.requireBearerToken = "vm-token"
          let client = CloudStorageClient(
            bucket: "bkt", endpoint: try Endpoint(storage.endpoint), http: http, tokens: provider,
            logger: quietLogger())
          _ = try await client.list(ListRequest(prefix: "", delimiter: "/", pageSize: 1))
          XCTAssertEqual(storage.requests.first?.header("Authorization"), "Bearer vm-token")
        } catch {
          try? await storage.stop()
          throw error
        }
        try await storage.stop()
      }
    }
  }

  /// An expires_in no Duration holds (1e300, "nan", "inf") or below zero
  /// is no reason to fail, nor to trap: the token is used, and asked for
  /// again when it is stale (an absurd lifetime counts as an hour).
  func testAnExpiresInOutOfRangeStillGivesTheToken() async throws {
    let home = try temporaryDirectory(self)
    for expiresIn in ["1e300", #""nan""#, #""inf""#, "-5", #""1e400""#, "9223372036854775807"] {
      let handler: LocalHTTPServer.Handler = { _ in
        LocalHTTPServer.Response(
          status: 200, headers: [("Content-Type", "application/json"), ("Metadata-Flavor", "Google")],
          body: #"{"access_token":"vm-token","expires_in":\#(expiresIn),"token_type":"Bearer"}"#)
      }
      let (logger, lines) = capturingLogger()
      try await withLocalServer(handler) { server in
        try await withHTTPClient { http in
          let provider = try discover(
            explicitFile: nil,
            environment: ["HOME": home.path, "GCE_METADATA_HOST": "127.0.0.1:\(server.port)"],
            http: http, logger: logger, metadataServerAvailable: { false })
          let token = try await provider.token(refresh: false)
          XCTAssertEqual(token, "vm-token", expiresIn)
          let again = try await provider.token(refresh: false)
          XCTAssertEqual(again, "vm-token", expiresIn)
        }
      }
      XCTAssertTrue(lines.current.contains { $0.contains("access token from") }, expiresIn)
    }
  }

  // MARK: Authorized user and gcloud's file

  func testAuthorizedUserFromTheGcloudApplicationDefaultFile() async throws {
    let issued = Locked(0)
    let config = try temporaryDirectory(self)
    try await withLocalServer(refreshGrantHandler(issued: issued)) { server in
      try writeFile(
        config.appendingPathComponent("application_default_credentials.json"),
        authorizedUserFile(server.url + "/token"))
      try await withHTTPClient { http in
        let provider = try discover(
          explicitFile: nil, environment: ["CLOUDSDK_CONFIG": config.path, "HOME": "/nonexistent"],
          http: http,
          logger: quietLogger(),
          metadataServerAvailable: {
            XCTFail("file found: no probe"); return false
          })
        XCTAssert(provider is AuthorizedUserCredentials)
        let token = try await provider.token(refresh: false)
        XCTAssertEqual(token, "user-token-1")
        let refreshed = try await provider.token(refresh: true)
        XCTAssertEqual(refreshed, "user-token-2")
        XCTAssertEqual(server.requests.count, 2)
        XCTAssertEqual(
          server.requests.first?.header("Content-Type"), "application/x-www-form-urlencoded")
      }
    }
  }

  func testApplicationDefaultFileUnderHome() throws {
    let home = try temporaryDirectory(self)
    let gcloud = home.appendingPathComponent(".config/gcloud")
    try FileManager.default.createDirectory(at: gcloud, withIntermediateDirectories: true)
    try writeFile(
      gcloud.appendingPathComponent("application_default_credentials.json"),
      authorizedUserFile("https://oauth2.googleapis.com/token"))
    XCTAssertEqual(
      applicationDefaultPath(environment: ["HOME": home.path]),
      gcloud.appendingPathComponent("application_default_credentials.json").path)
    let provider = try discover(
      explicitFile: nil, environment: ["HOME": home.path], logger: quietLogger(),
      metadataServerAvailable: { false })
    let user = try XCTUnwrap(provider as? AuthorizedUserCredentials)
    XCTAssertEqual(user.user.clientID, clientID)
    XCTAssertEqual(user.user.tokenURI, "https://oauth2.googleapis.com/token")
  }

  func testAuthorizedUserWithoutTokenURIUsesGoogle() throws {
    let text = try jsonObject([
      "type": "authorized_user", "client_id": clientID, "client_secret": clientSecret,
      "refresh_token": refreshToken,
    ])
    guard case .authorizedUser(let user) = try CredentialsFile.parse(Array(text.utf8), path: "adc.json")
    else {
      return XCTFail("not an authorized user")
    }
    XCTAssertEqual(user.tokenURI, "https://oauth2.googleapis.com/token")
    XCTAssertFalse("\(user)".contains(clientSecret) || "\(user)".contains(refreshToken))
  }

  func testRefusedRefreshGrantNamesStatusAndErrorButNoSecret() async throws {
    let issued = Locked(0)
    let directory = try temporaryDirectory(self)
    // This endpoint echoes what it was sent, as a careless proxy might.
    let echoing: LocalHTTPServer.Handler = { request in
      let sent = String(decoding: request.body, as: UTF8.self).removingPercentEncoding ?? ""
      return .json(
        400, try! jsonObject(["error": "invalid_grant", "error_description": "Bad Request: " + sent]))
    }
    try await withLocalServer(refreshGrantHandler(issued: issued)) { server in
      let wrongSecret = try jsonObject([
        "type": "authorized_user", "client_id": clientID, "client_secret": "wrong-secret-value",
        "refresh_token": refreshToken, "token_uri": server.url + "/token",
      ])
      let path = try writeFile(directory.appendingPathComponent("user.json"), wrongSecret)
      try await withHTTPClient { http in
        let provider = try discover(explicitFile: path, environment: [:], http: http, logger: quietLogger())
        let message = await errorDescription { try await provider.token(refresh: false) }
        XCTAssertEqual(
          message,
          "token endpoint \(server.url)/token refused the credentials: HTTP 401 invalid_client: "
            + "The OAuth client was not found.")
        XCTAssertFalse(message.contains("wrong-secret-value") || message.contains(refreshToken))
      }
    }
    try await withLocalServer(echoing) { server in
      let path = try writeFile(
        directory.appendingPathComponent("user2.json"), authorizedUserFile(server.url + "/t"))
      try await withHTTPClient { http in
        let provider = try discover(explicitFile: path, environment: [:], http: http, logger: quietLogger())
        let message = await errorDescription { try await provider.token(refresh: false) }
        XCTAssertTrue(
          message.hasPrefix("token endpoint \(server.url)/t refused the credentials: HTTP 400 invalid_grant"))
        XCTAssertTrue(message.contains("[redacted]"), message)
        XCTAssertFalse(message.contains(clientSecret), message)
        XCTAssertFalse(message.contains(refreshToken), message)
      }
    }
  }

  func testServiceAccountRefusalHidesTheAssertion() async throws {
    let account = TestServiceAccount()
    let directory = try temporaryDirectory(self)
    let seen = Locked<String>("")
    let echoing: LocalHTTPServer.Handler = { request in
      let assertion = request.form["assertion"] ?? ""
      seen.withLock { $0 = assertion }
      return .json(
        400, try! jsonObject(["error": "invalid_grant", "error_description": "bad assertion " + assertion]))
    }
    try await withLocalServer(echoing) { server in
      let path = try writeFile(
        directory.appendingPathComponent("key.json"), account.keyFile(tokenURI: server.url + "/token"))
      try await withHTTPClient { http in
        let provider = try discover(explicitFile: path, environment: [:], http: http, logger: quietLogger())
        let message = await errorDescription { try await provider.token(refresh: false) }
        XCTAssertEqual(
          message,
          "token endpoint \(server.url)/token refused the credentials: HTTP 400 invalid_grant: bad assertion [redacted]"
        )
        XCTAssertGreaterThan(seen.current.count, 100)
        XCTAssertFalse(message.contains(seen.current))
      }
    }
  }

  func testTransientTokenEndpointFailuresAreRetried() async throws {
    let calls = Locked(0)
    let flaky: LocalHTTPServer.Handler = { _ in
      let call = calls.withLock { value -> Int in
        value += 1
        return value
      }
      return call == 1
        ? .json(503, "{}")
        : LocalHTTPServer.Response(
          status: 200, headers: [("Content-Type", "application/json"), ("Metadata-Flavor", "Google")],
          body: #"{"access_token":"after-503","expires_in":3599,"token_type":"Bearer"}"#)
    }
    try await withLocalServer(flaky) { server in
      try await withHTTPClient { http in
        let provider = MetadataServerCredentials(
          host: "127.0.0.1:\(server.port)", http: http, logger: quietLogger())
        let token = try await provider.token(refresh: false)
        XCTAssertEqual(token, "after-503")
        XCTAssertEqual(calls.current, 2)
      }
    }
  }

  // MARK: Static tokens

  func testStaticTokenFromFileIsReReadAfterA401() async throws {
    let directory = try temporaryDirectory(self)
    let file = directory.appendingPathComponent("token")
    let path = try writeFile(file, "static-one\n")
    let provider = try discover(
      explicitFile: nil, accessTokenFile: path, environment: [accessTokenVariable: "ignored-env-token"],
      logger: quietLogger())
    var token = try await provider.token(refresh: false)
    XCTAssertEqual(token, "static-one")
    try writeFile(file, "static-two")
    token = try await provider.token(refresh: false)
    XCTAssertEqual(token, "static-one", "no reason to read it again")
    token = try await provider.token(refresh: true)
    XCTAssertEqual(token, "static-two")
  }

  func testStaticTokenFromEnvironment() async throws {
    let home = try temporaryDirectory(self)
    let provider = try discover(
      explicitFile: nil, environment: ["HOME": home.path, accessTokenVariable: " ya29.env-token \n"],
      logger: quietLogger(),
      metadataServerAvailable: {
        XCTFail("token given: no probe"); return false
      })
    let token = try await provider.token(refresh: false)
    XCTAssertEqual(token, "ya29.env-token")
    XCTAssertEqual("\(provider)", accessTokenVariable)
  }

  // MARK: Order and failures

  func testDiscoveryOrder() throws {
    let directory = try temporaryDirectory(self)
    let account = TestServiceAccount()
    let keyPath = try writeFile(
      directory.appendingPathComponent("key.json"),
      account.keyFile(tokenURI: "https://oauth2.googleapis.com/token"))
    let userPath = try writeFile(
      directory.appendingPathComponent("user.json"), authorizedUserFile("https://oauth2.googleapis.com/token")
    )
    let config = directory.appendingPathComponent("gcloud")
    try FileManager.default.createDirectory(at: config, withIntermediateDirectories: true)
    try writeFile(
      config.appendingPathComponent("application_default_credentials.json"),
      authorizedUserFile("https://oauth2.googleapis.com/token"))
    let probes = Locked(0)
    func found(_ explicit: String?, _ environment: [String: String]) throws -> any AccessTokenProvider {
      try discover(
        explicitFile: explicit, environment: environment, logger: quietLogger(),
        metadataServerAvailable: {
          probes.withLock { $0 += 1 }
          return false
        })
    }
    let everything = [
      "GOOGLE_APPLICATION_CREDENTIALS": userPath, "CLOUDSDK_CONFIG": config.path,
      "GCE_METADATA_HOST": "127.0.0.1:9",
    ]
    XCTAssert(try found(keyPath, everything) is ServiceAccountCredentials, "--credentials first")
    XCTAssert(try found(nil, everything) is AuthorizedUserCredentials, "then GOOGLE_APPLICATION_CREDENTIALS")
    XCTAssert(
      try found(nil, ["GOOGLE_APPLICATION_CREDENTIALS": keyPath, "CLOUDSDK_CONFIG": config.path])
        is ServiceAccountCredentials)
    XCTAssert(
      try found(nil, ["CLOUDSDK_CONFIG": config.path, "GCE_METADATA_HOST": "127.0.0.1:9"])
        is AuthorizedUserCredentials, "then gcloud's file")
    XCTAssert(
      try found(nil, ["HOME": directory.path, "GCE_METADATA_HOST": "127.0.0.1:9"])
        is MetadataServerCredentials,
      "then the metadata server")
    XCTAssertEqual(probes.current, 0)

    // Nothing: the probe is asked once, and the error says what to do.
    var message = ""
    XCTAssertThrowsError(try found(nil, ["HOME": directory.path])) { message = "\($0)" }
    XCTAssertEqual(probes.current, 1)
    XCTAssertTrue(message.hasPrefix("no credentials found: give --credentials FILE"), message)
    XCTAssertTrue(message.contains("--anonymous"), message)

    // A named file that is missing is an error, not a reason to look further.
    XCTAssertThrowsError(
      try found(
        nil,
        ["GOOGLE_APPLICATION_CREDENTIALS": directory.path + "/missing.json", "CLOUDSDK_CONFIG": config.path])
    ) {
      XCTAssertEqual(
        "\($0)", "cannot read credentials file \(directory.path)/missing.json: No such file or directory")
    }
    XCTAssertThrowsError(
      try discover(explicitFile: keyPath, accessTokenFile: userPath, environment: [:], logger: quietLogger()))
  }

  func testMalformedKeyFilesNameTheFieldAndHideTheKey() throws {
    let account = TestServiceAccount()
    let pem = account.key.pkcs8PEMRepresentation
    let body = account.pemBodySample
    let good =
      try JSONSerialization.jsonObject(
        with: Data(account.keyFile(tokenURI: "https://oauth2.googleapis.com/token").utf8))
      as! [String: String]
    func variant(_ change: (inout [String: String]) -> Void) throws -> [UInt8] {
      var fields = good
      change(&fields)
      return Array(try jsonObject(fields).utf8)
    }
    let broken = String(pem.dropLast(200))  // a truncated key, secret body and all
    let cases: [([UInt8], String)] = [
      (Array("{\"type\": \"service_account\", \"private_key\": \"\(body)".utf8), "not a JSON object"),
      (Array("[1, 2]".utf8), "not a JSON object"),
      (try variant { $0["private_key"] = nil }, "field private_key is missing"),
      (try variant { $0["client_email"] = "" }, "field client_email is missing"),
      (try variant { $0["type"] = nil }, "field type is missing"),
      (
        try variant { $0["private_key"] = broken },
        "field private_key is not a PEM RSA private key of 2048 bits or more"
      ),
      (
        try variant { $0["private_key"] = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" + body },
        "field private_key is not a PEM RSA private key of 2048 bits or more"
      ),
      (try variant { $0["token_uri"] = "http://example.com/token" }, "field token_uri is not an https URL"),
      (
        try variant { $0["type"] = "gdch_service_account" },
        "type gdch_service_account is not supported (only service_account, authorized_user, "
          + "external_account, impersonated_service_account and external_account_authorized_user)"
      ),
      (
        Array(#"{"type":"service_account","client_email":42,"private_key":"x"}"#.utf8),
        "field client_email is not a string"
      ),
    ]
    for (bytes, reason) in cases {
      XCTAssertThrowsError(try CredentialsFile.parse(bytes, path: "/etc/key.json")) { error in
        let text = "\(error)"
        XCTAssertEqual(text, "invalid credentials file /etc/key.json: \(reason)")
        XCTAssertFalse(text.contains(body), text)
      }
    }
  }

  func testWorldReadableFileIsWarnedAbout() throws {
    let directory = try temporaryDirectory(self)
    let text = try authorizedUserFile("https://oauth2.googleapis.com/token")
    let open = try writeFile(directory.appendingPathComponent("open.json"), text, mode: 0o644)
    let closed = try writeFile(directory.appendingPathComponent("closed.json"), text, mode: 0o600)
    let (logger, lines) = capturingLogger()
    _ = try discover(explicitFile: closed, environment: [:], logger: logger)
    XCTAssertFalse(lines.current.contains { $0.hasPrefix("warning") }, "\(lines.current)")
    _ = try discover(explicitFile: open, environment: [:], logger: logger)
    XCTAssertTrue(
      lines.current.contains(
        "warning: credentials file \(open) can be read by other users (mode 644); chmod 600 it"),
      "\(lines.current)")
  }

  func testProbeAsksTheLinkLocalAddressOnlyOnGoogleHardware() {
    XCTAssertEqual(
      MetadataServerProbe.candidates(environment: [:], firmwareSaysGoogle: false),
      ["metadata.google.internal"])
    XCTAssertEqual(
      MetadataServerProbe.candidates(environment: [:], firmwareSaysGoogle: true),
      ["169.254.169.254", "metadata.google.internal"])
    XCTAssertEqual(
      MetadataServerProbe.candidates(
        environment: ["GCE_METADATA_IP": "10.0.0.9:8080"], firmwareSaysGoogle: false),
      ["10.0.0.9:8080", "metadata.google.internal"])
  }

  // MARK: Nothing secret in the logs

  func testDebugLogsHoldNoSecret() async throws {
    let account = TestServiceAccount()
    let endpoint = JWTTokenEndpoint(account: account)
    let issued = Locked(0)
    let directory = try temporaryDirectory(self)
    let (logger, lines) = capturingLogger()
    var seenTokens: [String] = []
    try await withLocalServer(endpoint.handler) { jwtServer in
      try await withLocalServer(refreshGrantHandler(issued: issued)) { userServer in
        endpoint.audience.withLock { $0 = jwtServer.url + "/token" }
        let keyPath = try writeFile(
          directory.appendingPathComponent("key.json"), account.keyFile(tokenURI: jwtServer.url + "/token"),
          mode: 0o644)
        let userPath = try writeFile(
          directory.appendingPathComponent("user.json"), authorizedUserFile(userServer.url))
        let storage = FakeStorageServer(bucket: "bkt")
        try await storage.start()
        do {
          try await withHTTPClient { http in
            for path in [keyPath, userPath] {
              let provider = try discover(explicitFile: path, environment: [:], http: http, logger: logger)
              let token = try await provider.token(refresh: false)
              seenTokens.append(token)
              storage.requireBearerToken = token
              storage.store.put("d/f", data: Array("data".utf8))
              let client = CloudStorageClient(
                bucket: "bkt", endpoint: try Endpoint(storage.endpoint), http: http, tokens: provider,
                logger: logger)
              _ = try await client.list(ListRequest(prefix: "d/", delimiter: "/", pageSize: 10))
              _ = try await client.read(
                "d/f", generation: client.metadata(of: "d/f").generation, range: 0..<4, reusing: nil)
              // A 401 and a refresh, logged as they happen.
              storage.requireBearerToken = "something-else"
              _ = try? await client.metadata(of: "d/f")
            }
          }
        } catch {
          try? await storage.stop()
          throw error
        }
        try await storage.stop()
      }
    }
    XCTAssertEqual(seenTokens, ["token-1", "user-token-1"])
    let log = lines.current.joined(separator: "\n")
    XCTAssertTrue(log.contains("access token from"), "the fetches were logged:\n\(log)")
    XCTAssertTrue(log.contains("can be read by other users"), log)
    let pemLines = account.key.pkcs8PEMRepresentation.split(separator: "\n").filter { !$0.hasPrefix("-----") }
    for secret in [clientSecret, refreshToken, "token-1", "token-2", "user-token-1", "user-token-2"]
      + pemLines.map(String.init)
    {
      XCTAssertFalse(log.contains(secret), "\(secret) appears in the log:\n\(log)")
    }
  }
}

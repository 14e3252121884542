import AsyncHTTPClient
import CloudStorage
import Foundation
import Logging
import ObjectStore
import ServiceAccess
import StorageFake
import XCTest

@testable import Credentials

/// A stand-in for Google's Security Token Service and IAM Credentials API on one local
/// server: /sts checks the token-exchange form, /iam/...:generateAccessToken checks that the
/// bearer token is one /sts issued. Issued tokens and refusals are recorded.
final class FederationFakes: Sendable {
  let subjectToken: String
  let clientID: String?
  let clientSecret: String?
  let stsLifetime: Locked<Int>
  let iamLifetime: Locked<Int>
  let stsIssued = Locked<[String]>([])
  let iamIssued = Locked<[String]>([])
  let refusals = Locked<[String]>([])
  let refuseSTS = Locked(false)

  static let subjectTokenType = "urn:ietf:params:oauth:token-type:jwt"
  static let audience =
    "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/p/providers/q"
  static let email = "target@example-project.iam.gserviceaccount.com"

  init(subjectToken: String, clientID: String? = nil, clientSecret: String? = nil, stsLifetime: Int = 3600) {
    self.subjectToken = subjectToken
    self.clientID = clientID
    self.clientSecret = clientSecret
    self.stsLifetime = Locked(stsLifetime)
    self.iamLifetime = Locked(3600)
  }

  var handler: LocalHTTPServer.Handler { { self.answer($0) } }

  private func refuse(_ status: Int, _ reason: String) -> LocalHTTPServer.Response {
    refusals.withLock { $0.append(reason) }
    return .json(status, try! jsonObject(["error": "invalid_request", "error_description": reason]))
  }

  private func answer(_ request: LocalHTTPServer.Request) -> LocalHTTPServer.Response {
    if request.path == "/sts" {
      let form = request.form
      if refuseSTS.current {
        // Echoes the subject token, as a careless server might: it must not be shown.
        return .json(
          400,
          try! jsonObject([
            "error": "invalid_grant", "error_description": "bad subject token \(form["subject_token"] ?? "")",
          ]))
      }
      let want = [
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange", "audience": Self.audience,
        "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "subject_token_type": Self.subjectTokenType, "subject_token": subjectToken,
      ]
      for (key, value) in want where form[key] != value {
        return refuse(400, "\(key) is \(form[key] ?? "none")")
      }
      guard form["scope"] != nil else { return refuse(400, "no scope") }
      if let clientID {
        let basic = "Basic " + Data("\(clientID):\(clientSecret ?? "")".utf8).base64EncodedString()
        guard request.header("Authorization") == basic else { return refuse(401, "client authentication") }
      }
      let token = stsIssued.withLock {
        $0.append("sts-token-\($0.count + 1)")
        return $0.last!
      }
      return .json(
        200,
        #"{"access_token":"\#(token)","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer","expires_in":\#(stsLifetime.current)}"#
      )
    }
    if request.path.hasSuffix(":generateAccessToken") {
      guard let bearer = request.header("Authorization"), bearer.hasPrefix("Bearer ") else {
        return refuse(401, "no bearer")
      }
      return generateAccessToken(request, bearer: String(bearer.dropFirst(7)))
    }
    return .json(404, "{}")
  }

  /// Accepted bearer tokens beyond those /sts issued (a service account's, a user's).
  let otherSources = Locked<Set<String>>([])

  private func generateAccessToken(_ request: LocalHTTPServer.Request, bearer: String)
    -> LocalHTTPServer.Response
  {
    guard stsIssued.current.contains(bearer) || otherSources.current.contains(bearer) else {
      return .json(401, #"{"error":{"code":401,"message":"bad token","status":"UNAUTHENTICATED"}}"#)
    }
    guard request.path == "/iam/v1/projects/-/serviceAccounts/\(Self.email):generateAccessToken",
      let body = try? JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any],
      body["scope"] as? [String] == [StorageScope.readWrite], body["lifetime"] as? String != nil
    else {
      return refuse(400, "generateAccessToken request \(String(decoding: request.body, as: UTF8.self))")
    }
    let token = iamIssued.withLock {
      $0.append("impersonated-\($0.count + 1)")
      return $0.last!
    }
    let formatter = ISO8601DateFormatter()
    let expiry = formatter.string(from: Date().addingTimeInterval(Double(iamLifetime.current)))
    return .json(200, #"{"accessToken":"\#(token)","expireTime":"\#(expiry)"}"#)
  }

  func file(
    server: LocalHTTPServer, source: [String: Any], impersonate: Bool = false, extra: [String: Any] = [:]
  ) throws -> String {
    var members: [String: Any] = [
      "type": "external_account", "audience": Self.audience, "subject_token_type": Self.subjectTokenType,
      "token_url": server.url + "/sts", "credential_source": source,
    ]
    if impersonate {
      members["service_account_impersonation_url"] =
        server.url + "/iam/v1/projects/-/serviceAccounts/\(Self.email):generateAccessToken"
      members["service_account_impersonation"] = ["token_lifetime_seconds": 1800]
    }
    if let clientID { members["client_id"] = clientID }
    if let clientSecret { members["client_secret"] = clientSecret }
    members.merge(extra) { $1 }
    return String(
      decoding: try JSONSerialization.data(withJSONObject: members, options: [.sortedKeys]), as: UTF8.self)
  }
}

final class ExternalAccountTests: XCTestCase {
  let subjectToken = "eyJhbGciOiJSUzI1NiJ9.subject-token-that-stays-private.sig"

  /// The provider discovered from `text` written to a file.
  func provider(
    _ text: String, environment: [String: String] = [:], http: HTTPClient, logger: Logger = quietLogger(),
    refreshMargin: Double = TokenDefaults.refreshMargin
  ) throws -> any AccessTokenProvider {
    let directory = try temporaryDirectory(self)
    let path = try writeFile(directory.appendingPathComponent("federation.json"), text)
    return applyingQuotaProjectVariable(
      try discover(
        explicitFile: path, environment: environment, http: http, refreshMargin: refreshMargin, logger: logger
      ),
      environment: environment)
  }

  func testFileSourceTextAndJSON() async throws {
    let fakes = FederationFakes(
      subjectToken: subjectToken, clientID: "client-1", clientSecret: "client-secret-x")
    let directory = try temporaryDirectory(self)
    let text = try writeFile(directory.appendingPathComponent("token"), subjectToken + "\n", mode: 0o644)
    let json = try writeFile(
      directory.appendingPathComponent("token.json"), try jsonObject(["id_token": subjectToken]))
    try await withLocalServer(fakes.handler) { server in
      try await withHTTPClient { http in
        let plain = try provider(fakes.file(server: server, source: ["file": text]), http: http)
        XCTAssert(plain is ExternalAccountCredentials)
        let token = try await plain.token(refresh: false)
        XCTAssertEqual(token, "sts-token-1")
        let structured = try provider(
          fakes.file(
            server: server,
            source: ["file": json, "format": ["type": "json", "subject_token_field_name": "id_token"]]),
          http: http)
        let second = try await structured.token(refresh: false)
        XCTAssertEqual(second, "sts-token-2")
        XCTAssertEqual(fakes.refusals.current, [])
        // Without impersonation the exchange asks for Cloud Storage's scope.
        XCTAssertEqual(server.requests.first?.form["scope"], StorageScope.readWrite)
      }
    }
  }

  func testURLSourceWithHeadersAndImpersonationReachesStorageOnlyAsTheFinalToken() async throws {
    let fakes = FederationFakes(subjectToken: subjectToken)
    let tokenServer: LocalHTTPServer.Handler = { [subjectToken] request in
      guard request.header("Metadata") == "True", request.header("X-Other") == "2" else {
        return .json(403, "{}")
      }
      return .json(200, try! jsonObject(["access_token": subjectToken]))
    }
    try await withLocalServer(fakes.handler) { server in
      try await withLocalServer(tokenServer) { source in
        try await withHTTPClient { http in
          let credentials = try provider(
            fakes.file(
              server: server,
              source: [
                "url": source.url + "/token?resource=x", "headers": ["Metadata": "True", "X-Other": "2"],
                "format": ["type": "json", "subject_token_field_name": "access_token"],
              ], impersonate: true, extra: ["quota_project_id": "file-project"]),
            http: http)
          let storage = FakeStorageServer(bucket: "bkt")
          try await storage.start()
          do {
            let client = CloudStorageClient(
              bucket: "bkt", endpoint: try Endpoint(storage.endpoint), http: http, tokens: credentials,
              logger: quietLogger())
            _ = try await client.list(ListRequest(prefix: "", delimiter: "/", pageSize: 1))
            _ = try await client.list(ListRequest(prefix: "", delimiter: "/", pageSize: 1))
            XCTAssertEqual(storage.requests.count, 2)
            for request in storage.requests {
              XCTAssertEqual(request.header("Authorization"), "Bearer impersonated-1")
              XCTAssertEqual(request.header("x-goog-user-project"), "file-project")
            }
          } catch {
            try? await storage.stop()
            throw error
          }
          try await storage.stop()
          XCTAssertEqual(source.requests.count, 1, "cached")
          XCTAssertEqual(source.requests.first?.query, "resource=x")
          XCTAssertEqual(fakes.stsIssued.current, ["sts-token-1"])
          let sts = try XCTUnwrap(server.requests.first { $0.path == "/sts" })
          XCTAssertEqual(sts.form["scope"], "https://www.googleapis.com/auth/cloud-platform")
          XCTAssertNil(sts.header("x-goog-user-project"), "not sent to STS")
          let iam = try XCTUnwrap(server.requests.first { $0.path.hasSuffix(":generateAccessToken") })
          let body = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(iam.body)) as? [String: Any])
          XCTAssertEqual(body["lifetime"] as? String, "1800s")
          XCTAssertEqual(iam.header("x-goog-user-project"), "file-project", "as Google's libraries send it")
          XCTAssertEqual(fakes.refusals.current, [])
        }
      }
    }
  }

  func testSourceErrors() async throws {
    let fakes = FederationFakes(subjectToken: subjectToken)
    let failing: LocalHTTPServer.Handler = { [subjectToken] _ in .json(500, #"{"leak":"\#(subjectToken)"}"#) }
    let directory = try temporaryDirectory(self)
    try await withLocalServer(fakes.handler) { server in
      try await withLocalServer(failing) { source in
        try await withHTTPClient { http in
          let missing = directory.path + "/missing"
          var message = await errorDescription {
            try await provider(fakes.file(server: server, source: ["file": missing]), http: http).token(
              refresh: false)
          }
          XCTAssertEqual(
            message, "cannot get the subject token from file \(missing): No such file or directory")
          message = await errorDescription {
            try await provider(fakes.file(server: server, source: ["url": source.url + "/t"]), http: http)
              .token(refresh: false)
          }
          XCTAssertEqual(message, "cannot get the subject token from \(source.url)/t: HTTP 500")
          XCTAssertFalse(message.contains(subjectToken))

          // STS refuses, echoing the subject token: the error names the status, not the token.
          fakes.refuseSTS.withLock { $0 = true }
          let good = try writeFile(directory.appendingPathComponent("t"), subjectToken)
          message = await errorDescription {
            try await provider(fakes.file(server: server, source: ["file": good]), http: http).token(
              refresh: false)
          }
          XCTAssertEqual(
            message,
            "token endpoint \(server.url)/sts refused the credentials: HTTP 400 invalid_grant: "
              + "bad subject token [redacted]")
        }
      }
    }
  }

  func testFileErrorsNameTheField() throws {
    func reason(_ members: [String: Any]) -> String {
      var file: [String: Any] = [
        "type": "external_account", "audience": "a", "subject_token_type": "t",
        "token_url": "https://sts.googleapis.com/v1/token", "credential_source": ["file": "/x"],
      ]
      file.merge(members) { $1 }
      let bytes = Array(try! JSONSerialization.data(withJSONObject: file))
      do {
        _ = try CredentialsFile.parse(bytes, path: "f.json")
        return "parsed"
      } catch {
        return "\(error)".replacingOccurrences(of: "invalid credentials file f.json: ", with: "")
      }
    }
    XCTAssertEqual(reason([:]), "parsed")
    XCTAssertEqual(
      reason(["token_url": "http://sts.example.com/v1/token"]), "field token_url is not an https URL")
    XCTAssertEqual(
      reason(["service_account_impersonation_url": "http://iam.example.com/x:generateAccessToken"]),
      "field service_account_impersonation_url is not an https URL")
    XCTAssertEqual(
      reason(["credential_source": ["url": "http://example.com/token"]]),
      "field credential_source.url is not an https URL")
    XCTAssertEqual(
      reason(["credential_source": ["url": "http://169.254.169.254/metadata/identity"]]), "parsed")
    XCTAssertEqual(
      reason(["credential_source": [:]]),
      "field credential_source names none or more than one of file, url and executable")
    XCTAssertEqual(reason(["audience": nil as Any? as Any]), "field audience is missing")
    XCTAssertEqual(
      reason(["credential_source": ["executable": ["command": "/bin/true", "timeout_millis": 10]]]),
      "field credential_source.executable.timeout_millis is not from 5000 to 120000")
    XCTAssertEqual(
      reason(["credential_source": ["file": "/x", "format": ["type": "json"]]]),
      "field credential_source.format.subject_token_field_name is missing")
  }

  // MARK: Executables

  func script(_ body: String) throws -> String {
    let directory = try temporaryDirectory(self)
    let path = try writeFile(directory.appendingPathComponent("token.sh"), "#!/bin/sh\n" + body, mode: 0o700)
    return path
  }

  func executableAnswer(expiresIn: Double = 3600) -> String {
    try! jsonObject([
      "version": "1", "success": "true", "token_type": "urn:ietf:params:oauth:token-type:jwt",
      "id_token": subjectToken,
    ]).replacingOccurrences(of: #""1""#, with: "1").replacingOccurrences(of: #""true""#, with: "true")
      .replacingOccurrences(
        of: "}", with: #","expiration_time":\#(Int(Date().timeIntervalSince1970 + expiresIn))}"#)
  }

  func testExecutableSource() async throws {
    let fakes = FederationFakes(subjectToken: subjectToken)
    let directory = try temporaryDirectory(self)
    let seenEnvironment = directory.appendingPathComponent("env").path
    let answer = executableAnswer()
    let program = try script(
      """
      echo "$GOOGLE_EXTERNAL_ACCOUNT_AUDIENCE|$GOOGLE_EXTERNAL_ACCOUNT_TOKEN_TYPE|$GOOGLE_EXTERNAL_ACCOUNT_OUTPUT_FILE|$1" >> \(seenEnvironment)
      echo 'on stderr' >&2
      echo '\(answer)'
      """)
    let output = directory.appendingPathComponent("out.json").path
    try await withLocalServer(fakes.handler) { server in
      try await withHTTPClient { http in
        let file = try fakes.file(
          server: server,
          source: [
            "executable": [
              "command": "\(program) 'an argument'", "timeout_millis": 5000, "output_file": output,
            ]
          ])
        // Not allowed: nothing runs.
        var message = await errorDescription { try await provider(file, http: http).token(refresh: false) }
        XCTAssertEqual(
          message,
          "cannot get the subject token from executable \(program): executables must be allowed: "
            + "set GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES=1")
        XCTAssertFalse(FileManager.default.fileExists(atPath: seenEnvironment))

        let allowed = ["GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": "1", "PATH": "/usr/bin:/bin"]
        let token = try await provider(file, environment: allowed, http: http).token(refresh: false)
        XCTAssertEqual(token, "sts-token-1")
        let seen = try String(contentsOfFile: seenEnvironment, encoding: .utf8)
        XCTAssertEqual(
          seen, "\(FederationFakes.audience)|\(FederationFakes.subjectTokenType)|\(output)|an argument\n")

        // An unexpired answer in the output file is used without running the program.
        try writeFile(URL(fileURLWithPath: output), answer)
        let cached = try await provider(file, environment: allowed, http: http).token(refresh: false)
        XCTAssertEqual(cached, "sts-token-2")
        XCTAssertEqual(try String(contentsOfFile: seenEnvironment, encoding: .utf8), seen, "did not run")

        // An expired one is not: the program runs again.
        try writeFile(URL(fileURLWithPath: output), executableAnswer(expiresIn: -10))
        _ = try await provider(file, environment: allowed, http: http).token(refresh: false)
        XCTAssertEqual(
          try String(contentsOfFile: seenEnvironment, encoding: .utf8).split(separator: "\n").count, 2)

        // A program that fails, or answers an expired token, or unsuccessfully.
        for (body, want) in [
          ("echo '\(subjectToken)'; exit 3", "it exited with status 3"),
          ("echo '\(executableAnswer(expiresIn: -10))'", "the token it gave has expired"),
          (
            #"echo '{"version":1,"success":false,"code":"401","message":"not logged in"}'"#,
            "unsuccessful: code 401, message not logged in"
          ),
          ("echo 'not json \(subjectToken)'", "the answer is not a JSON object"),
        ] {
          let failing = try script(body)
          let text = try fakes.file(server: server, source: ["executable": ["command": failing]])
          message = await errorDescription {
            try await provider(text, environment: allowed, http: http).token(refresh: false)
          }
          XCTAssertEqual(message, "cannot get the subject token from executable \(failing): \(want)")
          XCTAssertFalse(message.contains(subjectToken))
        }
      }
    }
  }

  func testExecutableTimeout() async throws {
    let fakes = FederationFakes(subjectToken: subjectToken)
    let program = try script("sleep 30\n")
    try await withLocalServer(fakes.handler) { server in
      try await withHTTPClient { http in
        let file = try fakes.file(
          server: server, source: ["executable": ["command": program, "timeout_millis": 5000]])
        let started = Date()
        let message = await errorDescription {
          try await provider(
            file, environment: ["GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": "1"], http: http
          )
          .token(refresh: false)
        }
        XCTAssertEqual(
          message, "cannot get the subject token from executable \(program): it did not finish within 5000 ms"
        )
        XCTAssertLessThan(Date().timeIntervalSince(started), 15)
      }
    }
  }

  // MARK: Refresh, quota, logs

  func testRefreshBeforeExpiryByOneSharedRequest() async throws {
    let fakes = FederationFakes(subjectToken: subjectToken, stsLifetime: 2)
    let directory = try temporaryDirectory(self)
    let path = try writeFile(directory.appendingPathComponent("t"), subjectToken)
    try await withLocalServer(fakes.handler) { server in
      try await withHTTPClient { http in
        let credentials = try provider(
          fakes.file(server: server, source: ["file": path]), http: http, refreshMargin: 300)
        let first = try await credentials.token(refresh: false)
        XCTAssertEqual(first, "sts-token-1")
        try await Task.sleep(nanoseconds: 1_200_000_000)  // past half its 2 s life
        async let a = credentials.token(refresh: false)
        async let b = credentials.token(refresh: false)
        let (x, y) = try await (a, b)
        XCTAssertEqual([x, y], ["sts-token-2", "sts-token-2"])
        XCTAssertEqual(fakes.stsIssued.current.count, 2, "one shared request")
      }
    }
  }

  func testQuotaProjectFromFileAndTheVariableWins() async throws {
    let fakes = FederationFakes(subjectToken: subjectToken)
    let directory = try temporaryDirectory(self)
    let path = try writeFile(directory.appendingPathComponent("t"), subjectToken)
    try await withLocalServer(fakes.handler) { server in
      try await withHTTPClient { http in
        let text = try fakes.file(
          server: server, source: ["file": path], extra: ["quota_project_id": "from-file"])
        XCTAssertEqual(try provider(text, http: http).quotaProject, "from-file")
        XCTAssertEqual(
          try provider(text, environment: ["GOOGLE_CLOUD_QUOTA_PROJECT": "from-env"], http: http)
            .quotaProject,
          "from-env")
        let account = TestServiceAccount()
        let key = try account.keyFile(tokenURI: "https://oauth2.googleapis.com/token")
        XCTAssertNil(try provider(key, http: http).quotaProject)
        XCTAssertEqual(
          try provider(key, environment: ["GOOGLE_CLOUD_QUOTA_PROJECT": "p2"], http: http).quotaProject, "p2")
        let token = try StaticTokenCredentials(token: "static-token", origin: "test", logger: quietLogger())
        XCTAssertEqual(
          applyingQuotaProjectVariable(token, environment: ["GOOGLE_CLOUD_QUOTA_PROJECT": "p3"]).quotaProject,
          "p3")
      }
    }
  }

  func testNothingSecretReachesALogLine() async throws {
    let secret = "client-secret-never-logged"
    let fakes = FederationFakes(subjectToken: subjectToken, clientID: "client-7", clientSecret: secret)
    let directory = try temporaryDirectory(self)
    let path = try writeFile(directory.appendingPathComponent("t"), subjectToken)
    let (logger, lines) = capturingLogger()
    try await withLocalServer(fakes.handler) { server in
      try await withHTTPClient { http in
        let credentials = try provider(
          fakes.file(server: server, source: ["file": path], impersonate: true), http: http, logger: logger)
        _ = try await credentials.token(refresh: false)
        _ = try await credentials.token(refresh: true)
        fakes.refuseSTS.withLock { $0 = true }
        _ = await errorDescription { try await credentials.token(refresh: true) }
      }
    }
    let issued = fakes.stsIssued.current + fakes.iamIssued.current
    XCTAssertEqual(issued.count, 4)
    XCTAssertFalse(lines.current.isEmpty)
    for line in lines.current {
      for value in [subjectToken, secret] + issued {
        XCTAssertFalse(line.contains(value), "\(line) holds a secret")
      }
    }
  }
}

import AsyncHTTPClient
import CloudStorage
import Crypto
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceAccess
import StorageFake
import XCTest
import _CryptoExtras

@testable import Credentials

// MARK: - A local HTTP server

/// An HTTP/1.1 server on 127.0.0.1 and a free port that answers every request with `handler`
/// and records the requests.
final class LocalHTTPServer: Sendable {
  struct Request: Sendable {
    var method: String
    var path: String
    var query: String
    var headers: [(String, String)]
    var body: [UInt8]

    func header(_ name: String) -> String? {
      headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }

    /// The body as application/x-www-form-urlencoded fields.
    var form: [String: String] {
      var fields: [String: String] = [:]
      for pair in String(decoding: body, as: UTF8.self).split(separator: "&") {
        let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
        let key = String(parts[0]).removingPercentEncoding ?? ""
        let value =
          parts.count > 1
          ? String(parts[1]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding : ""
        fields[key] = value ?? ""
      }
      return fields
    }
  }

  struct Response: Sendable {
    var status: Int
    var headers: [(String, String)] = [("Content-Type", "application/json")]
    var body: String

    static func json(_ status: Int, _ body: String) -> Response { Response(status: status, body: body) }
  }

  typealias Handler = @Sendable (Request) -> Response

  private let group: MultiThreadedEventLoopGroup
  private let channel: any Channel
  private let recorded: Locked<[Request]>

  init(handler: @escaping Handler) async throws {
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    let recorded = Locked<[Request]>([])
    do {
      channel = try await ServerBootstrap(group: group)
        .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
        .childChannelInitializer { channel in
          channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.configureHTTPServerPipeline()
            try channel.pipeline.syncOperations.addHandler(
              RequestHandler(handler: handler, recorded: recorded))
          }
        }
        .bind(host: "127.0.0.1", port: 0).get()
    } catch {
      try? await group.shutdownGracefully()
      throw error
    }
    self.group = group
    self.recorded = recorded
  }

  var port: Int { channel.localAddress?.port ?? 0 }
  var url: String { "http://127.0.0.1:\(port)" }
  var requests: [Request] { recorded.current }

  func stop() async {
    try? await channel.close()
    try? await group.shutdownGracefully()
  }

  private final class RequestHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let handler: Handler
    let recorded: Locked<[Request]>
    var head: HTTPRequestHead?
    var body: [UInt8] = []

    init(handler: @escaping Handler, recorded: Locked<[Request]>) {
      self.handler = handler
      self.recorded = recorded
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
      switch unwrapInboundIn(data) {
      case .head(let head):
        self.head = head
        body = []
      case .body(let buffer):
        body += buffer.readableBytesView
      case .end:
        guard let head else { return }
        let parts = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let request = Request(
          method: head.method.rawValue, path: String(parts[0]),
          query: parts.count > 1 ? String(parts[1]) : "",
          headers: head.headers.map { ($0.name, $0.value) }, body: body)
        recorded.withLock { $0.append(request) }
        let response = handler(request)
        var headers = HTTPHeaders(response.headers)
        headers.add(name: "Content-Length", value: String(response.body.utf8.count))
        context.write(
          wrapOutboundOut(
            .head(
              HTTPResponseHead(
                version: head.version, status: HTTPResponseStatus(statusCode: response.status),
                headers: headers))),
          promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: response.body)))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        self.head = nil
      }
    }
  }
}

/// Runs `body` with a ``LocalHTTPServer``, stopping it however `body` ends.
func withLocalServer<T>(
  _ handler: @escaping LocalHTTPServer.Handler, _ body: (LocalHTTPServer) async throws -> T
) async throws -> T {
  let server = try await LocalHTTPServer(handler: handler)
  do {
    let result = try await body(server)
    await server.stop()
    return result
  } catch {
    await server.stop()
    throw error
  }
}

/// Runs `body` with an HTTP client that is shut down however `body` ends.
func withHTTPClient<T>(_ body: (HTTPClient) async throws -> T) async throws -> T {
  let http = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup)
  do {
    let result = try await body(http)
    try? await http.shutdown()
    return result
  } catch {
    try? await http.shutdown()
    throw error
  }
}

// MARK: - Logs

/// Keeps every log line, with its metadata, for inspection.
struct CapturingLogHandler: LogHandler {
  let lines: Locked<[String]>
  var logLevel: Logger.Level = .trace
  var metadata: Logger.Metadata = [:]

  subscript(metadataKey key: String) -> Logger.Metadata.Value? {
    get { metadata[key] }
    set { metadata[key] = newValue }
  }

  func log(event: LogEvent) {
    let merged = metadata.merging(event.metadata ?? [:]) { $1 }
    var line = "\(event.level): \(event.message)"
    if !merged.isEmpty { line += " \(merged)" }
    if let error = event.error { line += " error=\(error)" }
    lines.withLock { $0.append(line) }
  }
}

/// A logger at trace level whose lines land in the returned box.
func capturingLogger() -> (Logger, Locked<[String]>) {
  let lines = Locked<[String]>([])
  var logger = Logger(label: "credentials-tests") { _ in CapturingLogHandler(lines: lines) }
  logger.logLevel = .trace
  return (logger, lines)
}

func quietLogger() -> Logger {
  Logger(label: "credentials-tests", factory: { _ in SwiftLogNoOpLogHandler() })
}

// MARK: - Files

/// A fresh private directory, removed by the test's teardown.
func temporaryDirectory(_ test: XCTestCase) throws -> URL {
  let url = FileManager.default.temporaryDirectory.appendingPathComponent(
    "credentials-tests-\(UUID().uuidString)")
  try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
  test.addTeardownBlock { try? FileManager.default.removeItem(at: url) }
  return url
}

@discardableResult
func writeFile(_ url: URL, _ text: String, mode: Int = 0o600) throws -> String {
  try Data(text.utf8).write(to: url)
  try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: url.path)
  return url.path
}

func jsonObject(_ members: [String: String]) throws -> String {
  String(decoding: try JSONSerialization.data(withJSONObject: members, options: [.sortedKeys]), as: UTF8.self)
}

// MARK: - A service account and a token endpoint that checks its JWTs

/// One RSA key per test run: generating one is slow in a debug build.
enum TestKeys {
  static let first: _RSA.Signing.PrivateKey = try! _RSA.Signing.PrivateKey(keySize: .bits2048)
  static let second: _RSA.Signing.PrivateKey = try! _RSA.Signing.PrivateKey(keySize: .bits2048)
}

struct TestServiceAccount {
  var email = "bucketfs-test@example-project.iam.gserviceaccount.com"
  var keyID = "0123456789abcdef0123456789abcdef01234567"
  var key = TestKeys.first

  /// The key file the console would download, with `token_uri` pointing at `tokenURI`.
  func keyFile(tokenURI: String, signingKey: _RSA.Signing.PrivateKey? = nil) throws -> String {
    try jsonObject([
      "type": "service_account",
      "project_id": "example-project",
      "private_key_id": keyID,
      "private_key": (signingKey ?? key).pkcs8PEMRepresentation,
      "client_email": email,
      "client_id": "123456789012345678901",
      "auth_uri": "https://accounts.google.com/o/oauth2/auth",
      "token_uri": tokenURI,
    ])
  }

  /// A base64 line from the middle of the PEM body: it must never be seen outside the file.
  var pemBodySample: String {
    let lines = key.pkcs8PEMRepresentation.split(separator: "\n").filter { !$0.hasPrefix("-----") }
    return String(lines[lines.count / 2])
  }
}

/// A stand-in for oauth2.googleapis.com/token that checks the JWT bearer grant: RS256 signature
/// by the account's public key, header and claims. Issues `token-1`, `token-2`, … with
/// `expiresIn`; anything wrong is a 400 with the reason, also kept in `failures`.
final class JWTTokenEndpoint: Sendable {
  let account: TestServiceAccount
  let scope: String
  let expiresIn: Locked<Int>
  let delay: Double
  let issued = Locked<[String]>([])
  let failures = Locked<[String]>([])
  /// The token_uri written in the key file, which must come back as `aud`.
  let audience = Locked<String>("")

  init(
    account: TestServiceAccount, scope: String = StorageScope.readWrite, expiresIn: Int = 3600,
    delay: Double = 0
  ) {
    self.account = account
    self.scope = scope
    self.expiresIn = Locked(expiresIn)
    self.delay = delay
  }

  var handler: LocalHTTPServer.Handler {
    { request in self.answer(request) }
  }

  private func answer(_ request: LocalHTTPServer.Request) -> LocalHTTPServer.Response {
    if delay > 0 { usleep(UInt32(delay * 1e6)) }
    do {
      try check(request)
    } catch let failure as Failure {
      failures.withLock { $0.append(failure.reason) }
      return .json(400, try! jsonObject(["error": "invalid_grant", "error_description": failure.reason]))
    } catch {
      return .json(500, "{}")
    }
    let token = issued.withLock { issued -> String in
      issued.append("token-\(issued.count + 1)")
      return issued.last!
    }
    return .json(
      200, #"{"access_token":"\#(token)","expires_in":\#(expiresIn.current),"token_type":"Bearer"}"#)
  }

  struct Failure: Error {
    var reason: String
  }

  private func check(_ request: LocalHTTPServer.Request) throws {
    func require(_ condition: Bool, _ reason: String) throws {
      if !condition { throw Failure(reason: reason) }
    }
    try require(request.method == "POST", "method \(request.method)")
    try require(
      request.header("Content-Type") == "application/x-www-form-urlencoded", "content type")
    let form = request.form
    try require(form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer", "grant_type")
    guard let assertion = form["assertion"] else { throw Failure(reason: "no assertion") }
    let parts = assertion.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
    try require(parts.count == 3, "not a JWS compact serialization")
    guard let headerBytes = base64URLDecode(parts[0]), let claimBytes = base64URLDecode(parts[1]),
      let signatureBytes = base64URLDecode(parts[2])
    else { throw Failure(reason: "bad base64url") }
    let signature = _RSA.Signing.RSASignature(rawRepresentation: signatureBytes)
    try require(
      account.key.publicKey.isValidSignature(
        signature, for: Array((parts[0] + "." + parts[1]).utf8), padding: .insecurePKCS1v1_5),
      "Invalid JWT Signature.")
    guard let header = try JSONSerialization.jsonObject(with: headerBytes) as? [String: Any],
      let claims = try JSONSerialization.jsonObject(with: claimBytes) as? [String: Any]
    else { throw Failure(reason: "header or claims not JSON objects") }
    try require(header["alg"] as? String == "RS256", "alg")
    try require(header["typ"] as? String == "JWT", "typ")
    try require(header["kid"] as? String == account.keyID, "kid")
    try require(claims["iss"] as? String == account.email, "iss")
    try require(claims["scope"] as? String == scope, "scope")
    try require(claims["aud"] as? String == audience.current, "aud \(claims["aud"] ?? "none")")
    guard let iat = (claims["iat"] as? NSNumber)?.doubleValue,
      let exp = (claims["exp"] as? NSNumber)?.doubleValue
    else { throw Failure(reason: "iat/exp missing") }
    let now = Date().timeIntervalSince1970
    try require(abs(iat - now) <= 60, "iat \(iat) is not now (\(now))")
    try require(exp > iat && exp - iat <= 3600, "exp \(exp) is not within an hour of iat")
  }
}

func base64URLDecode(_ text: String) -> Data? {
  var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
  while base64.count % 4 != 0 { base64 += "=" }
  return Data(base64Encoded: base64)
}

/// The description of the error `body` throws; fails the test if it does not throw.
func errorDescription<T>(
  file: StaticString = #filePath, line: UInt = #line, _ body: () async throws -> T
) async -> String {
  do {
    _ = try await body()
    XCTFail("expected an error", file: file, line: line)
    return ""
  } catch {
    return "\(error)"
  }
}

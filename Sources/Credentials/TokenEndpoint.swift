import AsyncHTTPClient
import Logging
import NIOCore
import NIOHTTP1
import ServiceAccess
import TLSTrust
import TimeFormats

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

/// One OAuth token endpoint (or the metadata server's token URL): sends the request, retries
/// what is worth retrying, and turns the answer into an ``AccessToken`` or a
/// ``CredentialsError`` that holds no secret.
struct TokenEndpoint: Sendable {
  let url: String
  let http: HTTPClient
  let logger: Logger
  var timeout: TimeAmount = .seconds(30)
  /// Attempts for transient failures (connection errors, 408, 429, 5xx).
  var attempts = 3
  /// All attempts together end by then.
  var deadline: TimeAmount = .seconds(45)
  /// A header a 2xx answer must carry to count (the metadata server's `Metadata-Flavor: Google`).
  var requiredHeader: (name: String, value: String)? = nil

  /// POSTs `form` as application/x-www-form-urlencoded, with `headers` (client
  /// authentication). Any of `secrets` found in the endpoint's answer is replaced before the
  /// answer reaches an error message.
  func post(form: [(String, String)], headers: [(String, String)] = [], secrets: [String]) async throws
    -> AccessToken
  {
    try await post(
      FormEncoding.encode(form), contentType: "application/x-www-form-urlencoded", headers: headers,
      secrets: secrets, answer: .oauth)
  }

  /// POSTs a JSON `body` to the IAM Credentials API, whose answer is
  /// `{"accessToken": …, "expireTime": RFC 3339}`.
  func postJSON(_ body: String, headers: [(String, String)], secrets: [String]) async throws -> AccessToken {
    try await post(body, contentType: "application/json", headers: headers, secrets: secrets, answer: .iam)
  }

  /// POSTs `body` of `contentType`, with `headers`, asking for JSON back.
  private func post(
    _ body: String, contentType: String, headers: [(String, String)], secrets: [String], answer: AnswerKind
  ) async throws -> AccessToken {
    try await exchange(secrets: secrets, answer: answer) {
      var request = HTTPClientRequest(url: url)
      request.method = .POST
      request.headers.add(name: "Content-Type", value: contentType)
      request.headers.add(name: "Accept", value: "application/json")
      for (name, value) in headers { request.headers.add(name: name, value: value) }
      request.body = .bytes(ByteBuffer(string: body))
      return request
    }
  }

  /// GETs the token URL with `headers` (the metadata server's way).
  func get(headers: [(String, String)]) async throws -> AccessToken {
    try await exchange(secrets: [], answer: .oauth) {
      var request = HTTPClientRequest(url: url)
      request.method = .GET
      for (name, value) in headers { request.headers.add(name: name, value: value) }
      return request
    }
  }

  /// The shape of a successful answer.
  enum AnswerKind {
    case oauth
    case iam
  }

  private enum Attempt {
    case token(AccessToken)
    case retry(String, after: Double?)
  }

  private func exchange(secrets: [String], answer: AnswerKind, _ makeRequest: () -> HTTPClientRequest)
    async throws
    -> AccessToken
  {
    let giveUp = NIODeadline.now() + deadline
    var attempt = 0
    while true {
      attempt += 1
      let outcome: Attempt
      do {
        outcome = try await attemptOnce(
          makeRequest(), deadline: min(NIODeadline.now() + timeout, giveUp), secrets: secrets,
          answer: answer, last: attempt >= attempts)
      } catch let error as CredentialsError {
        throw error
      } catch {
        if Task.isCancelled || error is CancellationError { throw CancellationError() }
        // A refused certificate or a failed handshake: final, and said as such.
        if let failure = await tlsFailure(error) { throw failure }
        guard attempt < attempts, NIODeadline.now() < giveUp else {
          throw CredentialsError.unreachable(endpoint: url, reason: Self.describe(error))
        }
        outcome = .retry(Self.describe(error), after: nil)
      }
      switch outcome {
      case .token(let token):
        // Int(exactly:) and not Int(_:), which traps on the endpoint's 1e300 or "nan".
        let lifetime = token.expiresIn.map { Int(exactly: $0.rounded(.down)).map(String.init) ?? "\($0)" }
        logger.debug("access token from \(url), valid for \(lifetime.map { "\($0) s" } ?? "?")")
        return token
      case .retry(let reason, let after):
        let backoff = 0.2 * Double(1 << (attempt - 1))
        let wait = max(Double.random(in: backoff / 2...backoff), min(after ?? 0, 5))
        logger.debug("token endpoint \(url): \(reason); retrying in \(Int(wait * 1000)) ms")
        try await Task.sleep(nanoseconds: UInt64(wait * 1e9))
      }
    }
  }

  private func attemptOnce(
    _ request: HTTPClientRequest, deadline: NIODeadline, secrets: [String], answer kind: AnswerKind,
    last: Bool
  ) async throws -> Attempt {
    logger.debug("requesting an access token: \(request.method) \(url)")
    let response = try await http.execute(request, deadline: deadline, logger: nil)
    let body = try await response.body.collect(upTo: 1 << 20)
    let bytes = Data(body.readableBytesView)
    let status = Int(response.status.code)
    guard (200..<300).contains(status) else {
      let transient = [408, 429, 500, 502, 503, 504].contains(status)
      if transient && !last {
        return .retry(
          "HTTP \(status)", after: response.headers.first(name: "Retry-After").flatMap(Double.init))
      }
      let answer = try? JSONDecoder().decode(TokenAnswer.self, from: bytes)
      throw CredentialsError.tokenEndpointRefused(
        endpoint: url, status: status,
        error: answer?.error.map { Redaction.scrub($0, secrets: secrets) },
        description: answer?.errorDescription.map { Redaction.scrub($0, secrets: secrets) })
    }
    if let required = requiredHeader, response.headers.first(name: required.name) != required.value {
      throw CredentialsError.invalidTokenResponse(
        endpoint: url, reason: "no \(required.name): \(required.value) header in the answer")
    }
    if kind == .iam { return .token(try iamToken(bytes, secrets: secrets)) }
    let answer: TokenAnswer
    do {
      answer = try JSONDecoder().decode(TokenAnswer.self, from: bytes)
    } catch {
      throw CredentialsError.invalidTokenResponse(endpoint: url, reason: "not a JSON token answer")
    }
    guard let value = answer.accessToken, !value.isEmpty else {
      throw CredentialsError.invalidTokenResponse(endpoint: url, reason: "no access_token")
    }
    if let type = answer.tokenType, type.lowercased() != "bearer" {
      throw CredentialsError.invalidTokenResponse(
        endpoint: url, reason: "token_type \(Redaction.scrub(type, secrets: secrets + [value])) is not Bearer"
      )
    }
    guard value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) else {
      throw CredentialsError.invalidTokenResponse(
        endpoint: url, reason: "access_token is not printable ASCII")
    }
    return .token(AccessToken(value: value, expiresIn: answer.expiresIn))
  }

  /// generateAccessToken's answer; its expireTime becomes a lifetime from now.
  private func iamToken(_ bytes: Data, secrets: [String]) throws -> AccessToken {
    guard let members = JSONValue.parse(bytes)?.object else {
      throw CredentialsError.invalidTokenResponse(endpoint: url, reason: "not a JSON token answer")
    }
    guard let value = members["accessToken"]?.string, !value.isEmpty else {
      throw CredentialsError.invalidTokenResponse(endpoint: url, reason: "no accessToken")
    }
    guard value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) else {
      throw CredentialsError.invalidTokenResponse(endpoint: url, reason: "accessToken is not printable ASCII")
    }
    guard let text = members["expireTime"]?.string, let expiry = RFC3339.seconds(text) else {
      throw CredentialsError.invalidTokenResponse(endpoint: url, reason: "no RFC 3339 expireTime")
    }
    return AccessToken(value: value, expiresIn: expiry - Date().timeIntervalSince1970)
  }

  private func tlsFailure(_ error: any Error) async -> TLSFailure? {
    guard let endpoint = try? Endpoint(url), endpoint.scheme == "https" else { return nil }
    return await TLSFailure.diagnose(
      error, host: endpoint.host, port: endpoint.port ?? 443, group: http.eventLoopGroup)
  }

  private static func describe(_ error: any Error) -> String {
    if let error = error as? HTTPClientError { return "\(error)" }
    return String(describing: error)
  }
}

/// The fields of a token endpoint's answer (RFC 6749 §5.1 and §5.2).
struct TokenAnswer: Decodable {
  var accessToken: String?
  var expiresIn: Double?
  var tokenType: String?
  var error: String?
  var errorDescription: String?

  enum CodingKeys: String, CodingKey {
    case accessToken = "access_token"
    case expiresIn = "expires_in"
    case tokenType = "token_type"
    case error
    case errorDescription = "error_description"
  }

  init(from decoder: any Decoder) throws {
    let container = try decoder.container(keyedBy: CodingKeys.self)
    accessToken = try? container.decodeIfPresent(String.self, forKey: .accessToken)
    // A number as the RFC says; some servers send a string.
    expiresIn =
      (try? container.decodeIfPresent(Double.self, forKey: .expiresIn))
      ?? (try? container.decodeIfPresent(String.self, forKey: .expiresIn)).flatMap { $0.flatMap(Double.init) }
    tokenType = try? container.decodeIfPresent(String.self, forKey: .tokenType)
    error = try? container.decodeIfPresent(String.self, forKey: .error)
    errorDescription = try? container.decodeIfPresent(String.self, forKey: .errorDescription)
    // Google's APIs (IAM Credentials) answer {"error": {"code", "message", "status"}}.
    if error == nil, let google = try? container.decodeIfPresent(GoogleError.self, forKey: .error) {
      error = google.status
      errorDescription = google.message
    }
  }
}

struct GoogleError: Decodable {
  var message: String?
  var status: String?
}

/// RFC 3339 times, as Google's APIs write them (``RFC3339Time``).
enum RFC3339 {
  /// Seconds since 1970, or nil when `text` is not such a time.
  static func seconds(_ text: String) -> Double? {
    RFC3339Time(text).map { Double($0.seconds) + Double($0.nanoseconds) / 1e9 }
  }
}

enum Redaction {
  /// `text` with every secret replaced and cut to a sensible length for one log line.
  static func scrub(_ text: String, secrets: [String]) -> String {
    var out = text
    for secret in secrets where secret.count >= 4 {
      out = out.replacing(secret, with: "[redacted]")
    }
    out = String(out.unicodeScalars.map { $0.value < 0x20 ? " " : Character($0) })
    return out.count > 300 ? String(out.prefix(300)) + "…" : out
  }
}

enum FormEncoding {
  static func encode(_ fields: [(String, String)]) -> String {
    fields.map { "\(percentEncode($0.0))=\(percentEncode($0.1))" }.joined(separator: "&")
  }

  static func percentEncode(_ text: String) -> String { text.percentEncoded }
}

enum Base64URL {
  /// base64url without padding (RFC 7515 §2).
  static func encode<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
    var text = Data(bytes).base64EncodedString()
    text = String(
      text.compactMap { character -> Character? in
        switch character {
        case "+": "-"
        case "/": "_"
        case "=": nil
        default: character
        }
      })
    return text
  }
}

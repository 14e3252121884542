import AsyncHTTPClient
import Logging
import NIOCore
import NIOHTTP1

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

/// The subject token of an `external_account` file whose `credential_source` is AWS
/// (`environment_id` `aws1`), as google-auth-library-python's `aws.py` makes it: the
/// `GetCallerIdentity` request to AWS STS, signed with the workload's AWS credentials and
/// serialized, for Google's STS to verify with AWS.
///
/// - region: `AWS_REGION`, else `AWS_DEFAULT_REGION`, else `region_url` (an availability
///   zone such as `us-east-2b`, whose last letter is dropped);
/// - credentials: `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` (with `AWS_SESSION_TOKEN`)
///   when both are set, else the role that `url` names and then that role's credentials;
/// - IMDSv2: with `imdsv2_session_token_url`, and unless the environment gives both region and
///   credentials, a session token (PUT, 300 s) goes with every metadata request.
///
/// The metadata URLs must be plain http to the AWS metadata server (169.254.169.254,
/// fd00:ec2::254) or loopback, as Google's libraries insist. Nothing secret (secret key, session
/// token, signature, IMDSv2 token) reaches a log line or an error.
struct AWSCredentialSource: Sendable {
  struct Settings: Sendable {
    var regionURL: String?
    var url: String?
    var imdsv2SessionTokenURL: String?
    /// `https://sts.{region}.amazonaws.com?Action=GetCallerIdentity&Version=2011-06-15`.
    var regionalCredVerificationURL: String
  }

  /// Why no subject token could be made; one line, with no secret in it.
  struct Failure: Error, CustomStringConvertible, Equatable {
    var description: String
  }

  let source: Settings
  let environment: [String: String]
  let http: HTTPClient
  let logger: Logger
  /// Seconds since 1970 now; tests fix it.
  var clock: @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }
  /// One metadata request's bound.
  var timeout: TimeAmount = .seconds(10)

  init(source: Settings, environment: [String: String], http: HTTPClient, logger: Logger) {
    self.source = source
    self.environment = environment
    self.http = http
    self.logger = logger
  }

  /// The serialized, signed `GetCallerIdentity` request, with `x-goog-cloud-target-resource`
  /// set to `audience` (the workload identity provider).
  func subjectToken(audience: String) async throws -> String {
    let verification = try Self.verificationURL(source.regionalCredVerificationURL)
    for (field, url) in [
      ("region_url", source.regionURL), ("url", source.url),
      ("imdsv2_session_token_url", source.imdsv2SessionTokenURL),
    ] {
      if let url { try Self.checkMetadataURL(url, field: field) }
    }
    let environmentRegion = value("AWS_REGION") ?? value("AWS_DEFAULT_REGION")
    let environmentKeys = value("AWS_ACCESS_KEY_ID") != nil && value("AWS_SECRET_ACCESS_KEY") != nil
    var sessionToken: String?
    if let tokenURL = source.imdsv2SessionTokenURL, environmentRegion == nil || !environmentKeys {
      sessionToken = try await fetch(
        .PUT, tokenURL, what: "an IMDSv2 session token",
        headers: [("X-aws-ec2-metadata-token-ttl-seconds", "300")])
    }
    let region = try await region(fromEnvironment: environmentRegion, sessionToken: sessionToken)
    let credentials = try await credentials(sessionToken: sessionToken)
    let url = verification.replacing("{region}", with: region)
    guard let target = Self.httpsParts(url) else {
      throw Failure(description: "credential_source.regional_cred_verification_url is not an https URL")
    }
    let now = clock()
    var headers = [("host", target.host), ("x-amz-date", AWSSignatureV4.amzDate(now))]
    if let token = credentials.sessionToken { headers.append(("x-amz-security-token", token)) }
    let service = String(target.host.prefix { $0 != "." })
    let signed = AWSSignatureV4(region: region, service: service).sign(
      method: "POST", path: target.path, query: target.query, headers: headers, payload: [],
      credentials: credentials, time: now)
    var listed = [("Authorization", signed.authorization)] + headers
    listed.append(("x-goog-cloud-target-resource", audience))
    logger.debug("AWS: signed GetCallerIdentity for \(target.host), region \(region)")
    return Self.serialize(url: url, method: "POST", headers: listed)
  }

  /// The request as Google's STS reads it: `{"headers":[{"key":…,"value":…},…],"method":…,"url":…}`
  /// with the headers sorted by name, as compact JSON, percent-encoded (`/` left bare), exactly
  /// as Python's `urllib.parse.quote(json.dumps(…, separators=(",", ":"), sort_keys=True))`.
  static func serialize(url: String, method: String, headers: [(String, String)]) -> String {
    let sorted = headers.sorted { Array($0.0.utf8).lexicographicallyPrecedes(Array($1.0.utf8)) }
    let list = sorted.map { #"{"key":\#(jsonString($0.0)),"value":\#(jsonString($0.1))}"# }
    let json =
      #"{"headers":[\#(list.joined(separator: ","))],"method":\#(jsonString(method)),"url":\#(jsonString(url))}"#
    return json.percentEncoded(keeping: [UInt8(ascii: "/")])
  }

  /// A JSON string as Python's json.dumps writes it (non-ASCII as `\uXXXX`).
  static func jsonString(_ text: String) -> String {
    var out = "\""
    for unit in text.utf16 {
      switch unit {
      case 0x22: out += "\\\""
      case 0x5C: out += "\\\\"
      case 0x0A: out += "\\n"
      case 0x0D: out += "\\r"
      case 0x09: out += "\\t"
      case 0x08: out += "\\b"
      case 0x0C: out += "\\f"
      case 0x20..<0x7F: out.unicodeScalars.append(Unicode.Scalar(UInt8(unit)))
      default:
        let hex = String(unit, radix: 16)
        out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
      }
    }
    return out + "\""
  }

  // MARK: Region and credentials

  private func value(_ name: String) -> String? {
    environment[name].flatMap { $0.isEmpty ? nil : $0 }
  }

  private func region(fromEnvironment given: String?, sessionToken: String?) async throws -> String {
    if let given {
      guard Self.isRegion(given) else {
        throw Failure(description: "AWS_REGION or AWS_DEFAULT_REGION is not an AWS region name")
      }
      return given
    }
    guard let url = source.regionURL else {
      throw Failure(
        description: "cannot tell the AWS region: set AWS_REGION, or give credential_source.region_url")
    }
    let zone = try await fetch(.GET, url, what: "the availability zone", headers: tokenHeader(sessionToken))
      .trimmingWhiteSpace
    // us-east-2b: the region is the zone without its letter.
    let region = String(zone.dropLast())
    guard Self.isRegion(region) else {
      throw Failure(description: "the AWS metadata server at \(url) answered no availability zone")
    }
    return region
  }

  private func credentials(sessionToken: String?) async throws -> AWSSignatureV4.Credentials {
    if let key = value("AWS_ACCESS_KEY_ID"), let secret = value("AWS_SECRET_ACCESS_KEY") {
      logger.debug("AWS: credentials of access key \(key) from the environment")
      return .init(accessKeyID: key, secretAccessKey: secret, sessionToken: value("AWS_SESSION_TOKEN"))
    }
    guard let url = source.url else {
      throw Failure(
        description:
          "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give credential_source.url"
      )
    }
    let role = try await fetch(.GET, url, what: "the role name", headers: tokenHeader(sessionToken))
      .trimmingWhiteSpace
    guard !role.isEmpty, role.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f && $0 != UInt8(ascii: "/") }) else {
      throw Failure(description: "the AWS metadata server at \(url) answered no role name")
    }
    let roleURL = url.hasSuffix("/") ? url + role : url + "/" + role
    let body = try await fetch(
      .GET, roleURL, what: "the credentials of role \(role)",
      headers: [("Content-Type", "application/json")] + tokenHeader(sessionToken))
    struct RoleCredentials: Decodable {
      var AccessKeyId: String?
      var SecretAccessKey: String?
      var Token: String?
    }
    guard let decoded = try? JSONDecoder().decode(RoleCredentials.self, from: Data(body.utf8)),
      let key = decoded.AccessKeyId, !key.isEmpty, let secret = decoded.SecretAccessKey, !secret.isEmpty
    else {
      throw Failure(
        description: "the AWS metadata server at \(roleURL) answered no AccessKeyId and SecretAccessKey")
    }
    logger.debug("AWS: credentials of role \(role) (access key \(key)) from the metadata server")
    return .init(accessKeyID: key, secretAccessKey: secret, sessionToken: decoded.Token)
  }

  private func tokenHeader(_ sessionToken: String?) -> [(String, String)] {
    sessionToken.map { [("X-aws-ec2-metadata-token", $0)] } ?? []
  }

  /// The body of a 200 answer; anything else is a Failure naming the URL and the status,
  /// never the body (it may hold credentials).
  private func fetch(_ method: HTTPMethod, _ url: String, what: String, headers: [(String, String)])
    async throws -> String
  {
    var request = HTTPClientRequest(url: url)
    request.method = method
    for (name, value) in headers { request.headers.add(name: name, value: value) }
    logger.debug("AWS: asking \(url) for \(what)")
    let status: UInt
    let body: ByteBuffer
    do {
      let response = try await http.execute(request, deadline: .now() + timeout, logger: nil)
      status = response.status.code
      body = try await response.body.collect(upTo: 1 << 20)
    } catch {
      if Task.isCancelled || error is CancellationError { throw CancellationError() }
      throw Failure(description: "cannot reach the AWS metadata server at \(url) for \(what): \(error)")
    }
    guard status == 200 else {
      throw Failure(description: "the AWS metadata server at \(url) refused \(what): HTTP \(status)")
    }
    return String(decoding: body.readableBytesView, as: UTF8.self)
  }

  // MARK: URLs

  static func isRegion(_ text: String) -> Bool {
    !text.isEmpty && text.count <= 40
      && text.utf8.allSatisfy {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0)
          || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
          || $0 == UInt8(ascii: "-")
      }
  }

  /// The addresses of the AWS instance metadata service.
  static let metadataHosts: Set<String> = ["169.254.169.254", "[fd00:ec2::254]"]

  /// A metadata URL: plain http to the metadata service, or to loopback (tests, proxies on the host).
  static func checkMetadataURL(_ url: String, field: String) throws {
    let lower = url.lowercased()
    guard lower.hasPrefix("http://") else {
      throw Failure(
        description: "credential_source.\(field) must be an http:// URL of the AWS metadata server")
    }
    let authority = lower.dropFirst("http://".count).prefix { $0 != "/" && $0 != "?" }
    var host = String(authority)
    if host.hasPrefix("[") {
      host = String(host.prefix { $0 != "]" }) + "]"
    } else if let colon = host.lastIndex(of: ":") {
      host = String(host[..<colon])
    }
    let loopback = host == "localhost" || host.hasPrefix("127.") || host == "[::1]"
    guard metadataHosts.contains(host) || loopback else {
      throw Failure(
        description:
          "credential_source.\(field) names host \(host.isEmpty ? "none" : host): only the AWS metadata server "
          + "(169.254.169.254, [fd00:ec2::254]) or loopback may be asked for AWS credentials")
    }
  }

  static func verificationURL(_ url: String) throws -> String {
    guard url.lowercased().hasPrefix("https://"), httpsParts(url.replacing("{region}", with: "x")) != nil
    else {
      throw Failure(description: "credential_source.regional_cred_verification_url is not an https URL")
    }
    return url
  }

  /// Host (lower-case, no port), path and query of an https URL.
  static func httpsParts(_ url: String) -> (host: String, path: String, query: String)? {
    guard url.lowercased().hasPrefix("https://") else { return nil }
    let rest = url.dropFirst("https://".count)
    let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
    var host = authority.lowercased()
    if let colon = host.lastIndex(of: ":"), !host.hasPrefix("[") { host = String(host[..<colon]) }
    guard !host.isEmpty, !host.contains("@") else { return nil }
    let afterAuthority = rest.dropFirst(authority.count).prefix { $0 != "#" }
    let path = afterAuthority.prefix { $0 != "?" }
    let query = afterAuthority.dropFirst(path.count).dropFirst()
    return (host, String(path), String(query))
  }
}

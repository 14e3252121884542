import AsyncHTTPClient
import Logging
import NIOCore

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

/// Where an external account's subject token comes from (its `credential_source`).
public enum SubjectTokenSource: Sendable, CustomStringConvertible {
  /// A file another process keeps fresh (a Kubernetes projected token, a CI's OIDC token).
  case file(path: String, format: SubjectTokenFormat)
  /// A local service that hands it out (Azure's instance metadata, a sidecar).
  case url(String, headers: [(String, String)], format: SubjectTokenFormat)
  /// A program that prints it (only with GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES=1).
  case executable(ExecutableSource)
  /// AWS: the signed GetCallerIdentity request (see ExternalAccountAWS.swift).
  case aws(AWSSubjectTokenSettings)

  public var description: String {
    switch self {
    case .file(let path, _): "subject token from file \(path)"
    case .url(let url, _, _): "subject token from \(url)"
    case .executable(let source): "subject token from executable \(source.program)"
    case .aws: "subject token from AWS"
    }
  }

  init(_ fields: JSONFields) throws {
    if let environment = try fields.string("environment_id") {
      self = .aws(try AWSSubjectTokenSettings(fields, environmentID: environment))
      return
    }
    let file = try fields.string("file")
    let url = try fields.string("url")
    let executable = try fields.object("executable")
    guard [file != nil, url != nil, executable != nil].filter({ $0 }).count == 1 else {
      if fields.members["certificate"] != nil {
        throw fields.invalid("field credential_source.certificate (mTLS) is not supported")
      }
      throw fields.invalid("field credential_source names none or more than one of file, url and executable")
    }
    if let executable {
      self = .executable(try ExecutableSource(executable))
      return
    }
    let format = try SubjectTokenFormat(fields.object("format"))
    if let file {
      self = .file(path: file, format: format)
      return
    }
    guard let url else { throw fields.invalid("field credential_source.url is missing") }
    try SecureURL.checkSubjectTokenURL(url, field: "credential_source.url", path: fields.path)
    var headers: [(String, String)] = []
    if let given = try fields.object("headers") {
      for (name, value) in given.members.sorted(by: { $0.key < $1.key }) {
        guard let text = value.string, Self.isHeaderName(name),
          !text.utf8.contains(where: { $0 < 0x20 && $0 != 9 })
        else { throw fields.invalid("field credential_source.headers holds a header that is not a string") }
        headers.append((name, text))
      }
    }
    self = .url(url, headers: headers, format: format)
  }

  private static func isHeaderName(_ name: String) -> Bool {
    !name.isEmpty && name.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7f && $0 != UInt8(ascii: ":") }
  }

  /// What the subject token's origin needs to know.
  struct Context: Sendable {
    var audience: String
    var subjectTokenType: String
    var impersonatedEmail: String?
    var environment: [String: String]
    var http: HTTPClient
    var logger: Logger
  }

  /// The current subject token; a ``CredentialsError/subjectTokenUnavailable(source:reason:)``
  /// that quotes none of it when there is none.
  func subjectToken(_ context: Context) async throws -> String {
    switch self {
    case .file(let path, let format):
      let bytes: [UInt8]
      do {
        bytes = try SecretFile.contents(of: path, logger: context.logger, warnIfShared: false)
      } catch CredentialsError.unreadableFile(_, let reason) {
        throw CredentialsError.subjectTokenUnavailable(source: "file \(path)", reason: reason)
      }
      return try format.token(in: bytes, source: "file \(path)")
    case .url(let url, let headers, let format):
      return try await Self.fetch(url, headers: headers, format: format, context: context)
    case .executable(let source):
      return try await source.subjectToken(context)
    case .aws(let settings):
      return try await settings.subjectToken(context)
    }
  }

  private static func fetch(
    _ url: String, headers: [(String, String)], format: SubjectTokenFormat, context: Context
  ) async throws -> String {
    var request = HTTPClientRequest(url: url)
    request.method = .GET
    for (name, value) in headers { request.headers.add(name: name, value: value) }
    context.logger.debug("requesting the subject token: GET \(url)")
    let status: Int
    let body: ByteBuffer
    do {
      let response = try await context.http.execute(request, timeout: .seconds(30), logger: nil)
      status = Int(response.status.code)
      body = try await response.body.collect(upTo: 1 << 20)
    } catch {
      if Task.isCancelled || error is CancellationError { throw CancellationError() }
      throw CredentialsError.subjectTokenUnavailable(source: url, reason: "\(error)")
    }
    // The answer is never quoted: it may be (or hold) the token.
    guard (200..<300).contains(status) else {
      throw CredentialsError.subjectTokenUnavailable(source: url, reason: "HTTP \(status)")
    }
    return try format.token(in: Array(body.readableBytesView), source: url)
  }
}

/// `credential_source.format`: the whole text, or one member of a JSON object.
public struct SubjectTokenFormat: Sendable {
  /// Nil: the text itself (surrounding white space dropped).
  public let jsonField: String?

  init(_ fields: JSONFields?) throws {
    guard let fields else {
      jsonField = nil
      return
    }
    switch try fields.string("type") ?? "text" {
    case "text": jsonField = nil
    case "json":
      guard let name = try fields.string("subject_token_field_name") else {
        throw fields.invalid("field credential_source.format.subject_token_field_name is missing")
      }
      jsonField = name
    default:
      throw fields.invalid("field credential_source.format.type is neither text nor json")
    }
  }

  func token(in bytes: [UInt8], source: String) throws -> String {
    let token: String
    if let jsonField {
      guard let members = JSONValue.parse(bytes)?.object else {
        throw CredentialsError.subjectTokenUnavailable(source: source, reason: "not a JSON object")
      }
      guard let value = members[jsonField]?.string else {
        throw CredentialsError.subjectTokenUnavailable(
          source: source, reason: "no string member \(jsonField)")
      }
      token = value.trimmingWhiteSpace
    } else {
      token = String(decoding: bytes, as: UTF8.self).trimmingWhiteSpace
    }
    guard !token.isEmpty else {
      throw CredentialsError.subjectTokenUnavailable(source: source, reason: "empty")
    }
    return token
  }
}

extension SecureURL {
  /// Where a subject token is fetched from: https, loopback, or the link-local metadata
  /// address (169.254.169.254) of the cloud the workload runs on, which only answers on the
  /// machine itself and is where Azure and AWS hand out their tokens. Nothing secret is sent.
  static func checkSubjectTokenURL(_ url: String, field: String, path: String) throws {
    if url.lowercased().hasPrefix("http://169.254.169.254/") || url.lowercased() == "http://169.254.169.254" {
      return
    }
    try check(url, field: field, path: path)
  }
}

import AsyncHTTPClient
import Logging

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

/// One call of the IAM Credentials API's `generateAccessToken`: a token of a source
/// principal (sent as the bearer token, and nowhere else) becomes a token of the service
/// account the URL names.
struct ServiceAccountImpersonation: Sendable {
  let url: String
  let scope: String
  let lifetimeSeconds: Int
  let delegates: [String]
  /// Sent as `x-goog-user-project`, as Google's libraries do with the source's quota project.
  let quotaProject: String?
  let endpoint: TokenEndpoint

  init(
    url: String, scope: String, lifetimeSeconds: Int, delegates: [String] = [], quotaProject: String?,
    http: HTTPClient, logger: Logger
  ) {
    self.url = url
    self.scope = scope
    self.lifetimeSeconds = lifetimeSeconds
    self.delegates = delegates
    self.quotaProject = quotaProject
    endpoint = TokenEndpoint(url: url, http: http, logger: logger)
  }

  func token(using sourceToken: String) async throws -> AccessToken {
    struct Body: Encodable {
      var delegates: [String]?
      var scope: [String]
      var lifetime: String
    }
    let encoder = JSONEncoder()
    encoder.outputFormatting = .sortedKeys
    let body = Body(
      delegates: delegates.isEmpty ? nil : delegates, scope: [scope], lifetime: "\(lifetimeSeconds)s")
    let json = String(decoding: try encoder.encode(body), as: UTF8.self)
    var headers = [("Authorization", "Bearer \(sourceToken)")]
    if let quotaProject { headers.append(("x-goog-user-project", quotaProject)) }
    return try await endpoint.postJSON(json, headers: headers, secrets: [sourceToken])
  }
}

/// OAuth scopes the token exchange and impersonation ask for besides Cloud Storage's.
enum GoogleScope {
  /// What a token that only impersonates asks for, as Google's libraries ask.
  static let cloudPlatform = "https://www.googleapis.com/auth/cloud-platform"
}

/// HTTP basic authentication of an OAuth client (RFC 6749 §2.3.1).
enum ClientAuthentication {
  static func header(id: String, secret: String?) -> (String, String) {
    ("Authorization", "Basic " + Data("\(id):\(secret ?? "")".utf8).base64EncodedString())
  }
}

import AsyncHTTPClient
import Logging
import ServiceAccess

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

/// Tokens for an `external_account` file: the subject token exchanged at the Security Token
/// Service (RFC 8693), then, when the file asks, turned into a service account's token by
/// `generateAccessToken`. Only that last token reaches Cloud Storage.
public final class ExternalAccountCredentials: AccessTokenProvider, CustomStringConvertible {
  public let account: ExternalAccount
  public let quotaProject: String?
  private let tokenCache: TokenCache

  static let tokenExchangeGrant = "urn:ietf:params:oauth:grant-type:token-exchange"
  static let accessTokenType = "urn:ietf:params:oauth:token-type:access_token"

  /// `quotaProject`: the project for `x-goog-user-project` (the file's unless the
  /// environment overrides it); also sent to generateAccessToken, as Google's libraries do.
  public init(
    account: ExternalAccount, scope: String = StorageScope.readWrite, quotaProject: String?,
    environment: [String: String], http: HTTPClient = .shared,
    refreshMargin: Double = TokenDefaults.refreshMargin, logger: Logger
  ) {
    self.account = account
    self.quotaProject = quotaProject
    let sts = TokenEndpoint(url: account.tokenURL, http: http, logger: logger)
    let impersonation = account.impersonationURL.map {
      ServiceAccountImpersonation(
        url: $0, scope: scope, lifetimeSeconds: account.impersonatedLifetime, quotaProject: quotaProject,
        http: http, logger: logger)
    }
    let context = SubjectTokenSource.Context(
      audience: account.audience, subjectTokenType: account.subjectTokenType,
      impersonatedEmail: account.impersonationURL.flatMap(ImpersonationURL.serviceAccount),
      environment: environment, http: http, logger: logger)
    tokenCache = TokenCache(refreshMargin: refreshMargin) {
      let subjectToken = try await account.source.subjectToken(context)
      // A token that only impersonates asks for cloud-platform, as Google's libraries do;
      // one that Cloud Storage sees asks for Cloud Storage's scope.
      let federated = try await Self.exchange(
        subjectToken, account: account, scope: impersonation == nil ? scope : GoogleScope.cloudPlatform,
        at: sts)
      guard let impersonation else { return federated }
      return try await impersonation.token(using: federated.value)
    }
  }

  public func token(refresh: Bool) async throws -> String {
    try await tokenCache.token(refresh: refresh)
  }

  public var description: String { "\(account) (token endpoint \(account.tokenURL))" }

  static func exchange(
    _ subjectToken: String, account: ExternalAccount, scope: String, at sts: TokenEndpoint
  ) async throws -> AccessToken {
    var form = [
      ("grant_type", tokenExchangeGrant), ("audience", account.audience), ("scope", scope),
      ("requested_token_type", accessTokenType), ("subject_token", subjectToken),
      ("subject_token_type", account.subjectTokenType),
    ]
    // A workforce pool used without an OAuth client names the project to bill.
    if let project = account.workforcePoolUserProject, account.clientID == nil {
      let options = String(
        decoding: try JSONEncoder().encode(["userProject": project]), as: UTF8.self)
      form.append(("options", options))
    }
    var headers: [(String, String)] = []
    var secrets = [subjectToken]
    if let id = account.clientID {
      headers.append(ClientAuthentication.header(id: id, secret: account.clientSecret))
      if let secret = account.clientSecret { secrets.append(secret) }
    }
    return try await sts.post(form: form, headers: headers, secrets: secrets)
  }
}

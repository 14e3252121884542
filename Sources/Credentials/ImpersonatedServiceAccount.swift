import AsyncHTTPClient
import Logging
import ServiceAccess

/// An `impersonated_service_account` file, as `gcloud auth application-default login
/// --impersonate-service-account` writes it: source credentials of another type whose token
/// becomes a service account's by `generateAccessToken`, through `delegates` when given.
public struct ImpersonatedServiceAccount: Sendable, CustomStringConvertible {
  public let source: CredentialsFile
  public let impersonationURL: String
  public let delegates: [String]
  public let quotaProject: String?

  public var serviceAccount: String { ImpersonationURL.serviceAccount(impersonationURL) ?? "?" }

  public var description: String { "service account \(serviceAccount), impersonated" }

  init(_ fields: JSONFields) throws {
    guard let url = try fields.secureURL("service_account_impersonation_url") else {
      throw fields.invalid("field service_account_impersonation_url is missing")
    }
    guard ImpersonationURL.serviceAccount(url) != nil else {
      throw fields.invalid(
        "field service_account_impersonation_url does not end in serviceAccounts/EMAIL:generateAccessToken")
    }
    impersonationURL = url
    delegates = try fields.strings("delegates")
    quotaProject = try fields.string("quota_project_id")
    guard let sourceFields = try fields.object("source_credentials") else {
      throw fields.invalid("field source_credentials is missing")
    }
    if try sourceFields.string("type") == "impersonated_service_account" {
      throw fields.invalid("field source_credentials.type impersonated_service_account cannot be a source")
    }
    source = try CredentialsFile.parse(sourceFields)
  }
}

/// Tokens for an ``ImpersonatedServiceAccount``: the source's token (asked for with the
/// cloud-platform scope where it has one) is sent only to generateAccessToken.
public final class ImpersonatedCredentials: AccessTokenProvider, CustomStringConvertible {
  public let account: ImpersonatedServiceAccount
  public let source: any AccessTokenProvider
  public let quotaProject: String?
  private let tokenCache: TokenCache

  public init(
    account: ImpersonatedServiceAccount, scope: String = StorageScope.readWrite, quotaProject: String?,
    environment: [String: String], http: HTTPClient = .shared,
    refreshMargin: Double = TokenDefaults.refreshMargin, logger: Logger
  ) {
    self.account = account
    self.quotaProject = quotaProject
    let source = account.source.provider(
      scope: GoogleScope.cloudPlatform, quotaProject: account.source.quotaProject, environment: environment,
      http: http, refreshMargin: refreshMargin, logger: logger)
    self.source = source
    let impersonation = ServiceAccountImpersonation(
      url: account.impersonationURL, scope: scope, lifetimeSeconds: 3600, delegates: account.delegates,
      quotaProject: account.source.quotaProject, http: http, logger: logger)
    tokenCache = TokenCache(refreshMargin: refreshMargin) {
      let sourceToken = try await source.token(refresh: false)
      return try await impersonation.token(using: sourceToken)
    }
  }

  public func token(refresh: Bool) async throws -> String {
    try await tokenCache.token(refresh: refresh)
  }

  public var description: String {
    "\(account) (by \(source); endpoint \(account.impersonationURL))"
  }
}

import AsyncHTTPClient
import Logging
import ServiceAccess

/// An `external_account_authorized_user` file (workforce identity federation, as `gcloud
/// auth application-default login --login-config` writes it): a refresh token redeemed at
/// the Security Token Service with the OAuth client's basic authentication.
public struct ExternalAccountAuthorizedUser: Sendable, CustomStringConvertible {
  public let audience: String?
  public let tokenURL: String
  public let clientID: String
  let clientSecret: String
  let refreshToken: String
  public let revokeURL: String?
  public let quotaProject: String?
  public let universeDomain: String

  public var description: String { "workforce user (OAuth client \(clientID))" }

  init(_ fields: JSONFields) throws {
    audience = try fields.string("audience")
    guard let tokenURL = try fields.secureURL("token_url") else {
      throw fields.invalid("field token_url is missing")
    }
    self.tokenURL = tokenURL
    refreshToken = try fields.required("refresh_token")
    clientID = try fields.required("client_id")
    clientSecret = try fields.required("client_secret")
    revokeURL = try fields.secureURL("revoke_url", required: false)
    _ = try fields.secureURL("token_info_url", required: false)
    quotaProject = try fields.string("quota_project_id")
    universeDomain = try fields.universeDomain()
  }
}

/// Tokens for an ``ExternalAccountAuthorizedUser``.
public final class ExternalAccountAuthorizedUserCredentials: AccessTokenProvider, CustomStringConvertible {
  public let user: ExternalAccountAuthorizedUser
  public let quotaProject: String?
  private let tokenCache: TokenCache

  public init(
    user: ExternalAccountAuthorizedUser, quotaProject: String?, http: HTTPClient = .shared,
    refreshMargin: Double = TokenDefaults.refreshMargin, logger: Logger
  ) {
    self.user = user
    self.quotaProject = quotaProject
    let endpoint = TokenEndpoint(url: user.tokenURL, http: http, logger: logger)
    tokenCache = TokenCache(refreshMargin: refreshMargin) {
      try await endpoint.post(
        form: [("grant_type", "refresh_token"), ("refresh_token", user.refreshToken)],
        headers: [ClientAuthentication.header(id: user.clientID, secret: user.clientSecret)],
        secrets: [user.clientSecret, user.refreshToken])
    }
  }

  public func token(refresh: Bool) async throws -> String {
    try await tokenCache.token(refresh: refresh)
  }

  public var description: String { "\(user) (token endpoint \(user.tokenURL))" }
}

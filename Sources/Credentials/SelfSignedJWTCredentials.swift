import Logging
import ServiceAccess

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

/// Tokens for a service-account key outside the `googleapis.com` universe, where there is
/// no OAuth token endpoint to ask: the key signs a JWT that is itself the bearer token
/// (claims iss = sub = the account, `scope`, an hour's life), as Google's libraries do
/// there (AIP-4111). A new one is signed before the last expires.
public final class SelfSignedJWTCredentials: AccessTokenProvider, CustomStringConvertible {
  public let key: ServiceAccountKey
  public let scope: String
  public let quotaProject: String?
  private let tokenCache: TokenCache

  public init(
    key: ServiceAccountKey, scope: String = StorageScope.readWrite, quotaProject: String?,
    refreshMargin: Double = TokenDefaults.refreshMargin, logger: Logger
  ) {
    self.key = key
    self.scope = scope
    self.quotaProject = quotaProject
    tokenCache = TokenCache(refreshMargin: refreshMargin) {
      let jwt = try Self.jwt(key: key, scope: scope, now: Date().timeIntervalSince1970)
      logger.debug("signed a self-signed JWT for \(key.clientEmail), valid for 3600 s")
      return AccessToken(value: jwt, expiresIn: 3600)
    }
  }

  public func token(refresh: Bool) async throws -> String {
    try await tokenCache.token(refresh: refresh)
  }

  public var description: String { "\(key) (self-signed JWT, universe \(key.universeDomain))" }

  static func jwt(key: ServiceAccountKey, scope: String, now: Double) throws -> String {
    struct Claims: Encodable {
      let iss: String
      let sub: String
      let scope: String
      let iat: Int64
      let exp: Int64
    }
    let issuedAt = Int64(now)
    return try JWS.sign(
      Claims(iss: key.clientEmail, sub: key.clientEmail, scope: scope, iat: issuedAt, exp: issuedAt + 3600),
      key: key)
  }
}

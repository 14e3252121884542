import AsyncHTTPClient
import Logging
import ServiceAccess
import _CryptoExtras

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

/// OAuth scopes for Cloud Storage.
public enum StorageScope {
  /// Read objects and change their metadata: all bucketfs does (list, get, read, patch).
  /// The default: it grants no ACL or IAM changes, unlike `fullControl`.
  public static let readWrite = "https://www.googleapis.com/auth/devstorage.read_write"
  public static let readOnly = "https://www.googleapis.com/auth/devstorage.read_only"
  public static let fullControl = "https://www.googleapis.com/auth/devstorage.full_control"
}

/// Defaults shared by the refreshing providers.
public enum TokenDefaults {
  /// Seconds before expiry at which a token is replaced.
  public static let refreshMargin: Double = 300
}

// MARK: - Service account

/// Tokens for a service account: an RS256-signed JWT exchanged at the key's `token_uri`
/// (RFC 7523, as Google's OAuth server expects it).
public final class ServiceAccountCredentials: AccessTokenProvider, CustomStringConvertible {
  public let key: ServiceAccountKey
  public let scope: String
  public let quotaProject: String?
  private let tokenCache: TokenCache

  public init(
    key: ServiceAccountKey, scope: String = StorageScope.readWrite, quotaProject: String? = nil,
    http: HTTPClient = .shared, refreshMargin: Double = TokenDefaults.refreshMargin, logger: Logger
  ) {
    self.key = key
    self.scope = scope
    self.quotaProject = quotaProject
    let endpoint = TokenEndpoint(url: key.tokenURI, http: http, logger: logger)
    tokenCache = TokenCache(refreshMargin: refreshMargin) {
      let assertion = try Self.assertion(key: key, scope: scope, now: Date().timeIntervalSince1970)
      return try await endpoint.post(
        form: [("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"), ("assertion", assertion)],
        secrets: [assertion])
    }
  }

  public func token(refresh: Bool) async throws -> String {
    try await tokenCache.token(refresh: refresh)
  }

  public var description: String { "\(key) (token endpoint \(key.tokenURI))" }

  /// The signed JWT: header {alg, typ, kid}, claims {iss, scope, aud, iat, exp = iat + 1 h}.
  static func assertion(key: ServiceAccountKey, scope: String, now: Double) throws -> String {
    let issuedAt = Int64(now)
    return try JWS.sign(
      JWTClaims(iss: key.clientEmail, scope: scope, aud: key.tokenURI, iat: issuedAt, exp: issuedAt + 3600),
      key: key)
  }
}

// MARK: - Authorized user

/// Tokens for a user who ran `gcloud auth application-default login`: the refresh-token grant.
public final class AuthorizedUserCredentials: AccessTokenProvider, CustomStringConvertible {
  public let user: AuthorizedUser
  public let quotaProject: String?
  private let tokenCache: TokenCache

  public init(
    user: AuthorizedUser, quotaProject: String? = nil, http: HTTPClient = .shared,
    refreshMargin: Double = TokenDefaults.refreshMargin, logger: Logger
  ) {
    self.user = user
    self.quotaProject = quotaProject
    let endpoint = TokenEndpoint(url: user.tokenURI, http: http, logger: logger)
    tokenCache = TokenCache(refreshMargin: refreshMargin) {
      try await endpoint.post(
        form: [
          ("grant_type", "refresh_token"), ("client_id", user.clientID), ("client_secret", user.clientSecret),
          ("refresh_token", user.refreshToken),
        ],
        secrets: [user.clientSecret, user.refreshToken])
    }
  }

  public func token(refresh: Bool) async throws -> String {
    try await tokenCache.token(refresh: refresh)
  }

  public var description: String { "\(user) (token endpoint \(user.tokenURI))" }
}

// MARK: - Metadata server

/// Tokens for the VM's (or GKE workload's) service account from the metadata server.
public final class MetadataServerCredentials: AccessTokenProvider, CustomStringConvertible {
  /// The metadata server's well-known address.
  public static let defaultHost = "169.254.169.254"

  /// `host` or `host:port`, as GCE_METADATA_HOST gives it.
  public let host: String
  private let tokenCache: TokenCache

  public init(
    host: String = MetadataServerCredentials.defaultHost, http: HTTPClient = .shared,
    refreshMargin: Double = TokenDefaults.refreshMargin, logger: Logger
  ) {
    var host = host
    if host.hasPrefix("http://") { host.removeFirst("http://".count) }
    while host.hasSuffix("/") { host.removeLast() }
    self.host = host
    var endpoint = TokenEndpoint(
      url: "http://\(host)/computeMetadata/v1/instance/service-accounts/default/token", http: http,
      logger: logger, timeout: .seconds(10))
    // Only a metadata server says so: another server at that address gets no trust.
    endpoint.requiredHeader = ("Metadata-Flavor", "Google")
    tokenCache = TokenCache(refreshMargin: refreshMargin) { [endpoint] in
      try await endpoint.get(headers: [("Metadata-Flavor", "Google")])
    }
  }

  public func token(refresh: Bool) async throws -> String {
    try await tokenCache.token(refresh: refresh)
  }

  public var description: String { "the metadata server at \(host)" }
}

// MARK: - Static token

/// A token someone already has (`gcloud auth print-access-token`), from a file or the
/// environment. It cannot be refreshed: after a 401 a file is read again (it may have been
/// replaced), and when it has expired the service's refusal is the error.
public final class StaticTokenCredentials: AccessTokenProvider, CustomStringConvertible {
  private let origin: String
  private let path: String?
  private let logger: Logger
  private let current: Current

  private actor Current {
    var value: String
    init(_ value: String) { self.value = value }
    func set(_ value: String) { self.value = value }
  }

  /// The token in the file at `path` (surrounding white space ignored).
  public init(file path: String, logger: Logger) throws {
    self.origin = "access token file \(path)"
    self.path = path
    self.logger = logger
    current = Current(try Self.read(path, logger: logger))
  }

  /// The token itself; `origin` (such as the variable's name) names it in messages.
  public init(token: String, origin: String, logger: Logger) throws {
    let value = token.trimmingWhiteSpace
    guard Self.isPlausible(value) else {
      throw CredentialsError.noCredentialsFound("\(origin) is empty or not a token")
    }
    self.origin = origin
    self.path = nil
    self.logger = logger
    current = Current(value)
  }

  public func token(refresh: Bool) async throws -> String {
    if refresh, let path {
      logger.debug("re-reading \(origin)")
      await current.set(try Self.read(path, logger: logger))
    }
    return await current.value
  }

  public var description: String { origin }

  private static func read(_ path: String, logger: Logger) throws -> String {
    let value = String(decoding: try SecretFile.contents(of: path, logger: logger), as: UTF8.self)
      .trimmingWhiteSpace
    guard isPlausible(value) else {
      throw CredentialsError.invalidFile(path: path, reason: "it does not hold one access token")
    }
    return value
  }

  private static func isPlausible(_ value: String) -> Bool {
    !value.isEmpty && value.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7f }
  }
}

// MARK: - Helpers

private struct JWTClaims: Encodable {
  let iss: String
  let scope: String
  let aud: String
  let iat: Int64
  let exp: Int64
}

extension String {
  var trimmingWhiteSpace: String {
    let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\n" || $0 == "\r" || $0 == "\t" }
    return String(self.drop(while: isSpace).reversed().drop(while: isSpace).reversed())
  }
}

import Logging
import ServiceAccess
import _CryptoExtras

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif
#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// A service-account key file (`"type": "service_account"`), as the Cloud console downloads it.
public struct ServiceAccountKey: Sendable, CustomStringConvertible {
  public let clientEmail: String
  public let privateKeyID: String?
  public let tokenURI: String
  let signingKey: _RSA.Signing.PrivateKey
  public var quotaProject: String? = nil
  /// Outside `googleapis.com` the key signs its own JWTs: there is no token exchange.
  public var universeDomain: String = defaultUniverseDomain

  public var description: String { "service account \(clientEmail)" }
}

/// An authorized-user file (`"type": "authorized_user"`), as `gcloud auth application-default
/// login` writes it. The secrets stay inside the module.
public struct AuthorizedUser: Sendable, CustomStringConvertible {
  public let clientID: String
  let clientSecret: String
  let refreshToken: String
  public let tokenURI: String
  public var quotaProject: String? = nil

  public var description: String { "authorized user (OAuth client \(clientID))" }
}

/// What a credentials JSON file holds.
public enum CredentialsFile: Sendable {
  case serviceAccount(ServiceAccountKey)
  case authorizedUser(AuthorizedUser)
  case externalAccount(ExternalAccount)
  indirect case impersonatedServiceAccount(ImpersonatedServiceAccount)
  case externalAccountAuthorizedUser(ExternalAccountAuthorizedUser)

  /// Google's OAuth token endpoint, for files that do not name one.
  public static let defaultTokenURI = "https://oauth2.googleapis.com/token"

  static let supportedTypes =
    "service_account, authorized_user, external_account, impersonated_service_account and "
    + "external_account_authorized_user"

  /// Reads and checks the file at `path`; warns through `logger` when others may read it.
  public static func load(path: String, logger: Logger) throws -> CredentialsFile {
    try parse(SecretFile.contents(of: path, logger: logger), path: path)
  }

  /// Checks a credentials file's contents; `path` only names it in errors.
  public static func parse(_ bytes: [UInt8], path: String) throws -> CredentialsFile {
    // The decoder's message may quote the file; say only what kind of problem it is.
    guard let members = JSONValue.parse(bytes)?.object else {
      throw CredentialsError.invalidFile(path: path, reason: "not a JSON object")
    }
    return try parse(JSONFields(members, path: path))
  }

  /// The file's project for quota and billing (`quota_project_id`), if it names one.
  public var quotaProject: String? {
    switch self {
    case .serviceAccount(let key): key.quotaProject
    case .authorizedUser(let user): user.quotaProject
    case .externalAccount(let account): account.quotaProject
    case .impersonatedServiceAccount(let account): account.quotaProject
    case .externalAccountAuthorizedUser(let user): user.quotaProject
    }
  }

  /// The universe whose services these credentials are for.
  public var universeDomain: String {
    switch self {
    case .serviceAccount(let key): key.universeDomain
    case .authorizedUser: defaultUniverseDomain
    case .externalAccount(let account): account.universeDomain
    case .impersonatedServiceAccount(let account): account.source.universeDomain
    case .externalAccountAuthorizedUser(let user): user.universeDomain
    }
  }

  /// One credentials object (the file, or an impersonated account's `source_credentials`).
  static func parse(_ fields: JSONFields) throws -> CredentialsFile {
    func tokenURI() throws -> String {
      guard let uri = try fields.string("token_uri") else { return defaultTokenURI }
      // The assertion or refresh token goes there: never in clear over a network.
      try SecureURL.check(uri, field: fields.prefix + "token_uri", path: fields.path)
      return uri
    }

    switch try fields.required("type") {
    case "service_account":
      let email = try fields.required("client_email")
      let pem = try fields.required("private_key")
      let uri = try tokenURI()
      let key: _RSA.Signing.PrivateKey
      do {
        key = try _RSA.Signing.PrivateKey(pemRepresentation: pem)
      } catch {
        throw fields.invalid(
          "field \(fields.prefix)private_key is not a PEM RSA private key of 2048 bits or more")
      }
      return .serviceAccount(
        ServiceAccountKey(
          clientEmail: email, privateKeyID: try fields.string("private_key_id"), tokenURI: uri,
          signingKey: key, quotaProject: try fields.string("quota_project_id"),
          universeDomain: try fields.universeDomain()))
    case "authorized_user":
      return .authorizedUser(
        AuthorizedUser(
          clientID: try fields.required("client_id"), clientSecret: try fields.required("client_secret"),
          refreshToken: try fields.required("refresh_token"), tokenURI: try tokenURI(),
          quotaProject: try fields.string("quota_project_id")))
    case "external_account":
      return .externalAccount(try ExternalAccount(fields))
    case "impersonated_service_account":
      return .impersonatedServiceAccount(try ImpersonatedServiceAccount(fields))
    case "external_account_authorized_user":
      return .externalAccountAuthorizedUser(try ExternalAccountAuthorizedUser(fields))
    case let other:
      let shown = other.count <= 40 && other.allSatisfy { $0.isLetter || $0 == "_" } ? other : "unknown"
      throw fields.invalid(
        "\(fields.prefix)type \(shown) is not supported (only \(supportedTypes))")
    }
  }
}

/// Reading files that hold secrets.
enum SecretFile {
  /// The whole file (at most 1 MiB); a warning when its mode lets group or others read it.
  /// `warnIfShared: false` for files that are not secrets of their own (a subject token
  /// that Kubernetes projects with mode 0644 is good for one audience only).
  static func contents(of path: String, logger: Logger, warnIfShared: Bool = true) throws -> [UInt8] {
    func failure(_ reason: String) -> CredentialsError { .unreadableFile(path: path, reason: reason) }
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { throw failure(String(cString: strerror(errno))) }
    defer { close(fd) }
    var info = stat()
    guard fstat(fd, &info) == 0 else { throw failure(String(cString: strerror(errno))) }
    guard info.st_mode & S_IFMT == S_IFREG else { throw failure("not a regular file") }
    guard info.st_size <= 1 << 20 else { throw failure("larger than 1 MiB") }
    let mode = info.st_mode & 0o777
    if warnIfShared, mode & 0o077 != 0 {
      logger.warning(
        "credentials file \(path) can be read by other users (mode \(String(mode, radix: 8))); chmod 600 it")
    }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 16 << 10)
    while true {
      let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
      if count < 0 {
        if errno == EINTR { continue }
        throw failure(String(cString: strerror(errno)))
      }
      if count == 0 { break }
      bytes += chunk[0..<count]
      guard bytes.count <= 1 << 20 else { throw failure("larger than 1 MiB") }
    }
    return bytes
  }
}

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

  public var description: String { "service account \(clientEmail)" }
}

/// An authorized-user file (`"type": "authorized_user"`), as `gcloud auth application-default
/// login` writes it. The secrets stay inside the module.
public struct AuthorizedUser: Sendable, CustomStringConvertible {
  public let clientID: String
  let clientSecret: String
  let refreshToken: String
  public let tokenURI: String

  public var description: String { "authorized user (OAuth client \(clientID))" }
}

/// What a credentials JSON file holds.
public enum CredentialsFile: Sendable {
  case serviceAccount(ServiceAccountKey)
  case authorizedUser(AuthorizedUser)

  /// Google's OAuth token endpoint, for files that do not name one.
  public static let defaultTokenURI = "https://oauth2.googleapis.com/token"

  /// Reads and checks the file at `path`; warns through `logger` when others may read it.
  public static func load(path: String, logger: Logger) throws -> CredentialsFile {
    try parse(SecretFile.contents(of: path, logger: logger), path: path)
  }

  /// Checks a credentials file's contents; `path` only names it in errors.
  public static func parse(_ bytes: [UInt8], path: String) throws -> CredentialsFile {
    func invalid(_ reason: String) -> CredentialsError { .invalidFile(path: path, reason: reason) }
    let fields: Fields
    do {
      fields = try JSONDecoder().decode(Fields.self, from: Data(bytes))
    } catch {
      // The decoder's message may quote the file; say only what kind of problem it is.
      throw invalid("not a JSON object")
    }
    if let bad = fields.notStrings.sorted().first { throw invalid("field \(bad) is not a string") }
    func required(_ key: String) throws -> String {
      guard let value = fields.values[key], !value.isEmpty else { throw invalid("field \(key) is missing") }
      return value
    }
    func tokenURI() throws -> String {
      guard let uri = fields.values["token_uri"], !uri.isEmpty else { return defaultTokenURI }
      // The assertion or refresh token goes there: never in clear over a network.
      guard let endpoint = try? Endpoint(uri), endpoint.scheme == "https" || endpoint.isLoopback else {
        throw invalid("field token_uri is not an https URL")
      }
      return uri
    }

    switch try required("type") {
    case "service_account":
      let email = try required("client_email")
      let pem = try required("private_key")
      let uri = try tokenURI()
      let key: _RSA.Signing.PrivateKey
      do {
        key = try _RSA.Signing.PrivateKey(pemRepresentation: pem)
      } catch {
        throw invalid("field private_key is not a PEM RSA private key of 2048 bits or more")
      }
      return .serviceAccount(
        ServiceAccountKey(
          clientEmail: email, privateKeyID: fields.values["private_key_id"].flatMap { $0.isEmpty ? nil : $0 },
          tokenURI: uri, signingKey: key))
    case "authorized_user":
      return .authorizedUser(
        AuthorizedUser(
          clientID: try required("client_id"), clientSecret: try required("client_secret"),
          refreshToken: try required("refresh_token"), tokenURI: try tokenURI()))
    case let other:
      let shown = other.count <= 40 && other.allSatisfy { $0.isLetter || $0 == "_" } ? other : "unknown"
      throw invalid("type \(shown) is not supported (only service_account and authorized_user)")
    }
  }

  /// The top-level string members of a JSON object; members of other types are noted, not kept.
  struct Fields: Decodable {
    var values: [String: String] = [:]
    var notStrings: Set<String> = []

    static let known: Set<String> = [
      "type", "client_email", "private_key", "private_key_id", "token_uri", "client_id", "client_secret",
      "refresh_token",
    ]

    struct Key: CodingKey {
      var stringValue: String
      var intValue: Int? { nil }
      init(stringValue: String) { self.stringValue = stringValue }
      init?(intValue: Int) { nil }
    }

    init(from decoder: any Decoder) throws {
      let container = try decoder.container(keyedBy: Key.self)
      for key in container.allKeys {
        if let value = try? container.decode(String.self, forKey: key) {
          values[key.stringValue] = value
        } else if Self.known.contains(key.stringValue), (try? container.decodeNil(forKey: key)) != true {
          notStrings.insert(key.stringValue)
        }
      }
    }
  }
}

/// Reading files that hold secrets.
enum SecretFile {
  /// The whole file (at most 1 MiB); a warning when its mode lets group or others read it.
  static func contents(of path: String, logger: Logger) throws -> [UInt8] {
    func failure(_ reason: String) -> CredentialsError { .unreadableFile(path: path, reason: reason) }
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { throw failure(String(cString: strerror(errno))) }
    defer { close(fd) }
    var info = stat()
    guard fstat(fd, &info) == 0 else { throw failure(String(cString: strerror(errno))) }
    guard info.st_mode & S_IFMT == S_IFREG else { throw failure("not a regular file") }
    guard info.st_size <= 1 << 20 else { throw failure("larger than 1 MiB") }
    let mode = info.st_mode & 0o777
    if mode & 0o077 != 0 {
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

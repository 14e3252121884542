import AsyncHTTPClient
import Logging
import ServiceAccess

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// The environment variable that may hold a ready access token.
public let accessTokenVariable = "BUCKETFS_ACCESS_TOKEN"

/// Finds credentials in this order, the first that applies winning:
///
/// 1. `accessTokenFile` (`--access-token-file`): a static token;
/// 2. `explicitFile` (`--credentials`): a service-account key or authorized-user file;
/// 3. `BUCKETFS_ACCESS_TOKEN`: a static token;
/// 4. `GOOGLE_APPLICATION_CREDENTIALS`: a key or authorized-user file;
/// 5. gcloud's application-default file, `$CLOUDSDK_CONFIG/application_default_credentials.json`
///    or `~/.config/gcloud/application_default_credentials.json`;
/// 6. the metadata server: at `GCE_METADATA_HOST` when set, else at 169.254.169.254 when
///    `metadataServerAvailable` says it answers (by default only on a machine whose firmware
///    says Google, and only if it accepts a connection within a second).
///
/// 2–5 are the order of Google's client libraries (2 and 4 named by a file that must then be
/// valid: a broken file is an error, not a reason to look further). Nothing is fetched here;
/// the first `token(refresh:)` call fetches. Throws ``CredentialsError``.
public func discover(
  explicitFile: String?, accessTokenFile: String? = nil, environment: [String: String],
  http: HTTPClient = .shared, scope: String = StorageScope.readWrite,
  refreshMargin: Double = TokenDefaults.refreshMargin, logger: Logger,
  metadataServerAvailable: () -> Bool = MetadataServerProbe.answers
) throws -> any AccessTokenProvider {
  func fromFile(_ path: String, via: String) throws -> any AccessTokenProvider {
    let file = try CredentialsFile.load(path: path, logger: logger)
    let quotaProject = value(quotaProjectVariable) ?? file.quotaProject
    let provider = file.provider(
      scope: scope, quotaProject: quotaProject, environment: environment, http: http,
      refreshMargin: refreshMargin, logger: logger)
    let quota = quotaProject.map { ", quota project \($0)" } ?? ""
    logger.info("credentials: \(provider), from \(path) (\(via))\(quota)")
    return provider
  }
  func value(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }

  if let accessTokenFile {
    guard explicitFile == nil else {
      throw CredentialsError.conflict("--credentials and --access-token-file cannot be used together")
    }
    let provider = try StaticTokenCredentials(file: accessTokenFile, logger: logger)
    logger.info("credentials: \(provider) (--access-token-file)")
    return provider
  }
  if let explicitFile { return try fromFile(explicitFile, via: "--credentials") }
  if let token = value(accessTokenVariable) {
    logger.info("credentials: the access token in \(accessTokenVariable)")
    return try StaticTokenCredentials(token: token, origin: accessTokenVariable, logger: logger)
  }
  if let path = value("GOOGLE_APPLICATION_CREDENTIALS") {
    return try fromFile(path, via: "GOOGLE_APPLICATION_CREDENTIALS")
  }
  let adc = applicationDefaultPath(environment: environment)
  if let adc, access(adc, F_OK) == 0 {
    return try fromFile(adc, via: "gcloud application-default credentials")
  }
  if let host = value("GCE_METADATA_HOST") {
    let provider = MetadataServerCredentials(
      host: host, http: http, refreshMargin: refreshMargin, logger: logger)
    logger.info("credentials: \(provider) (GCE_METADATA_HOST)")
    return provider
  }
  if metadataServerAvailable() {
    let provider = MetadataServerCredentials(http: http, refreshMargin: refreshMargin, logger: logger)
    logger.info("credentials: \(provider)")
    return provider
  }
  throw CredentialsError.noCredentialsFound(
    "give --credentials FILE or set GOOGLE_APPLICATION_CREDENTIALS (a service-account key or "
      + "authorized-user file), run 'gcloud auth application-default login'"
      + (adc.map { " (looked for \($0))" } ?? "")
      + ", or use --anonymous for a public bucket")
}

/// Where gcloud keeps the application-default credentials for this environment.
public func applicationDefaultPath(environment: [String: String]) -> String? {
  if let config = environment["CLOUDSDK_CONFIG"], !config.isEmpty {
    return config + "/application_default_credentials.json"
  }
  var home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 }
  if home == nil, let entry = getpwuid(getuid()), let directory = entry.pointee.pw_dir {
    home = String(cString: directory)
  }
  return home.map { $0 + "/.config/gcloud/application_default_credentials.json" }
}

/// This process's environment as a dictionary.
public func processEnvironment() -> [String: String] {
  var result: [String: String] = [:]
  var cursor = environ
  while let entry = cursor.pointee {
    let text = String(cString: entry)
    if let equals = text.firstIndex(of: "=") {
      result[String(text[..<equals])] = String(text[text.index(after: equals)...])
    }
    cursor += 1
  }
  return result
}

/// Whether this machine has a metadata server, asked without sending anything on machines
/// that are plainly not Google's: the firmware must say Google (as it does on Compute Engine
/// and GKE nodes) before a connection to 169.254.169.254:80 is tried, for one second at most.
/// Where the firmware is hidden (some containers), set GCE_METADATA_HOST instead.
public enum MetadataServerProbe {
  public static func answers() -> Bool {
    guard firmwareSaysGoogle() else { return false }
    return connects(to: MetadataServerCredentials.defaultHost, port: 80, timeoutMilliseconds: 1000)
  }

  static func firmwareSaysGoogle() -> Bool {
    for path in ["/sys/class/dmi/id/product_name", "/sys/class/dmi/id/bios_vendor"] {
      guard let file = fopen(path, "r") else { continue }
      defer { fclose(file) }
      var buffer = [CChar](repeating: 0, count: 256)
      if fgets(&buffer, Int32(buffer.count), file) != nil,
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
          .contains("Google")
      {
        return true
      }
    }
    return false
  }

  /// A TCP connection to an IPv4 `address` within the timeout.
  static func connects(to address: String, port: UInt16, timeoutMilliseconds: Int32) -> Bool {
    #if canImport(Glibc)
      let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
    #else
      let fd = socket(AF_INET, SOCK_STREAM, 0)
      if fd >= 0 { _ = fcntl(fd, F_SETFL, O_NONBLOCK) }
    #endif
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var socketAddress = sockaddr_in()
    socketAddress.sin_family = sa_family_t(AF_INET)
    socketAddress.sin_port = port.bigEndian
    guard inet_pton(AF_INET, address, &socketAddress.sin_addr) == 1 else { return false }
    let started = withUnsafePointer(to: &socketAddress) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
      }
    }
    if started == 0 { return true }
    guard errno == EINPROGRESS else { return false }
    var poller = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
    guard poll(&poller, 1, timeoutMilliseconds) == 1 else { return false }
    var failure: Int32 = 0
    var length = socklen_t(MemoryLayout<Int32>.size)
    guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &failure, &length) == 0 else { return false }
    return failure == 0
  }
}

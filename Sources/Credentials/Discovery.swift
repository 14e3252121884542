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
/// 6. the metadata server: at `GCE_METADATA_HOST` when set, else where `metadataServerAvailable`
///    finds one that answers as a metadata server (``MetadataServerProbe``: 169.254.169.254 on a
///    machine whose firmware says Google, `GCE_METADATA_IP` when set, and
///    `metadata.google.internal` everywhere, for about 3 s at most).
///
/// 2–5 are the order of Google's client libraries (2 and 4 named by a file that must then be
/// valid: a broken file is an error, not a reason to look further). Nothing is fetched here;
/// the first `token(refresh:)` call fetches. Throws ``CredentialsError``.
public func discover(
  explicitFile: String?, accessTokenFile: String? = nil, environment: [String: String],
  http: HTTPClient = .shared, scope: String = StorageScope.readWrite,
  refreshMargin: Double = TokenDefaults.refreshMargin, logger: Logger,
  // The probe reads the process's environment (a default cannot see `environment`).
  metadataServerAvailable: () -> MetadataServerProbe.Answer = {
    MetadataServerProbe.locate(environment: processEnvironment())
  }
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
  if let host = metadataServerAvailable().host {
    let provider = MetadataServerCredentials(
      host: host, http: http, refreshMargin: refreshMargin, logger: logger)
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

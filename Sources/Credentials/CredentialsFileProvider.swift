import AsyncHTTPClient
import Logging
import ServiceAccess

/// The environment variable that names the project for quota and billing, over a file's
/// `quota_project_id` (as in Google's libraries).
public let quotaProjectVariable = "GOOGLE_CLOUD_QUOTA_PROJECT"

extension CredentialsFile {
  /// The token source for these credentials. `quotaProject` is what Cloud Storage requests
  /// carry as `x-goog-user-project`; `environment` is passed to an executable subject-token
  /// source (and says whether one may run).
  public func provider(
    scope: String = StorageScope.readWrite, quotaProject: String?, environment: [String: String],
    http: HTTPClient = .shared, refreshMargin: Double = TokenDefaults.refreshMargin, logger: Logger
  ) -> any AccessTokenProvider {
    switch self {
    case .serviceAccount(let key) where key.universeDomain != defaultUniverseDomain:
      return SelfSignedJWTCredentials(
        key: key, scope: scope, quotaProject: quotaProject, refreshMargin: refreshMargin, logger: logger)
    case .serviceAccount(let key):
      return ServiceAccountCredentials(
        key: key, scope: scope, quotaProject: quotaProject, http: http, refreshMargin: refreshMargin,
        logger: logger)
    case .authorizedUser(let user):
      return AuthorizedUserCredentials(
        user: user, quotaProject: quotaProject, http: http, refreshMargin: refreshMargin, logger: logger)
    case .externalAccount(let account):
      return ExternalAccountCredentials(
        account: account, scope: scope, quotaProject: quotaProject, environment: environment, http: http,
        refreshMargin: refreshMargin, logger: logger)
    case .impersonatedServiceAccount(let account):
      return ImpersonatedCredentials(
        account: account, scope: scope, quotaProject: quotaProject, environment: environment, http: http,
        refreshMargin: refreshMargin, logger: logger)
    case .externalAccountAuthorizedUser(let user):
      return ExternalAccountAuthorizedUserCredentials(
        user: user, quotaProject: quotaProject, http: http, refreshMargin: refreshMargin, logger: logger)
    }
  }
}

/// Credentials of a kind that names no quota project (the metadata server, a static token),
/// given the one GOOGLE_CLOUD_QUOTA_PROJECT names.
public struct QuotaProjectCredentials: AccessTokenProvider, CustomStringConvertible {
  public let base: any AccessTokenProvider
  public let quotaProject: String?

  public init(_ base: any AccessTokenProvider, quotaProject: String) {
    self.base = base
    self.quotaProject = quotaProject
  }

  public func token(refresh: Bool) async throws -> String { try await base.token(refresh: refresh) }

  public var description: String { "\(base)" }
}

/// The universe domain of the credentials file that ``discover(explicitFile:accessTokenFile:environment:http:scope:refreshMargin:logger:metadataServerAvailable:)``
/// would use, when it names one other than `googleapis.com`: the default endpoint is then
/// `https://storage.UNIVERSE`. Nil for every other source, and when the file is unusable
/// (discovery then says why).
public func discoveredUniverseDomain(
  explicitFile: String?, accessTokenFile: String?, environment: [String: String]
) -> String? {
  guard accessTokenFile == nil else { return nil }
  func value(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
  let quiet = Logger(label: "bucketfs.universe", factory: { _ in SwiftLogNoOpLogHandler() })
  var path = explicitFile
  if path == nil, value(accessTokenVariable) == nil {
    path = value("GOOGLE_APPLICATION_CREDENTIALS") ?? applicationDefaultPath(environment: environment)
  }
  guard let path, let file = try? CredentialsFile.load(path: path, logger: quiet) else { return nil }
  return file.universeDomain == defaultUniverseDomain ? nil : file.universeDomain
}

/// `provider`, with the project GOOGLE_CLOUD_QUOTA_PROJECT names when it carries another
/// (or none): the variable wins for every kind of credentials, as in Google's libraries.
public func applyingQuotaProjectVariable(
  _ provider: any AccessTokenProvider, environment: [String: String]
) -> any AccessTokenProvider {
  guard let project = environment[quotaProjectVariable], !project.isEmpty, provider.quotaProject != project
  else { return provider }
  return QuotaProjectCredentials(provider, quotaProject: project)
}

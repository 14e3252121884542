import AsyncHTTPClient
import Credentials
import Logging
import ServiceAccess
import TLSTrust

#if canImport(Glibc)
  import Glibc
#endif

// The endpoint and credentials of a command that talks to the service
// (mount, clean-parts), from its options and the environment.

/// `--endpoint`, else `STORAGE_EMULATOR_HOST`, else production; and whether
/// it came from `STORAGE_EMULATOR_HOST` (an emulator gets no credentials).
func serviceEndpoint(
  _ option: String?, anonymous: Bool, credentials: String?, accessTokenFile: String?, allowInsecureHTTP: Bool
) throws(Mount.MountFailure) -> (Endpoint, emulated: Bool) {
  let emulator = getenv("STORAGE_EMULATOR_HOST").map { String(cString: $0) }.flatMap {
    $0.isEmpty ? nil : $0
  }
  let endpoint: Endpoint
  do {
    // Outside googleapis.com, the credentials' universe decides where the service is.
    let universe =
      anonymous
      ? nil
      : discoveredUniverseDomain(
        explicitFile: credentials, accessTokenFile: accessTokenFile, environment: processEnvironment())
    let production = universe.map { "https://storage.\($0)" } ?? Endpoint.production
    endpoint = try Endpoint(option ?? emulator ?? production, allowInsecure: allowInsecureHTTP)
  } catch {
    throw Mount.MountFailure(message: error.description)
  }
  if anonymous && (credentials != nil || accessTokenFile != nil) {
    throw Mount.MountFailure(
      message: "--anonymous cannot be combined with --credentials or --access-token-file")
  }
  return (endpoint, emulator != nil && option == nil)
}

/// The credentials discovered, checked by getting one token now, so a bad
/// credential is one clear line rather than EACCES later; nil when anonymous.
/// (Google's libraries send no credentials to an emulator.)
func accessTokens(
  anonymous: Bool, credentials: String?, accessTokenFile: String?, http: HTTPClient, logger: Logger
) throws(Mount.MountFailure) -> (any AccessTokenProvider)? {
  guard !anonymous else { return nil }
  do {
    let environment = processEnvironment()
    let provider = applyingQuotaProjectVariable(
      try discover(
        explicitFile: credentials, accessTokenFile: accessTokenFile, environment: environment, http: http,
        logger: logger), environment: environment)
    let failure = blocking { () async -> String? in
      do {
        _ = try await provider.token(refresh: false)
        return nil
      } catch {
        return "\(error)"
      }
    }
    if let failure { throw Mount.MountFailure(message: failure) }
    return provider
  } catch let failure as Mount.MountFailure {
    throw failure
  } catch {
    throw Mount.MountFailure(message: "\(error)")
  }
}

/// The CA certificates this command trusts (MountOptionTable.caFile), read and checked now.
func certificateTrust(caFile: String?, logger: Logger) throws(Mount.MountFailure) -> CertificateTrust {
  do {
    let trust = try CertificateTrust(caFile: caFile, environment: processEnvironment())
    logger.debug("TLS: trusting the CA certificates of \(trust.origin)")
    return trust
  } catch {
    throw Mount.MountFailure(message: "TLS: \(error.description)")
  }
}

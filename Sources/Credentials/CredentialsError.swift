/// Why no access token could be had. Every description is one line that names the file,
/// field or endpoint at fault and never holds a key, token, refresh token or client secret.
public enum CredentialsError: Error, Equatable, CustomStringConvertible {
  /// The file could not be opened or read.
  case unreadableFile(path: String, reason: String)
  /// The file is not a usable credentials file; `reason` names the field at fault.
  case invalidFile(path: String, reason: String)
  /// The token endpoint answered with an error status.
  case tokenEndpointRefused(endpoint: String, status: Int, error: String?, description: String?)
  /// The token endpoint answered 2xx with something that is not a token.
  case invalidTokenResponse(endpoint: String, reason: String)
  /// The token endpoint could not be reached.
  case unreachable(endpoint: String, reason: String)
  /// An external account's subject token could not be had from `source` (a file, URL or
  /// program); `reason` never quotes what the source answered.
  case subjectTokenUnavailable(source: String, reason: String)
  /// Nothing in the discovery order applied.
  case noCredentialsFound(String)
  /// Contradictory options.
  case conflict(String)

  public var description: String {
    switch self {
    case .unreadableFile(let path, let reason):
      return "cannot read credentials file \(path): \(reason)"
    case .invalidFile(let path, let reason):
      return "invalid credentials file \(path): \(reason)"
    case .tokenEndpointRefused(let endpoint, let status, let error, let description):
      var text = "token endpoint \(endpoint) refused the credentials: HTTP \(status)"
      if let error { text += " \(error)" }
      if let description { text += ": \(description)" }
      return text
    case .invalidTokenResponse(let endpoint, let reason):
      return "token endpoint \(endpoint) sent an unusable answer: \(reason)"
    case .unreachable(let endpoint, let reason):
      return "cannot reach token endpoint \(endpoint): \(reason)"
    case .subjectTokenUnavailable(let source, let reason):
      return "cannot get the subject token from \(source): \(reason)"
    case .noCredentialsFound(let detail):
      return "no credentials found: \(detail)"
    case .conflict(let detail):
      return detail
    }
  }
}

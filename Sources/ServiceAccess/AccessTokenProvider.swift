/// Supplies the bearer token for each request; nil means anonymous.
public protocol AccessTokenProvider: Sendable {
  /// A valid token; `refresh` forces a new one (after a 401).
  func token(refresh: Bool) async throws -> String

  /// The project charged for the requests' quota, sent as `x-goog-user-project`; nil: the
  /// project of the credentials themselves.
  var quotaProject: String? { get }
}

extension AccessTokenProvider {
  public var quotaProject: String? { nil }
}

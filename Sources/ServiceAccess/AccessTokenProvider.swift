/// Supplies the bearer token for each request; nil means anonymous.
public protocol AccessTokenProvider: Sendable {
  /// A valid token; `refresh` forces a new one (after a 401).
  func token(refresh: Bool) async throws -> String
}

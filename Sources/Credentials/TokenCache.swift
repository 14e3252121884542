#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

/// An access token as a token endpoint hands it out.
public struct AccessToken: Sendable {
  public var value: String
  /// Seconds the token is valid from when it was received; nil if the source does not say.
  public var expiresIn: Double?

  public init(value: String, expiresIn: Double?) {
    self.value = value
    self.expiresIn = expiresIn
  }
}

/// Keeps the current token, fetches a new one ahead of its expiry, and makes concurrent
/// callers share one fetch.
actor TokenCache {
  private struct Cached {
    var value: String
    /// From here on a caller gets a new token.
    var staleAt: ContinuousClock.Instant
    /// From here on the token is useless even if a refresh failed.
    var expiresAt: ContinuousClock.Instant
  }

  private let refreshMargin: Double
  private let fetch: @Sendable () async throws -> AccessToken
  private var cached: Cached?
  private var inFlight: Task<String, any Error>?

  /// `refreshMargin`: seconds before expiry at which a token is replaced. A token that lives
  /// no longer than the margin is replaced after half its life instead.
  init(refreshMargin: Double, fetch: @escaping @Sendable () async throws -> AccessToken) {
    self.refreshMargin = refreshMargin
    self.fetch = fetch
  }

  func token(refresh: Bool) async throws -> String {
    let task: Task<String, any Error>
    if let inFlight {
      task = inFlight  // someone is already fetching: share it
    } else if !refresh, let cached, ContinuousClock.now < cached.staleAt {
      return cached.value
    } else {
      let fetch = self.fetch
      task = Task<String, any Error> {
        do {
          let token = try await fetch()
          self.store(token)
          return token.value
        } catch {
          self.clearInFlight()
          throw error
        }
      }
      inFlight = task
    }
    do {
      return try await task.value
    } catch {
      // A failed early refresh is no reason to drop a token that still works.
      if !refresh, let cached, ContinuousClock.now + .seconds(10) < cached.expiresAt { return cached.value }
      throw error
    }
  }

  private func store(_ token: AccessToken) {
    let now = ContinuousClock.now
    // No expiry given: trust it for an hour (what Google issues), then ask again.
    // One that is not a number of seconds a Duration holds counts as none.
    let given = token.expiresIn.flatMap { $0.isFinite ? $0 : nil } ?? 3600
    let lifetime = min(max(given, 0), Self.longestLifetime)
    let fresh = lifetime > refreshMargin ? lifetime - refreshMargin : lifetime / 2
    cached = Cached(
      value: token.value, staleAt: now + .milliseconds(Int64(fresh * 1000)),
      expiresAt: now + .milliseconds(Int64(lifetime * 1000)))
    inFlight = nil
  }

  /// A year: no token lives longer, and its milliseconds fit an Int64.
  static let longestLifetime: Double = 365 * 86400

  private func clearInFlight() {
    inFlight = nil
  }
}

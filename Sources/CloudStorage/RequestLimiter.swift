import NIOCore
import ObjectStore
import Synchronization

/// A token bucket: `rate` tokens a second, holding at most half a second's
/// worth (and at least one token), so no second ever carries more than one
/// and a half times the rate. Pure: the caller says what time it is
/// (seconds on any monotonic clock).
public struct TokenBucket: Sendable, Equatable {
  public let rate: Double
  /// The most it holds: what may go at once after an idle spell.
  public let capacity: Double
  private(set) var available: Double
  private var updated: Double

  /// Starts full.
  public init(rate: Double, now: Double) {
    self.rate = rate
    self.capacity = max(1, rate / 2)
    self.available = capacity
    self.updated = now
  }

  /// Takes `amount` at `now` and says how many seconds the caller must wait
  /// before sending (0: at once). Tokens may go into debt, so callers that
  /// come later wait behind the ones already waiting.
  public mutating func take(_ amount: Double, now: Double) -> Double {
    if now > updated {
      available = min(capacity, available + (now - updated) * rate)
      updated = now
    }
    available -= amount
    return available >= 0 ? 0 : -available / rate
  }

  /// Gives back what a caller took and did not use (it gave up waiting).
  public mutating func giveBack(_ amount: Double) {
    available = min(capacity, available + amount)
  }
}

/// `--max-requests-per-second` and `--max-bytes-per-second`, shared by every
/// request of a mount: each attempt waits here for its turn before it is
/// sent, never failing for the limit itself. Bytes are counted before
/// sending where they are known (a body, a download's range) and charged
/// after the answer otherwise (a listing page, metadata). A wait ends early, with an
/// error, when the task is cancelled (an interrupted read) or would pass the
/// request's deadline.
public final class RequestLimiter: Sendable {
  private let requests: Mutex<TokenBucket>?
  private let bytes: Mutex<TokenBucket>?
  private let now: @Sendable () -> Double
  private let sleep: @Sendable (Double) async throws -> Void

  /// Nil rates are no limit. `now` and `sleep` are the clock (seconds), injectable for tests.
  public init(
    requestsPerSecond: Double?, bytesPerSecond: Double?,
    now: @escaping @Sendable () -> Double = RequestLimiter.monotonicSeconds,
    sleep: @escaping @Sendable (Double) async throws -> Void = {
      try await Task.sleep(nanoseconds: UInt64($0 * 1e9))
    }
  ) {
    let start = now()
    self.requests = requestsPerSecond.map { Mutex(TokenBucket(rate: $0, now: start)) }
    self.bytes = bytesPerSecond.map { Mutex(TokenBucket(rate: $0, now: start)) }
    self.now = now
    self.sleep = sleep
  }

  public var isLimiting: Bool { requests != nil || bytes != nil }

  /// Waits until one request of `byteCount` bytes may be sent.
  /// Throws ``StorageError/cancelled`` or, past `deadline` (seconds on `now`'s clock), ``StorageError/unavailable(_:)``.
  public func admit(byteCount: Int, deadline: Double, operation: String) async throws {
    let at = now()
    let amount = Double(max(0, byteCount))
    let waitRequests = requests?.withLock { $0.take(1, now: at) } ?? 0
    let waitBytes = bytes?.withLock { $0.take(amount, now: at) } ?? 0
    let wait = max(waitRequests, waitBytes)
    guard wait > 0 else { return }
    guard at + wait <= deadline else {
      giveBack(amount)
      throw StorageError.unavailable(
        "\(operation): its turn under the request limits would come after the deadline")
    }
    do {
      try await sleep(wait)
    } catch {
      giveBack(amount)
      throw StorageError.cancelled
    }
    if Task.isCancelled { throw StorageError.cancelled }
  }

  /// Counts bytes learnt only from an answer (a listing's or an object's
  /// metadata): no wait now, but later requests wait behind them.
  public func charge(byteCount: Int) {
    guard byteCount > 0 else { return }
    _ = bytes?.withLock { $0.take(Double(byteCount), now: now()) }
  }

  private func giveBack(_ amount: Double) {
    requests?.withLock { $0.giveBack(1) }
    bytes?.withLock { $0.giveBack(amount) }
  }

  @Sendable public static func monotonicSeconds() -> Double {
    Double(NIODeadline.now().uptimeNanoseconds) / 1e9
  }
}

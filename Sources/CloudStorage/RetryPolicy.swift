/// Exponential back-off with full jitter inside an overall deadline (docs/SEMANTICS.md#errors-retries).
public struct RetryPolicy: Sendable {
  /// Longest wait for any byte of one attempt before it is abandoned.
  public var attemptTimeout: Double = 30
  /// Time one operation may take, retries included, before it fails with EIO.
  public var deadline: Double = 60
  public var initialBackoff: Double = 0.1
  public var maxBackoff: Double = 5

  public init() {}

  /// The wait before retry number `attempt` (1-based), at least `retryAfter`.
  func delay(attempt: Int, retryAfter: Double?) -> Double {
    let ceiling = min(maxBackoff, initialBackoff * Double(1 << min(attempt - 1, 20)))
    let jittered = Double.random(in: 0...ceiling)
    return max(jittered, retryAfter ?? 0)
  }

  /// The statuses worth another attempt.
  static func isRetryable(status: Int) -> Bool {
    status == 408 || status == 429 || status == 500 || status == 502 || status == 503 || status == 504
  }
}

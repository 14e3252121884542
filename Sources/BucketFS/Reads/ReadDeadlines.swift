import NIOCore
import ObjectStore

/// One deadline per read as the user sees it. The kernel reads a file in
/// several requests and, when its read-ahead fails, asks again with a read of
/// its own: were each to start a full deadline, `cat` of an object behind a
/// failing service would take twice `--retry-deadline` or more. So reads of
/// an object share the deadline of the first one under way; once that is
/// exhausted, reads of it make one attempt each (no retries) until one
/// succeeds or the deadline's length has passed. A service that recovers is
/// used again at once: that one attempt succeeds.
struct ReadDeadlines {
  private struct RetryWindow {
    /// When the first read under way gives up retrying.
    let deadline: NIODeadline
    /// Reads under way that share it.
    var readers = 0
    /// When a read failed after its deadline's retries: reads from then on try once.
    var exhaustedAt: NIODeadline?
  }
  private var byKey: [ObjectKey: RetryWindow] = [:]
  private var nextSweep = 1024
  let length: TimeAmount

  init(seconds: Double) {
    length = .milliseconds(Int64(seconds * 1000))
  }

  /// What a read of `key` starting now may do; pair it with ``end(_:_:)``.
  mutating func begin(_ key: String, now: NIODeadline = .now()) -> OperationDeadline {
    let key = ObjectKey(key)
    if byKey.count >= nextSweep { sweep(now) }
    if var trouble = byKey[key] {
      if let exhaustedAt = trouble.exhaustedAt {
        if now < exhaustedAt + length {
          trouble.readers += 1
          byKey[key] = trouble
          return OperationDeadline(deadline: nil, retries: false)
        }
      } else {
        trouble.readers += 1
        byKey[key] = trouble
        return trouble.deadline > now
          ? OperationDeadline(deadline: trouble.deadline) : OperationDeadline(deadline: nil, retries: false)
      }
    }
    let deadline = now + length
    byKey[key] = RetryWindow(deadline: deadline, readers: 1)
    return OperationDeadline(deadline: deadline)
  }

  /// A read of `key` ended: a success clears what is known of trouble; a
  /// failure the service caused makes later reads try once.
  mutating func end(_ key: String, _ error: (any Error)?, now: NIODeadline = .now()) {
    let key = ObjectKey(key)
    guard var trouble = byKey[key] else { return }
    trouble.readers = max(trouble.readers - 1, 0)
    switch error {
    case nil:
      byKey[key] = nil
      return
    case StorageError.unavailable?:
      trouble.exhaustedAt = now
    default:
      break
    }
    byKey[key] = trouble.readers == 0 && trouble.exhaustedAt == nil ? nil : trouble
  }

  var count: Int { byKey.count }

  /// Objects failing and never read again would otherwise stay here for
  /// good; sweeps grow apart as the live entries grow, so they cost O(1) a read.
  private mutating func sweep(_ now: NIODeadline) {
    byKey = byKey.filter { _, trouble in
      trouble.readers > 0 || (trouble.exhaustedAt.map { now < $0 + length } ?? false)
    }
    nextSweep = max(1024, 2 * byKey.count)
  }
}

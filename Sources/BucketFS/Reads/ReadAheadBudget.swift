import CoreMetrics
import Synchronization

/// Memory that read-ahead may hold at once, shared by every open file (and
/// by anything else that fetches before it is asked). Without it each
/// sequential reader holds up to `Configuration.readAheadMaxBytes` (64 MiB)
/// in flight plus its spare buffers, so 64 readers pin gigabytes. A reader refused a grant fetches smaller
/// segments, or only the bytes the kernel asks for: slower, never an error.
final class ReadAheadBudget: Sendable {
  let capacity: Int
  private let used = Mutex(0)
  /// `bucketfs_read_ahead_bytes`: moved by each grant and release after
  /// `used` is let go (an atomic add; callers may hold `FileReader.state`).
  private let granted: Meter

  init(capacity: Int, metrics: any MetricsFactory = MetricsSystem.factory) {
    self.capacity = max(capacity, 0)
    granted = Meter(label: "bucketfs_read_ahead_bytes", factory: metrics)
  }

  /// Takes up to `wanted` bytes if at least `minimum` are free, and returns
  /// how many it took (0: none). Each taken byte must be given back with
  /// ``release(_:)`` once the memory it stands for is let go.
  func acquire(upTo wanted: Int, atLeast minimum: Int) -> Int {
    let taken = used.withLock { used in
      let granted = min(wanted, capacity - used)
      guard granted >= max(minimum, 1) else { return 0 }
      used += granted
      return granted
    }
    if taken > 0 { granted.increment(by: Double(taken)) }
    return taken
  }

  func release(_ bytes: Int) {
    guard bytes > 0 else { return }
    let released = used.withLock { used in
      assert(used >= bytes, "read-ahead budget released more than it granted")
      let released = min(bytes, used)
      used -= released
      return released
    }
    granted.decrement(by: Double(released))
  }

  /// Bytes granted and not yet released.
  var inUse: Int { used.withLock { $0 } }

  var available: Int { capacity - inUse }
}

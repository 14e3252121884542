import NIOCore
import ObjectStore
import StorageFake
import Synchronization

/// The wrapped store's reads, each held until the test releases it (so the
/// reads under way at once can be counted without depending on speed), and
/// optionally answered short or failed at chosen offsets.
final class HeldReadStore: ForwardingObjectStore, Sendable {
  let base: InMemoryObjectStore
  private struct State {
    var holding = false
    /// Reads waiting for a release, and the release each waits for.
    var waiting = 0
    var round = 0
    /// Reads under way (held or not) and the most at once.
    var underWay = 0
    var peak = 0
    /// Range starts answered short: how many more times each.
    var short: [Int64: Int] = [:]
    /// Range starts that fail: how many more times each.
    var failing: [Int64: Int] = [:]
    var ranges: [Range<Int64>] = []
  }
  private let state = Mutex(State())

  init(_ base: InMemoryObjectStore, holding: Bool = false) {
    self.base = base
    state.withLock { $0.holding = holding }
  }

  var inner: any ObjectStore { base }
  var waiting: Int { state.withLock { $0.waiting } }
  var peak: Int { state.withLock { $0.peak } }
  var ranges: [Range<Int64>] { state.withLock { $0.ranges } }

  /// Lets every held read answer; later reads are held again while holding.
  func releaseAll() { state.withLock { $0.round += 1 } }

  func stopHolding() {
    state.withLock {
      $0.holding = false
      $0.round += 1
    }
  }

  /// The next `times` reads starting at `offset` answer one byte short.
  func answerShort(at offset: Int64, times: Int = 1) { state.withLock { $0.short[offset] = times } }

  /// The next `times` reads starting at `offset` fail as an outage would.
  func fail(at offset: Int64, times: Int = 1) { state.withLock { $0.failing[offset] = times } }

  /// The spare goes unused.
  func read(_ name: String, generation: Int64, range: Range<Int64>, reusing spare: SpareBuffer?)
    async throws -> ByteBuffer
  {
    let (held, round) = state.withLock { s -> (Bool, Int) in
      s.ranges.append(range)
      s.underWay += 1
      s.peak = max(s.peak, s.underWay)
      if s.holding { s.waiting += 1 }
      return (s.holding, s.round)
    }
    defer { state.withLock { $0.underWay -= 1 } }
    if held {
      while state.withLock({ $0.round == round }) {
        do {
          try await Task.sleep(for: .milliseconds(1))
        } catch {
          state.withLock { $0.waiting -= 1 }
          throw StorageError.cancelled
        }
      }
      state.withLock { $0.waiting -= 1 }
    }
    let (failing, short) = state.withLock { s -> (Bool, Bool) in
      let failing = s.failing[range.lowerBound, default: 0] > 0
      if failing { s.failing[range.lowerBound, default: 0] -= 1 }
      let short = !failing && s.short[range.lowerBound, default: 0] > 0
      if short { s.short[range.lowerBound, default: 0] -= 1 }
      return (failing, short)
    }
    if failing { throw StorageError.unavailable("held read store: failing at \(range.lowerBound)") }
    var bytes = try await base.read(name, generation: generation, range: range, reusing: nil)
    if short { bytes.moveWriterIndex(to: bytes.writerIndex - 1) }
    return bytes
  }
}

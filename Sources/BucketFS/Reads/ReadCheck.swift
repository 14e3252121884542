import NIOCore
import ObjectStore
import Synchronization

/// One open file's check against its object's CRC-32C (docs/SEMANTICS.md#integrity):
/// the sum of what was read from the first byte on, and, once it did not
/// match, the failure every later read of the handle answers. Its lock is
/// taken alone, or after the reader's own (``FileReader``'s `state`), never
/// before it.
final class ReadCheck: Sendable {
  private struct State {
    var sum: SequentialSum
    var poisoned: IntegrityFailure?
  }

  private let state: Mutex<State>

  init(size: UInt64, expected: UInt32) {
    state = Mutex(State(sum: SequentialSum(size: size, expected: expected)))
  }

  /// Adds bytes [range) of the file, the start of `bytes`; summed here, by
  /// the caller (a fetching task), outside the lock.
  func add(_ bytes: ByteBuffer, _ range: Range<UInt64>) {
    let length = Int(range.upperBound - range.lowerBound)
    let sum = CRC32C.update(0, bytes.getSlice(at: bytes.readerIndex, length: length) ?? bytes)
    state.withLock { $0.sum.add(range.lowerBound, range.upperBound, sum: sum) }
  }

  /// Whether bytes from `offset` would continue the sum.
  func continues(at offset: UInt64) -> Bool {
    state.withLock { $0.sum.summed == offset && $0.sum.verdict == .open }
  }

  /// The read that ends the file may be answered at once.
  var matched: Bool { state.withLock { $0.poisoned == nil && $0.sum.verdict == .matched } }

  /// The sum is still short of the end (and nothing failed).
  var isOpen: Bool { state.withLock { $0.poisoned == nil && $0.sum.verdict == .open } }

  /// The failure every read of the handle answers once the bytes did not match.
  var failure: IntegrityFailure? {
    state.withLock { state in
      guard var failure = state.poisoned else { return nil }
      failure.first = false
      return failure
    }
  }

  /// A reader gone elsewhere: segments waiting beyond the sum will not be read.
  func dropWaiting() {
    state.withLock { $0.sum.dropWaiting() }
  }

  /// The mismatch, if any: `first` when this call found it, and the handle
  /// is poisoned from then on.
  func takeMismatch(key: String, generation: Int64) -> IntegrityFailure? {
    state.withLock { state in
      if var failure = state.poisoned {
        failure.first = false
        return failure
      }
      guard case .mismatched(let found) = state.sum.verdict else { return nil }
      let failure = IntegrityFailure(
        key: key, generation: generation, found: found, expected: state.sum.expected)
      state.poisoned = failure
      return failure
    }
  }
}

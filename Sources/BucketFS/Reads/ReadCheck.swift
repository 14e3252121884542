import NIOCore
import ObjectStore
import Synchronization

/// One open file's check against its object's CRC-32C (docs/SEMANTICS.md#integrity):
/// the sum of every byte the handle fetched, and, once something did not
/// match, the failure every later read of the handle answers. Its lock is
/// taken alone, or after the reader's own (``FileReader``'s `state`), never
/// before it.
final class ReadCheck: Sendable {
  private struct State {
    var sum: ObjectSum
    var poisoned: IntegrityFailure?
  }

  private let state: Mutex<State>
  /// The sum as it starts: its cuts, for summing outside the lock.
  private let layout: ObjectSum

  init(size: UInt64, expected: UInt32) {
    layout = ObjectSum(size: size, expected: expected)
    state = Mutex(State(sum: layout))
  }

  /// What a store is asked to sum of bytes `range` of the file as they arrive: the pieces ``add(_:_:summed:)`` records.
  func arrivalSums(_ range: Range<UInt64>) -> ArrivalSums {
    let ends = layout.cuts(range).map { Int($0.upperBound - range.lowerBound) }
    return ArrivalSums(range: Int64(range.lowerBound)..<Int64(range.upperBound), pieceEnds: ends)
  }

  /// Adds bytes `range` of the file, the start of `bytes`, cut into the
  /// pieces every fetch is cut into: with the sums the store took as they
  /// arrived (``arrivalSums(_:)``), else summed here, by the caller (a
  /// fetching task), outside the lock.
  func add(_ bytes: ByteBuffer, _ range: Range<UInt64>, summed: [UInt32]? = nil) {
    let cuts = layout.cuts(range)
    let sums: [UInt32]
    if let summed, summed.count == cuts.count {
      sums = summed
    } else {
      sums = cuts.map { piece in
        let at = bytes.readerIndex + Int(piece.lowerBound - range.lowerBound)
        return CRC32C.update(0, bytes.getSlice(at: at, length: piece.count) ?? ByteBuffer())
      }
    }
    state.withLock { state in
      for (piece, sum) in zip(cuts, sums) { state.sum.add(piece, sum: sum) }
    }
  }

  /// The read that ends the file may be answered at once.
  var matched: Bool { state.withLock { $0.poisoned == nil && $0.sum.verdict == .matched } }

  /// Every byte is not summed yet (and nothing failed).
  var isOpen: Bool { state.withLock { $0.poisoned == nil && $0.sum.verdict == .open } }

  /// Something did not match: the handle fails (``takeMismatch(key:generation:)`` says how).
  var failed: Bool {
    state.withLock { state in
      if state.poisoned != nil { return true }
      if case .mismatched = state.sum.verdict { return true }
      return false
    }
  }

  /// The failure every read of the handle answers once the bytes did not match.
  var failure: IntegrityFailure? {
    state.withLock { state in
      guard var failure = state.poisoned else { return nil }
      failure.first = false
      return failure
    }
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

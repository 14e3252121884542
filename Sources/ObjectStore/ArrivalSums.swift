import NIOCore
import Synchronization

/// The CRC-32Cs of pieces of one ranged read, taken by the store as the
/// bytes arrive, each chunk summed right after it is copied into the answer,
/// while it is still in the CPU's cache: a second pass over a large answer
/// reads it back from memory, which cost a reader more than the sums
/// themselves (measured; BENCHMARKS.md, issue 39). A store that cannot sum
/// as it reads leaves them unset, and the caller sums the answer itself.
public final class ArrivalSums: Sendable {
  /// The read they are for: a store sums only an answer to exactly this range.
  public let range: Range<Int64>
  private struct State {
    var piece = 0
    var filled = 0
    var crc: UInt32 = 0
    var sums: [UInt32] = []
  }
  /// Each piece's end, relative to the range's start, ascending; the last is the range's length.
  private let ends: [Int]
  private let state = Mutex(State())

  public init(range: Range<Int64>, pieceEnds: [Int]) {
    self.range = range
    self.ends = pieceEnds
  }

  /// A new answer starts (a retry's): what was summed of an earlier one goes.
  public func restart() {
    state.withLock { $0 = State() }
  }

  /// Sums the bytes at `index` of `buffer`, `count` of them: the next bytes of the answer.
  public func add(_ buffer: ByteBuffer, at index: Int, count: Int) {
    state.withLock { state in
      var at = index
      var left = count
      while left > 0, state.piece < ends.count {
        let take = min(left, ends[state.piece] - state.filled)
        guard let slice = buffer.getSlice(at: at, length: take) else { return }
        state.crc = CRC32C.update(state.crc, slice)
        state.filled += take
        at += take
        left -= take
        if state.filled == ends[state.piece] {
          state.sums.append(state.crc)
          state.crc = 0
          state.piece += 1
        }
      }
    }
  }

  /// Every piece's sum, in order, once the answer held all of them; else nil.
  public var sums: [UInt32]? {
    state.withLock { $0.sums.count == ends.count ? $0.sums : nil }
  }
}

import ObjectStore

/// The CRC-32C of an object read from its first byte on, combined from the
/// sums of its read-ahead segments as they arrive (each summed once, by the
/// task that fetched it, off the loop thread), in any order: a segment
/// beyond the bytes summed waits until the ones before it are in. Once
/// every byte is summed the verdict is known. A read that leaves the
/// sequence (a jump) does not stop it: only segments that continue it count,
/// and the ones waiting are dropped, since the reader will not come back
/// for them.
struct SequentialSum {
  enum Verdict: Equatable {
    case open
    case matched
    /// The object's bytes as read are not the object's.
    case mismatched(sum: UInt32)
  }

  let size: UInt64
  let expected: UInt32
  /// Bytes [0, summed) are in `sum`.
  private(set) var summed: UInt64 = 0
  private var sum: UInt32 = 0
  /// Segments past `summed`, by start: their end and sum.
  private var waiting: [UInt64: (end: UInt64, sum: UInt32)] = [:]
  private(set) var verdict = Verdict.open

  init(size: UInt64, expected: UInt32) {
    self.size = size
    self.expected = expected
    if size == 0 { verdict = expected == 0 ? .matched : .mismatched(sum: 0) }
  }

  /// Adds the sum of bytes [start, end).
  mutating func add(_ start: UInt64, _ end: UInt64, sum segmentSum: UInt32) {
    guard verdict == .open, end > start, end <= size else { return }
    if start > summed {
      // Bounded by the segments in flight; more would be a reader gone elsewhere.
      if waiting.count < 64 { waiting[start] = (end, segmentSum) }
      return
    }
    guard start == summed else { return }  // bytes summed already (a segment fetched again)
    append(end - start, segmentSum)
    summed = end
    while let next = waiting.removeValue(forKey: summed) {
      append(next.end - summed, next.sum)
      summed = next.end
    }
    if summed == size { verdict = sum == expected ? .matched : .mismatched(sum: sum) }
  }

  /// The reader jumped: segments waiting beyond the sum will not be read.
  mutating func dropWaiting() {
    waiting = [:]
  }

  private mutating func append(_ length: UInt64, _ segmentSum: UInt32) {
    sum = summed == 0 ? segmentSum : CRC32C.combine(sum, segmentSum, lengthB: Int64(length))
  }
}

/// A whole sequential read's bytes did not sum to the object's CRC-32C: one
/// changed on the way (EIO for every later read of the handle; the kernel's
/// pages and any cached copy go).
struct IntegrityFailure: Error, CustomStringConvertible {
  let key: String
  let generation: Int64
  let found: UInt32
  let expected: UInt32
  /// Whether this is the first time the handle answers it (it is counted
  /// and its effects set off once).
  var first = true

  var description: String {
    "the bytes read of \(key) (generation \(generation)) have crc32c \(CRC32C.base64(found)), the object \(CRC32C.base64(expected)): one changed on the way; open it again to read it anew"
  }
}

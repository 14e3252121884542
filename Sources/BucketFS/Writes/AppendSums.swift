import ObjectStore

/// The CRC-32C of a file's bytes, summed as they are written in order from
/// its first byte (cp, dd, a download into the mount): an upload of the
/// whole file or of a streamed part declares its checksum from here, with
/// no pass over the stage before sending it. It also makes the check end to
/// end: the sum is of what the writer gave, so bytes changed on the staging
/// disk are refused by the service.
///
/// Marks keep the sum before each 256 KiB boundary written, where every
/// streamed part starts and ends when the part size is a multiple of it
/// (the default 8 MiB is); a range between two marks has a sum without its
/// bytes, any other range is read to be summed. A value of the file's
/// state (``StagedFile/State``): it holds while every write lands at the
/// end, and starts afresh when the file is emptied.
struct AppendSums {
  /// Where marks fall: the service's chunk granularity.
  static let step: Int64 = 256 << 10
  /// The most marks kept by default (256 KiB of them): past them (4 GiB of
  /// a file that does not stream) only the whole file's sum is kept.
  static let defaultMaxMarks = 16_384

  /// The sum of the bytes before `offset`.
  struct Mark: Equatable {
    let offset: Int64
    let sum: UInt32
  }

  /// One write's sums, taken apart from the file's lock: from `start` (the
  /// sums' end when it was taken) to each mark it passes and to its end.
  struct Written {
    let start: Mark
    let marks: [Mark]
    let end: Mark

    /// Sums `data`, written at `start.offset`, on from `start.sum`.
    init(_ data: UnsafeRawBufferPointer, from start: Mark) {
      self.start = start
      var marks: [Mark] = []
      var sum = start.sum
      var done = 0
      var at = start.offset
      while done < data.count {
        let toMark = Int(AppendSums.step - at % AppendSums.step)
        let take = min(toMark, data.count - done)
        sum = CRC32C.update(sum, UnsafeRawBufferPointer(rebasing: data[done..<done + take]))
        done += take
        at += Int64(take)
        if at % AppendSums.step == 0 { marks.append(Mark(offset: at, sum: sum)) }
      }
      self.marks = marks
      end = Mark(offset: at, sum: sum)
    }
  }

  /// The sum of every byte written, [0, end.offset); nil once a write went
  /// unsummed.
  private(set) var end: Mark? = Mark(offset: 0, sum: 0)
  /// Ascending; those before the parts still to go up are dropped
  /// (``forget(below:)``).
  private var marks: [Mark] = []
  private let maxMarks: Int

  init(maxMarks: Int = AppendSums.defaultMaxMarks) {
    self.maxMarks = maxMarks
  }

  /// The sums of bytes not summed as they were written (a file's opened
  /// generation, a truncation to other than 0): none.
  static var unknown: AppendSums {
    var sums = AppendSums()
    sums.add(nil)
    return sums
  }

  /// A write at `offset` that keeps the sums: the point to sum it from.
  func start(at offset: Int64) -> Mark? {
    end.flatMap { $0.offset == offset ? $0 : nil }
  }

  /// Takes in a write at the end; one summed from elsewhere, or none
  /// summed, ends the sums until the file is emptied.
  mutating func add(_ written: Written?) {
    guard let written, let end, written.start == end else {
      (end, marks) = (nil, [])
      return
    }
    self.end = written.end
    for mark in written.marks where marks.count < maxMarks { marks.append(mark) }
  }

  /// The sum of `range`'s bytes, when both its ends are marks or the end.
  func sum(of range: Range<Int64>) -> UInt32? {
    guard let end, range.upperBound <= end.offset else { return nil }
    guard let lower = mark(at: range.lowerBound) else { return nil }
    let upper = range.upperBound == end.offset ? end : mark(at: range.upperBound)
    guard let upper else { return nil }
    // The sum before `upper` is the sum before `lower` shifted over the
    // range's length, plus the range's own: combine(a, 0, n) is the shift.
    return upper.sum ^ CRC32C.combine(lower.sum, 0, lengthB: Int64(range.count))
  }

  /// Drops the marks before `offset`: the bytes there went up already.
  mutating func forget(below offset: Int64) {
    marks.removeAll { $0.offset < offset }
  }

  /// The sum before `offset`: nothing comes before the first byte.
  private func mark(at offset: Int64) -> Mark? {
    if offset == 0 { return Mark(offset: 0, sum: 0) }
    return offset == end?.offset ? end : marks.first { $0.offset == offset }
  }
}

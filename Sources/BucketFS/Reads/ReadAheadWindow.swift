/// How far and how wide one reader fetches ahead (``FileReader``): segments
/// that double with its streak of sequential reads up to `maxSegment`, and
/// streams (segments in flight at once) that start at four, widen to what
/// the file's size warrants from the second sequential read, and double
/// whenever the reader, its segments full size, waits for bytes still on
/// their way, up to `maxStreams` and `maxAhead` bytes. A value in the
/// reader's state, under its lock.
struct ReadAheadWindow {
  static let firstSegment: UInt64 = 256 << 10
  static let initialStreams = 4

  let maxSegment: UInt64
  let maxAhead: UInt64
  /// Segments in flight at once at most: parallel streams of one reader.
  let maxStreams: Int
  /// Segments in flight once the reader is sequential: what the size warrants.
  let wideStreams: Int

  /// Sequential reads in a row: the segment size grows with it.
  private(set) var streak = 0
  /// Segments kept in flight at most; doubles when the reader waits.
  private(set) var streams = ReadAheadWindow.initialStreams
  /// The last segment requested before the streams last grew: only a wait
  /// for a later one (fetched with the larger window) grows them again.
  private var grownAfter = -1

  init(size: UInt64, maxSegment: Int, maxAhead: Int, maxStreams: Int, streamBytes: Int) {
    self.maxSegment = UInt64(max(maxSegment, Int(Self.firstSegment)))
    self.maxAhead = UInt64(max(maxAhead, maxSegment))
    self.maxStreams = max(maxStreams, Self.initialStreams)
    let warranted = size / UInt64(max(streamBytes, 1))
    wideStreams = Int(min(UInt64(self.maxStreams), max(UInt64(Self.initialStreams), warranted)))
  }

  /// One more sequential read.
  mutating func continued() { streak += 1 }

  /// The reader left the sequence: segments start small again.
  mutating func restarted() { streak = 0 }

  /// The reader waits for segment `id`, still on its way, while the next
  /// segment requested will be `nextID`: with full-size segments the window
  /// is short of the bandwidth-delay product, so the streams double. (While
  /// segments still grow with the streak, it is short because the reader is new.)
  mutating func waited(for id: Int, nextID: Int) {
    guard id > grownAfter, streams < maxStreams, rampDone else { return }
    streams = min(streams * 2, maxStreams)
    grownAfter = nextID - 1
  }

  /// A reader sequential for a second read gets the streams its file's
  /// size warrants at once, rather than growing them one wait at a time.
  mutating func widen() {
    if streak >= 1, streams < wideStreams { streams = wideStreams }
  }

  /// Doubles with the streak up to `maxSegment`, and is small enough for
  /// `streams` segments to fit in `maxAhead`.
  var segmentSize: UInt64 {
    let ramp = min(maxSegment, Self.firstSegment << UInt64(min(streak, 16)))
    return min(ramp, max(Self.firstSegment, maxAhead / UInt64(streams)))
  }

  /// How far ahead of the reader segments may reach.
  var reach: UInt64 { min(maxAhead, segmentSize * UInt64(streams)) }

  private var rampDone: Bool {
    Self.firstSegment << UInt64(min(streak, 16)) >= maxSegment
  }
}

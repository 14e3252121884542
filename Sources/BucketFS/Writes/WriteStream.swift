import ObjectStore

/// A file written in order from its first byte, whose full parts go up while
/// it is written and then leave the stage (docs/SEMANTICS.md#writes-streaming).
/// It lives in its ``StagedFile``'s state; only ``WriteStreams`` changes it.
struct WriteStream: Sendable {
  struct Part: Sendable {
    let range: Range<Int64>
    var stored: StoredPart?
    /// The upload under way; awaited before the parts are composed or dropped.
    var task: Task<Void, Never>?
    /// Parts of the file this one is made of (more than 1: combined).
    var components = 1
  }

  /// The service composes at most this many sources in one request.
  static let composeLimit = 32

  /// Tells this stream's part uploads from those of a stream the file had before.
  let id: UInt64
  let upload: any PartedUpload
  let plan: PartPlan
  /// Bytes of the stage that may be on disk at once (the rest wait).
  let bound: Int64
  /// Bytes [0, committed) are the object's base generation, composed by a
  /// commit (fsync, a close of one of several descriptors): its first source.
  var committed: Int64 = 0
  /// That generation's components (the service allows 1024).
  var committedComponents = 0
  /// The parts after `committed`, in order and contiguous.
  var parts: [Part] = []
  /// Where the next part begins.
  var end: Int64 = 0
  /// Parts started in this stream, which sets the next one's size.
  var started = 0
  /// Bytes punched out of the stage.
  var gone: Int64 = 0
  /// A part failed (after the client's retries): the stream ends at the next write or commit.
  var failed = false
  /// The compose of stored parts into one, under way.
  var combining: Task<Void, Never>?
  /// Counts the combines a commit went ahead without: one that ends under
  /// an older count drops its result, since its pieces may be in that
  /// commit's compose (or already deleted).
  var combineRound = 0
  /// A commit's compose is under way: no combine starts, since the parts
  /// are its sources (a combine ends by deleting the parts it took).
  var composing = false

  /// The components of the parts so far.
  var components: Int { parts.reduce(0) { $0 + $1.components } }

  /// The sources a compose now would take: the committed generation, each
  /// part, and the bytes after them as one more.
  var sourcesAtClose: Int { (committed > 0 ? 1 : 0) + parts.count + 1 }

  /// The size of the next part: the plan's, doubling every 128 parts (the
  /// service composes at most 1024 components), at most half the bound.
  var nextPartSize: Int64 {
    let grown = plan.partSize << Int64(min(started / 128, 20))
    return min(grown, max(plan.partSize, bound / 2))
  }

  var inFlight: Int { parts.count(where: { $0.stored == nil }) }

  /// Where the first part not stored yet starts; the stream's end when
  /// every part launched is stored.
  var unstoredStart: Int64 { parts.first(where: { $0.stored == nil })?.range.lowerBound ?? end }

  /// Whether `range` overlaps bytes that may have left the stage.
  func gone(_ range: Range<Int64>) -> Bool {
    range.lowerBound < committed || parts.contains { $0.stored != nil && $0.range.overlaps(range) }
  }
}

/// Stored parts combined into one while the file is written, only as far as
/// needed for the close to compose every source in one request
/// (docs/SEMANTICS.md#writes-streaming).
extension WriteStream {
  /// Parts a stream may still add before its close, counted when deciding
  /// to combine: a round of uploads, at most 8 (64 MiB of 8 MiB parts).
  /// The parts in flight are counted in ``sourcesAtClose`` already; a full
  /// round of 16 on top would combine a 128 MiB file, whose close fits one
  /// compose.
  static let combineLookahead = 8

  /// Whether the compose at close could take more sources than one
  /// request takes, with a round of uploads (at most ``combineLookahead``
  /// parts) still to come: from 24 parts on (192 MiB in 8 MiB parts).
  var needsCombining: Bool {
    sourcesAtClose + min(plan.parallel, Self.combineLookahead) > Self.composeLimit
  }

  /// The parts to combine next: the stored ones in a row after those
  /// combined before (so each byte is combined once), else from the first
  /// (a stream so long that its combined parts alone crowd the compose);
  /// at least 2, at most one compose's worth.
  var combinable: Range<Int>? {
    let combined = parts.prefix { $0.components > 1 }.count
    for start in [combined, 0] {
      let run = parts[start...].prefix { $0.stored != nil }.prefix(Self.composeLimit).count
      if run >= 2 { return start..<start + run }
    }
    return nil
  }
}

/// The stream's transitions, which its ``StagedFile`` applies under its
/// lock for ``WriteStreams``: each step's rule is here, in one place.
extension WriteStream {
  /// What a writer that needs room for more bytes does.
  enum Room {
    /// The stage may take them (or nothing can leave it).
    case enough
    /// A part failed: the stream ends, its bytes come back.
    case failed
    /// The oldest part upload under way frees room when it ends.
    case waitFor(Task<Void, Never>)
  }

  /// What a commit finds: the stream it composes, or a combine to wait for.
  enum ComposeClaim {
    case noStream
    /// Marked composing (a failed one is not: the caller falls back); the
    /// combine it went ahead without, if any, whose result will be dropped.
    case claimed(WriteStream, droppedCombine: Task<Void, Never>?)
    /// The compose could not take the pieces of the combine under way.
    case waitFor(Task<Void, Never>)
  }

  /// Starts the uploads of the parts now complete in a file of `size`
  /// bytes, as many as the plan runs at once; `start` makes each one's task.
  mutating func launch(
    upTo size: Int64, _ start: (Range<Int64>, UInt64, any PartedUpload) -> Task<Void, Never>
  ) {
    guard !failed else { return }
    while inFlight < plan.parallel, committedComponents + components + 2 < 1024 {
      let range = end..<(end + nextPartSize)
      guard range.upperBound <= size else { break }
      var part = Part(range: range)
      part.task = start(range, id, upload)
      parts.append(part)
      end = range.upperBound
      started += 1
    }
  }

  /// The part of bytes `range` is stored as `stored`; false when the stream
  /// no longer has it.
  /// The part of `range` could not be stored: its upload is over (an
  /// ending stream waits for it no more), and the stream ends at the next
  /// write or commit.
  mutating func partFailed(at range: Range<Int64>) {
    failed = true
    if let index = parts.firstIndex(where: { $0.range == range }) { parts[index].task = nil }
  }

  mutating func store(_ stored: StoredPart, at range: Range<Int64>) -> Bool {
    guard let index = parts.firstIndex(where: { $0.range == range }) else { return false }
    parts[index].stored = stored
    return true
  }

  /// Whether a writer of `count` more bytes to a file of `size` may go on.
  func room(for count: Int64, size: Int64) -> Room {
    if failed { return .failed }
    if size - gone + count <= bound { return .enough }
    guard let task = parts.first(where: { $0.stored == nil })?.task else { return .enough }
    return .waitFor(task)
  }

  /// Starts a combine when the close would otherwise compose too many
  /// sources; `start` makes its task from the pieces, their bytes, the
  /// round and the upload.
  mutating func startCombine(
    _ start: ([StoredPart], Range<Int64>, Int, any PartedUpload) -> Task<Void, Never>
  ) {
    guard combining == nil, !failed, !composing, needsCombining, let run = combinable else { return }
    let pieces = parts[run].compactMap(\.stored)
    let range = parts[run.lowerBound].range.lowerBound..<parts[run.upperBound - 1].range.upperBound
    combining = start(pieces, range, combineRound, upload)
  }

  /// A combine of round `round` made `combined` of `count` parts covering
  /// `range`: it takes their place, unless a commit went ahead without it
  /// (false: the caller deletes `combined`, else the pieces).
  mutating func replace(count: Int, range: Range<Int64>, with combined: StoredPart, round: Int) -> Bool {
    guard combineRound == round else { return false }
    combining = nil
    guard let first = parts.firstIndex(where: { $0.range.lowerBound == range.lowerBound }),
      first + count <= parts.count, parts[first + count - 1].range.upperBound == range.upperBound
    else { return false }
    let replaced = first..<first + count
    var part = Part(range: range)
    part.stored = combined
    part.components = parts[replaced].reduce(0) { $0 + $1.components }
    parts.replaceSubrange(replaced, with: [part])
    return true
  }

  /// A combine of round `round` failed: the close composes its pieces.
  mutating func combineFailed(round: Int) {
    if combineRound == round { combining = nil }
  }

  /// Marks the stream composing for a commit of a file of `size` bytes,
  /// once no combine under way holds pieces the compose cannot do without.
  /// The bytes after the parts are a source only if there are any (a file
  /// of exactly 32 parts composes them without waiting).
  mutating func claimForCompose(size: Int64) -> ComposeClaim {
    if failed { return .claimed(self, droppedCombine: nil) }
    let dropped = combining
    let sources = sourcesAtClose - (end < size ? 0 : 1)
    if let dropped, sources > Self.composeLimit { return .waitFor(dropped) }
    if dropped != nil {
      combining = nil
      combineRound += 1
    }
    composing = true
    return .claimed(self, droppedCombine: dropped)
  }

  /// A commit of `claimed` (this stream as it was claimed) composed the
  /// object of `size` bytes: the stream goes on from it, with no parts.
  mutating func composed(size: Int64, claimed: WriteStream) {
    committed = size
    committedComponents = claimed.committedComponents + claimed.components + (claimed.end < size ? 1 : 0)
    parts = []
    end = size
    composing = false
  }

  /// The tasks an ending stream awaits: part uploads under way, and with
  /// `combines` the combine too.
  func pending(combines: Bool) -> [Task<Void, Never>] {
    let uploads = parts.compactMap { $0.stored == nil ? $0.task : nil }
    return uploads + (combines ? combining.map { [$0] } ?? [] : [])
  }
}

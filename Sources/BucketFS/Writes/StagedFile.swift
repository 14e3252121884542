import FUSE
import ObjectStore
import Synchronization

/// One inode being written: its stage, the properties its upload will carry
/// and the precondition it uploads with. Every handle of the inode shares it,
/// so each sees the others' writes and stat shows the staged size.
///
/// Its state is its own: the components tell it what happened (a write, an
/// upload's start and end, a release, an unlink, a rename) and ask what
/// follows. When its stage may go and what a poisoned file refuses are
/// decided here and in StagedFile+State.swift alone; no other file takes
/// its lock, and nothing is called under it but the creation of a task.
final class StagedFile: Sendable {
  let inode: UInt64
  let stage: Stage
  private let state: Mutex<State>
  /// Orders the work on the stage's bytes and sidecar (writes, resizes,
  /// downloads into it, uploads from it), none of which holds `state`.
  private let gate = AsyncGate()

  /// A file created through the mount: empty, new to the bucket, one writer.
  init(
    created inode: UInt64, stage: Stage, key: String, attributes: ObjectAttributes, inferred: Set<XattrName>
  ) {
    self.inode = inode
    self.stage = stage
    self.state = Mutex(
      State(
        key: key, baseGeneration: 0, base: nil, attributes: attributes, inferred: inferred, size: 0,
        loaded: true, dirty: true, modified: .wholeSecondsNow(), sequential: true))
  }

  /// `base` opened for writing by one writer; `truncate` empties it, which
  /// is a change (it moves the mtime, as a write does) when it had bytes.
  init(
    opened inode: UInt64, stage: Stage, key: String, base: ObjectMetadata, inferred: Set<XattrName>,
    truncate: Bool
  ) {
    self.inode = inode
    self.stage = stage
    let emptied = truncate || base.size == 0
    let truncated = truncate && base.size > 0
    self.state = Mutex(
      State(
        key: key, baseGeneration: base.generation, base: base, attributes: ObjectAttributes(of: base),
        inferred: inferred, size: emptied ? 0 : UInt64(base.size), loaded: emptied, dirty: truncated,
        modified: truncated
          ? .wholeSecondsNow() : FileFacts(base).modified ?? RFC3339.parse(base.timeCreated),
        sequential: emptied, sums: emptied ? AppendSums() : .unknown))
  }

  /// Runs `body` as the only work on the stage's bytes and sidecar.
  func exclusively<T: Sendable>(_ body: () async throws -> T) async throws -> T {
    try await gate.run(body)
  }

  /// Tasks waiting to run on the stage's bytes.
  var waitingForStage: Int { gate.waiting }

  var record: StageRecord { state.withLock { $0.record(uploaded: $0.recordUploaded) } }
  var key: String { state.withLock { $0.key } }
  var size: UInt64 { state.withLock { $0.size } }

  /// Whether the stage holds the file's bytes (until then they are the
  /// opened generation's).
  var holdsBytes: Bool { state.withLock { $0.loaded } }

  /// Its name was unlinked: it is no longer a name a lookup finds.
  var isUnlinked: Bool { state.withLock { $0.unlinked } }

  /// Whether a new open may share it: not unlinked, and a writer still open.
  var isShareable: Bool { state.withLock { !$0.unlinked && $0.writers > 0 } }

  /// Its key while it is a file in flight: created through the mount, not
  /// stored yet, not unlinked.
  var inFlightKey: String? { state.withLock { $0.baseGeneration == 0 && !$0.unlinked ? $0.key : nil } }

  /// The generation reads of a write handle come from while the stage does
  /// not hold the bytes; nil once it does.
  var unloadedBase: ObjectMetadata? { state.withLock { $0.loaded ? nil : $0.base } }

  /// What stat shows of the file: its staged size and mtime, and the mode
  /// and owner its upload will store (nil when it only reads).
  var view: (size: UInt64, modified: Timestamp?, posix: StoredPosix?) {
    state.withLock { s in
      (s.size, s.modified, s.dirty || s.base == nil ? StoredPosix(s.attributes.custom) : nil)
    }
  }

  // MARK: - Handles

  /// One more writer; false once the last one closed (then the caller
  /// stages the file anew): no writer is ever added to a released stage.
  func admitWriter() -> Bool {
    state.withLock { s in
      guard s.writers > 0 else { return false }
      s.writers += 1
      return true
    }
  }

  /// A writer closed: `last` when it was the last, and then what becomes of
  /// the stage, unless an upload under way decides when it ends.
  func dismissWriter() -> (last: Bool, settlement: StageSettlement?) {
    state.withLock { $0.dismissWriter() }
  }

  /// A read-only open: the stage's bytes once it holds them (the handle
  /// counts as a reader, so the stage outlives the writers' close for it),
  /// the opened generation's until then; nil once the last writer closed.
  func admitReader() -> ReadSource? {
    state.withLock { s in
      guard s.writers > 0 else { return nil }
      guard s.loaded else { return s.base.map(ReadSource.base) }
      s.readers += 1
      return .stage
    }
  }

  /// A reader closed: true when it was the last and the writers left the
  /// stage to it to remove.
  func dismissReader() -> Bool {
    state.withLock { s in
      s.readers -= 1
      return s.readers == 0 && s.removeWhenUnread
    }
  }

  // MARK: - Writing (under the gate)

  /// The key a write goes to; throws what a poisoned file refuses with.
  func keyForWriting() throws(Errno) -> String {
    try state.withLock { s throws(Errno) in
      if let poisoned = s.poisoned { throw poisoned }
      return s.key
    }
  }

  /// As ``keyForWriting()``, and whether a write of `count` bytes at
  /// `offset` needs none of the bytes not yet in the stage.
  func prepareWrite(offset: UInt64, count: Int) throws(Errno) -> (key: String, covered: Bool) {
    try state.withLock { s throws(Errno) in
      if let poisoned = s.poisoned { throw poisoned }
      return (s.key, s.covers(offset: offset, count: count))
    }
  }

  /// Whether the stage holds the bytes, and the size, before a resize;
  /// throws what a poisoned file refuses with.
  func prepareResize() throws(Errno) -> (loaded: Bool, size: UInt64) {
    try state.withLock { s throws(Errno) in
      if let poisoned = s.poisoned { throw poisoned }
      return (s.loaded, s.size)
    }
  }

  /// A local failure (the stage's disk): logged once, and every later
  /// write, fsync and close of the inode's handles fails with it.
  func poison(_ code: Int32, diagnostics: Diagnostics) -> Errno {
    let failure = diagnostics.localFailure(code, key: key)
    state.withLock { $0.poisoned = failure }
    return failure
  }

  /// Bytes up to `end` were written to the stage.
  func noteWritten(upTo end: UInt64, summed: AppendSums.Written?) {
    state.withLock { s in
      s.loaded = true
      s.size = max(s.size, end)
      s.modified = .wholeSecondsNow()
      s.sums.add(summed)
    }
  }

  /// Where a write at `offset` is summed from (``AppendSums``); nil when
  /// it is out of order.
  func sumStart(at offset: UInt64) -> AppendSums.Mark? {
    state.withLock { s in s.sums.start(at: Int64(offset)) }
  }

  /// The CRC-32C of `range`'s bytes as they were written; nil: unknown
  /// (an upload of them reads them to sum them).
  func writtenSum(of range: Range<Int64>) -> UInt32? {
    state.withLock { s in s.sums.sum(of: range) }
  }

  /// The stage was truncated or extended to `size`.
  func noteResized(to size: UInt64) {
    state.withLock { s in
      s.loaded = true
      s.size = size
      s.sequential = size == 0
      s.sums = size == 0 ? AppendSums() : .unknown
      s.modified = .wholeSecondsNow()
    }
  }

  /// The sidecar to write before the file first turns dirty (or dirty
  /// again after an upload); nil when it says so already.
  func recordBeforeDirtying() -> StageRecord? {
    state.withLock { s in !s.dirty || s.recordUploaded ? s.record(uploaded: false) : nil }
  }

  /// The sidecar says "dirty": the file is.
  func noteDirty() {
    state.withLock { s in
      s.dirty = true
      s.recordUploaded = false
    }
  }

  /// The generation whose bytes fill the stage, and the file's size; nil
  /// once the stage holds them (or the file is new).
  var bytesToLoad: (base: ObjectMetadata, size: UInt64)? {
    state.withLock { s in s.loaded ? nil : s.base.map { ($0, s.size) } }
  }

  /// The stage was filled with the base generation's first `size` bytes.
  func noteLoaded(size: UInt64) {
    state.withLock { s in
      s.loaded = true
      s.size = size
    }
  }

  // MARK: - Uploading

  /// An upload starts; ``endUpload()`` says it ended.
  func beginUpload() {
    state.withLock { $0.uploading += 1 }
  }

  /// An upload ended: the settlement of a stage released meanwhile, once
  /// the last upload under way ended.
  func endUpload() -> StageSettlement? {
    state.withLock { $0.endUpload() }
  }

  /// What an upload sends now; nil when there is nothing to store. Throws
  /// what a poisoned file refuses with.
  func uploadRequest() throws(Errno) -> UploadRequest? {
    try state.withLock { s throws(Errno) in try s.uploadRequest() }
  }

  /// An upload stored `uploaded`: returns the properties bucketfs chose.
  func noteUploaded(_ uploaded: ObjectMetadata) -> Set<XattrName> {
    state.withLock { s in
      s.noteUploaded(uploaded)
      return s.inferred
    }
  }

  /// Its upload was refused by the precondition (412): every later write,
  /// fsync and close fails with ESTALE.
  func noteRefused() {
    state.withLock { $0.poisoned = .stale }
  }

  // MARK: - Its stream (for ``WriteStreams``)

  /// Whether a write at `offset` keeps the file in order, and what then
  /// becomes of its stream.
  func streamStep(beforeWriteAt offset: UInt64) -> StreamStep {
    state.withLock { $0.streamStep(beforeWriteAt: offset) }
  }

  /// The size of a file that may start a stream now: written in order,
  /// loaded, well, and not streaming yet.
  var streamCandidateSize: Int64? {
    state.withLock { s in
      s.stream == nil && s.sequential && s.loaded && !s.unlinked && s.poisoned == nil ? Int64(s.size) : nil
    }
  }

  /// The stream, the key and the base generation, while it streams.
  var streamSnapshot: (stream: WriteStream, key: String, generation: Int64)? {
    state.withLock { s in s.stream.map { ($0, s.key, s.baseGeneration) } }
  }

  var isStreaming: Bool { state.withLock { $0.stream != nil } }

  /// Whether bytes of `range` may have left the stage.
  func streamedAway(_ range: Range<Int64>) -> Bool {
    state.withLock { $0.stream?.gone(range) ?? false }
  }

  /// The stored crc32c of the generation a stream's commit composes first.
  var baseCRC32C: UInt32? { state.withLock { $0.base?.crc32c }.flatMap { CRC32C.value(base64: $0) } }

  /// `stream` begins: returns the sidecar that says where its bytes go.
  func beginStream(_ stream: WriteStream) -> StageRecord {
    state.withLock { s in
      s.stream = stream
      return s.record(uploaded: false)
    }
  }

  /// The stream `id` ended (brought back, dropped or never begun).
  func endStream(_ id: UInt64) {
    state.withLock { s in if s.stream?.id == id { s.stream = nil } }
  }

  /// The file is not written in order any more: it never streams again
  /// until it is emptied.
  func noteOutOfOrder() {
    state.withLock { $0.sequential = false }
  }

  /// Starts the uploads of the parts now complete (``WriteStream/launch(upTo:_:)``).
  func launchParts(_ start: (Range<Int64>, UInt64, any PartedUpload) -> Task<Void, Never>) {
    state.withLock { s in
      let size = Int64(s.size)
      s.stream?.launch(upTo: size, start)
    }
  }

  /// Stream `id`'s part of bytes `range` is stored; false when the stream
  /// no longer has it.
  func notePartStored(_ part: StoredPart, at range: Range<Int64>, stream id: UInt64) -> Bool {
    state.withLock { s in
      guard s.stream?.id == id, s.stream?.store(part, at: range) == true else { return false }
      // Bytes before every part still going up are summed for good.
      if let stream = s.stream { s.sums.forget(below: stream.unstoredStart) }
      return true
    }
  }

  /// Stream `id`'s bytes of `range` were punched out of the stage.
  func notePunched(_ range: Range<Int64>, stream id: UInt64) {
    state.withLock { s in if s.stream?.id == id { s.stream?.gone += Int64(range.count) } }
  }

  /// Stream `id`'s part of `range` could not be stored: it ends at the next
  /// write or commit. Returns the key, for the log.
  func notePartFailed(at range: Range<Int64>, stream id: UInt64) -> String {
    state.withLock { s in
      if s.stream?.id == id { s.stream?.partFailed(at: range) }
      return s.key
    }
  }

  /// Whether a writer of `count` more bytes may go on; `.enough` when the
  /// file does not stream.
  func room(for count: Int64) -> WriteStream.Room {
    state.withLock { s in s.stream?.room(for: count, size: Int64(s.size)) ?? .enough }
  }

  /// Starts a combine of stream `id` if it needs one (``WriteStream/startCombine(_:)``).
  func startCombine(
    stream id: UInt64, _ start: ([StoredPart], Range<Int64>, Int, any PartedUpload) -> Task<Void, Never>
  ) {
    state.withLock { s in if s.stream?.id == id { s.stream?.startCombine(start) } }
  }

  /// A combine of stream `id` made `combined`; false when it came too late
  /// (``WriteStream/replace(count:range:with:round:)``).
  func noteCombined(
    _ combined: StoredPart, replacing count: Int, range: Range<Int64>, stream id: UInt64, round: Int
  ) -> Bool {
    state.withLock { s in
      s.stream?.id == id
        && s.stream?.replace(count: count, range: range, with: combined, round: round) == true
    }
  }

  func noteCombineFailed(stream id: UInt64, round: Int) {
    state.withLock { s in if s.stream?.id == id { s.stream?.combineFailed(round: round) } }
  }

  /// Claims the stream for a commit's compose (``WriteStream/claimForCompose()``).
  func claimStreamForCompose() -> WriteStream.ComposeClaim {
    state.withLock { s in s.stream?.claimForCompose() ?? .noStream }
  }

  /// The compose of stream `claimed` made the object of `size` bytes.
  func noteComposed(size: Int64, claimed: WriteStream) {
    state.withLock { s in
      if s.stream?.id == claimed.id { s.stream?.composed(size: size, claimed: claimed) }
    }
  }

  /// The compose of stream `id` failed; `refused` by its precondition, the
  /// file is stale and the stream gone (its parts are deleted by the caller).
  func noteComposeFailed(stream id: UInt64, refused: Bool) {
    state.withLock { s in
      if s.stream?.id == id { s.stream?.composing = false }
      if refused {
        s.poisoned = .stale
        s.stream = nil
      }
    }
  }

  /// The tasks an ending stream awaits (``WriteStream/pending(combines:)``).
  func streamTasks(combines: Bool) -> [Task<Void, Never>] {
    state.withLock { $0.stream?.pending(combines: combines) ?? [] }
  }

  // MARK: - Its pending xattrs (StagedXattrs.swift)

  /// The metadata the upload would store; nil when the file only reads.
  func pendingMetadata(bucket: String) -> ObjectMetadata? {
    state.withLock { $0.pendingMetadata(bucket: bucket) }
  }

  /// Sets or removes (nil) `property` in the pending upload of a dirty
  /// file; false when it is not dirty (or unlinked).
  func setPending(_ property: XattrName, to text: String?, flags: XattrFlags, posixAttributes: Bool) throws
    -> Bool
  {
    try state.withLock { s in
      try s.setPending(property, to: text, flags: flags, posixAttributes: posixAttributes)
    }
  }

  // MARK: - What the namespace tells it

  /// Its name was unlinked: its handles keep reading and writing their
  /// bytes, as on a local filesystem, but never upload them to the removed
  /// name, and the stage is deleted when the last one closes.
  func noteUnlinked() {
    state.withLock { $0.unlinked = true }
  }

  /// A file this mount created and never stored has no object to delete:
  /// unlinking it drops the name at once (a create-then-unlink scratch
  /// file). False, and nothing changes, when it was stored or unlinked.
  func unlinkIfNeverStored() -> Bool {
    state.withLock { s in
      guard s.baseGeneration == 0, !s.unlinked else { return false }
      s.unlinked = true
      return true
    }
  }

  /// It was renamed to `newKey`, stored as `generation`: its handles upload
  /// there from now on, replacing only that generation.
  func noteRenamed(to newKey: String, generation: Int64) {
    state.withLock { s in
      s.key = newKey
      s.baseGeneration = generation
      if var base = s.base {
        base.name = newKey
        base.generation = generation
        s.base = base
      }
    }
  }

  // MARK: - What setattr tells it

  /// Folds chmod, chown and utimens keys into a dirty file's upload (no
  /// request of their own); false when it is not dirty (or unlinked).
  func carry(_ values: [String: String?], modified: Timestamp?) -> Bool {
    state.withLock { s -> Bool in
      guard s.dirty, !s.unlinked else { return false }
      for (key, value) in values { s.attributes.custom[key] = value }
      if values[Staging.mtimeKey] != nil, let modified {
        s.modified = modified
      }
      return true
    }
  }

  /// Keys were patched onto the object: a file not dirty yet keeps them,
  /// so its later upload does not take them back; a patched mtime
  /// (`modified`, with the mtime key among them) is what stat shows.
  func notePatched(_ values: [String: String?], modified: Timestamp?) {
    state.withLock { s in
      for (key, value) in values { s.attributes.custom[key] = value }
      if values[Staging.mtimeKey] != nil, let modified {
        s.modified = modified
      }
    }
  }
}

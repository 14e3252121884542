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
/// decided here and in StagedFile+State.swift alone; no file but this and
/// StagedFile+Stream.swift (what its stream is told and asked) takes its
/// lock, and nothing is called under it but the creation of a task.
final class StagedFile: Sendable {
  let inode: UInt64
  let stage: Stage
  /// Taken only in StagedFile.swift and StagedFile+Stream.swift.
  let state: Mutex<State>
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

import FUSE
import ObjectStore
import Synchronization

/// One inode being written: its stage, the properties its upload will carry
/// and the precondition it uploads with. Every handle of the inode shares it,
/// so each sees the others' writes and stat shows the staged size.
final class StagedFile: Sendable {
  let inode: UInt64
  let stage: Stage

  struct State {
    /// The object name the bytes go to (a rename changes it).
    var key: String
    /// ifGenerationMatch of the next upload: 0 for a new object, else the
    /// generation opened (or last uploaded).
    var baseGeneration: Int64
    /// That generation's metadata, where its bytes come from when a write
    /// needs them; nil for a new object.
    var base: ObjectMetadata?
    /// What the upload stores as writable properties.
    var attributes: ObjectAttributes
    /// Properties bucketfs chose (contentType from the name, a generated
    /// download token), not the user or the replaced object.
    var inferred: Set<XattrName>
    var size: UInt64
    /// The stage holds the file's bytes; until then they are `base`'s and
    /// only writes that need none of them go to the stage without a download.
    var loaded: Bool
    var dirty = false
    /// Set by a refused upload (412) or a local failure: every later write,
    /// fsync and close of the inode's handles fails with it.
    var poisoned: Errno?
    var unlinked = false
    var handles = 0
    /// The mtime stat shows.
    var modified: Timestamp?
    /// Whether the sidecar says "uploaded", to flip it once on the next change.
    var recordUploaded = false
    /// Read-only handles reading the loaded stage: it stays until they close.
    var readers = 0
    /// Every write handle closed while readers remained: the last reader's
    /// close removes the stage.
    var removeWhenUnread = false
    /// Every byte was written in order from 0 since the file was last empty:
    /// it may stream (``WriteStream``).
    var sequential = false
    var stream: WriteStream?
    /// Uploads under way (``Uploads/commit(_:)``): a release meanwhile
    /// leaves its decision to the last of them to end.
    var uploading = 0
    var releasedWhileUploading = false

    /// What the sidecar says of the file.
    func record(uploaded: Bool) -> StageRecord {
      StageRecord(
        key: key, baseGeneration: baseGeneration, uploaded: uploaded,
        fields: Dictionary(uniqueKeysWithValues: attributes.fields.map { ($0.key.rawValue, $0.value) }),
        custom: attributes.custom, parts: stream?.upload.prefix)
    }
  }
  let state: Mutex<State>
  /// Orders the work on the stage's bytes and sidecar (writes, resizes,
  /// downloads into it, uploads from it), none of which holds `state`.
  let gate = AsyncGate()

  init(inode: UInt64, stage: Stage, state: State) {
    self.inode = inode
    self.stage = stage
    self.state = Mutex(state)
  }

  var record: StageRecord {
    state.withLock { $0.record(uploaded: $0.recordUploaded) }
  }
}

extension StagedFile {
  /// Whether the stage holds the file's bytes (until then they are the
  /// opened generation's).
  var holdsBytes: Bool { state.withLock { $0.loaded } }

  /// Its name was unlinked: it is no longer a name a lookup finds.
  var isUnlinked: Bool { state.withLock { $0.unlinked } }

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

  // MARK: - A failed upload

  /// What a failed upload of `key` (whole or streamed) throws, and leaves
  /// the file as: a refusal by the precondition is ESTALE, with the stage
  /// kept (`kept` says what of it, before its path); a local failure
  /// poisons the file; the rest is mapped and logged. A stream's own
  /// errors come already mapped and recorded.
  func uploadFailure(
    _ error: any Error, key: String, generation: Int64, kept: String, diagnostics: Diagnostics
  ) -> any Error {
    if let failure = error as? Errno { return failure }
    if let failure = error as? FileSystemError { return failure }
    if case StorageError.preconditionFailed = error {
      state.withLock { $0.poisoned = .stale }
      diagnostics.logger.error(
        "upload of \(key) refused: the object \(generation == 0 ? "appeared" : "changed since generation \(generation)") meanwhile; nothing was overwritten; \(kept) \(stage.path)"
      )
      return Errno.stale
    }
    if let local = error as? StageFailure {
      state.withLock { $0.poisoned = Errno(local.code) }
      return diagnostics.localFailure(local.code, key: key)
    }
    return diagnostics.failure(error, operation: "upload", key: key)
  }
}

import FUSE
import ObjectStore

/// Uploads of dirty staged files with their precondition, and what namespace
/// changes tell the staged files (docs/SEMANTICS.md#writes).
extension Staging {
  /// Uploads the handle's staged file if it is dirty (close, fsync).
  func commit(handle: UInt64) async throws {
    guard let staged = file(handle: handle) else { return }
    try await commit(staged)
  }

  /// Uploads the staged bytes of `inode` if they are dirty, so a rename
  /// acts on stored bytes.
  func commit(inode: UInt64) async throws {
    guard let staged = file(inode: inode) else { return }
    try await commit(staged)
  }

  /// Uploads a dirty staged file; returns once the object is stored. The
  /// upload runs in a task of its own, which the unmount waits for: an
  /// interrupted close stops waiting (EINTR) but never abandons the upload
  /// halfway (a cancelled upload whose last request reached the service
  /// would leave the mount on the old generation, and the next upload's
  /// precondition would fail as a false conflict). A release that comes
  /// meanwhile leaves the stage to the upload's end (``settleReleased(_:)``),
  /// so stored bytes are never kept as unstored ones.
  func commit(_ staged: StagedFile) async throws {
    staged.state.withLock { $0.uploading += 1 }
    let task = tasks.start(.finish) {
      defer { self.uploadEnded(staged) }
      try await self.upload(staged)
    }
    try await task.valueUnlessCancelled()
  }

  private func uploadEnded(_ staged: StagedFile) {
    let released = staged.state.withLock { s in
      s.uploading -= 1
      defer { if s.uploading == 0 { s.releasedWhileUploading = false } }
      return s.uploading == 0 && s.releasedWhileUploading
    }
    if released { settleReleased(staged) }
  }

  /// Properties of generation `generation` of `key` that bucketfs inferred
  /// or generated (a contentType from the name, a generated download token)
  /// rather than the user set: an atomic save lets the replaced file's
  /// values win over these. Remembered for the last 4096 uploads.
  func inferredProperties(of key: String, generation: Int64) -> Set<XattrName> {
    registry.withLock { $0.inferred[StagedFiles.InferredKey(key: key, generation: generation)] ?? [] }
  }

  /// Properties the moved object still has only by inference, recorded
  /// under its new name and generation, so a later atomic save treats
  /// them as a fresh temp file's (a temp file may be renamed twice).
  func carryInferred(_ properties: Set<XattrName>, to moved: ObjectMetadata) {
    registry.withLock { $0.remember(inferred: properties, key: moved.name, generation: moved.generation) }
  }

  /// The user set `property` of `key`'s generation: no longer inferred.
  func noteSet(_ property: XattrName, key: String, generation: Int64) {
    _ = registry.withLock {
      $0.inferred[StagedFiles.InferredKey(key: key, generation: generation)]?.remove(property)
    }
  }

  /// `inode` was unlinked: its handles keep reading and writing their bytes,
  /// as on a local filesystem, but never upload them to the removed name,
  /// and the stage is deleted when the last one closes.
  func unlinked(inode: UInt64) {
    file(inode: inode)?.state.withLock { $0.unlinked = true }
  }

  /// A file this mount created and has not stored yet has no object to
  /// delete: unlinking it drops the name at once, and its handles keep their
  /// bytes but never upload them (a create-then-unlink scratch file).
  /// False when `key` is not such a file.
  func unlinkNeverStored(_ key: String) -> Bool {
    guard let inode = nodes.inode(of: key), let staged = file(inode: inode),
      staged.state.withLock({ $0.baseGeneration == 0 && !$0.unlinked })
    else { return false }
    unlinked(inode: inode)
    nodes.detach(inode)
    return true
  }

  /// `inode` was renamed to `newKey`, stored as `generation`: its handles
  /// upload there from now on, replacing only that generation.
  func renamed(inode: UInt64, to newKey: String, generation: Int64) {
    guard let staged = file(inode: inode) else { return }
    staged.state.withLock { s in
      s.key = newKey
      s.baseGeneration = generation
      if var base = s.base {
        base.name = newKey
        base.generation = generation
        s.base = base
      }
    }
  }

  /// What a failed upload of `key` (whole or streamed) throws, and leaves
  /// the file as: a refusal by the precondition is ESTALE, with the stage
  /// kept (`kept` says what of it, before its path); a local failure
  /// poisons the file; the rest is mapped and logged. A stream's own
  /// errors come already mapped and recorded.
  func uploadFailure(_ error: any Error, of staged: StagedFile, key: String, generation: Int64, kept: String)
    -> any Error
  {
    if let failure = error as? Errno { return failure }
    if let failure = error as? FileSystemError { return failure }
    if case StorageError.preconditionFailed = error {
      staged.state.withLock { $0.poisoned = .stale }
      logger.error(
        "upload of \(key) refused: the object \(generation == 0 ? "appeared" : "changed since generation \(generation)") meanwhile; nothing was overwritten; \(kept) \(staged.stage.path)"
      )
      return Errno.stale
    }
    if let local = error as? StageFailure {
      staged.state.withLock { $0.poisoned = Errno(local.code) }
      return diagnostics.localFailure(local.code, key: key)
    }
    return diagnostics.failure(error, operation: "upload", key: key)
  }

  private func upload(_ staged: StagedFile) async throws {
    try await staged.gate.run {
      let snapshot = try staged.state.withLock { s -> (String, Int64, ObjectAttributes, UInt64)? in
        if let poisoned = s.poisoned { throw poisoned }
        guard s.dirty, !s.unlinked else { return nil }
        var attributes = s.attributes
        // Every upload stores the mtime stat showed while staged (whole
        // seconds, as gsutil), so stat does not change when the file is
        // stored or renamed (vim refuses to save over a changed mtime).
        if let modified = s.modified {
          attributes.custom[Self.mtimeKey] = String(modified.seconds)
        }
        return (s.key, s.baseGeneration, attributes, s.size)
      }
      guard let (key, generation, attributes, size) = snapshot else { return }
      let uploaded: ObjectMetadata
      do {
        if let streamed = try await commitStream(
          staged, key: key, generation: generation, attributes: attributes, size: size)
        {
          uploaded = streamed
        } else {
          uploaded = try await store.upload(
            key, from: StageSource(stage: staged.stage, size: Int64(size)), attributes: attributes,
            ifGenerationMatch: generation)
        }
      } catch {
        throw uploadFailure(
          error, of: staged, key: key, generation: generation, kept: "your bytes are kept in")
      }
      let inferred = staged.state.withLock { s in
        s.dirty = false
        s.recordUploaded = true
        s.base = uploaded
        s.baseGeneration = uploaded.generation
        s.attributes = ObjectAttributes(of: uploaded)
        return s.inferred
      }
      // The sidecar now says "stored": a crash from here on loses nothing.
      _ = await staged.stage.writeRecord(staged.record)
      let now = clock()
      registry.withLock { registry in
        registry.remember(inferred: inferred, key: key, generation: uploaded.generation)
        if generation == 0 { registry.remember(created: key, at: now) }
      }
      nodes.recordUpload(uploaded, inode: staged.inode, at: now)
    }
  }
}

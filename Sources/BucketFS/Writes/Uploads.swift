import FUSE
import ObjectStore

/// Uploads of dirty staged files with their precondition (docs/SEMANTICS.md#writes).
extension Staging {
  /// Uploads a dirty staged file (close, fsync; before a rename, so it acts
  /// on stored bytes); returns once the object is stored. The
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
      provenance.stored(
        key: key, generation: uploaded.generation, inferred: inferred, created: generation == 0)
      nodes.remember(uploaded: uploaded, inode: staged.inode, at: clock())
    }
  }
}

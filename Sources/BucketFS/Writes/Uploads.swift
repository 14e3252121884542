import FUSE
import Logging
import ObjectStore

/// Uploads of dirty staged files with their precondition (docs/SEMANTICS.md#writes),
/// and what becomes of a stage once its last writer closed: an upload
/// under way decides when it ends.
struct Uploads: MountComponent, Sendable {
  /// The store, settings and diagnostics; its tasks own the uploads, and
  /// the removals of released stages.
  let context: MountContext
  let streams: WriteStreams
  let nodes: NodeTable
  /// Told what an upload stored, and what of it bucketfs chose.
  let provenance: Provenance

  /// Uploads a dirty staged file (close, fsync; before a rename, so it acts
  /// on stored bytes); returns once the object is stored. The
  /// upload runs in a task of its own, which the unmount waits for: an
  /// interrupted close stops waiting (EINTR) but never abandons the upload
  /// halfway (a cancelled upload whose last request reached the service
  /// would leave the mount on the old generation, and the next upload's
  /// precondition would fail as a false conflict). A release that comes
  /// meanwhile leaves the stage to the upload's end (``released(_:)``),
  /// so stored bytes are never kept as unstored ones.
  func commit(_ staged: StagedFile) async throws {
    staged.state.withLock { $0.uploading += 1 }
    let task = tasks.start(.finish) {
      defer { self.uploadEnded(staged) }
      try await self.upload(staged)
    }
    try await task.valueUnlessCancelled()
  }

  /// The last writer of `closed` closed (``WriteHandles/releaseWriter(_:)``):
  /// the stage is settled now, or by the last upload under way when it ends.
  func released(_ closed: StagedFile) {
    let deferred = closed.state.withLock { s in
      if s.uploading > 0 { s.releasedWhileUploading = true }
      return s.uploading > 0
    }
    if !deferred { settleReleased(closed) }
  }

  /// After the last handle's release and every upload: the stage goes,
  /// unless it holds bytes that were never stored (then it stays, and the
  /// log says where) or readers remain (then the last of them removes it).
  private func settleReleased(_ closed: StagedFile) {
    let (key, dirty, unlinked, poisoned, uploadedOnce) = closed.state.withLock {
      ($0.key, $0.dirty, $0.unlinked, $0.poisoned, $0.baseGeneration != 0)
    }
    if unlinked || poisoned != nil { streams.dropStream(closed) }
    let localFault = poisoned != nil && poisoned != .stale
    if dirty && !unlinked && !localFault {
      logger.error(
        "\(key): closed with bytes that were not stored; they are kept in \(closed.stage.path) (see \(closed.stage.sidecarPath))"
      )
    } else if closed.state.withLock({ s in
      s.removeWhenUnread = s.readers > 0
      return !s.removeWhenUnread
    }) {
      // Apart from the caller: release runs on the FUSE loop thread, which never waits for the disk.
      let stage = closed.stage
      tasks.start(.finish, priority: .utility) { stage.remove() }
    }
    if !uploadedOnce {
      // Never stored: what stat knows of it must come from the bucket again.
      nodes.expire(closed.inode)
    }
  }

  private func uploadEnded(_ staged: StagedFile) {
    let released = staged.state.withLock { s in
      s.uploading -= 1
      defer { if s.uploading == 0 { s.releasedWhileUploading = false } }
      return s.uploading == 0 && s.releasedWhileUploading
    }
    if released { settleReleased(staged) }
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
          attributes.custom[Staging.mtimeKey] = String(modified.seconds)
        }
        return (s.key, s.baseGeneration, attributes, s.size)
      }
      guard let (key, generation, attributes, size) = snapshot else { return }
      let uploaded: ObjectMetadata
      do {
        if let streamed = try await streams.commitStream(
          staged, key: key, generation: generation, attributes: attributes, size: size)
        {
          uploaded = streamed
        } else {
          uploaded = try await store.upload(
            key, from: StageSource(stage: staged.stage, size: Int64(size)), attributes: attributes,
            ifGenerationMatch: generation)
        }
      } catch {
        throw staged.uploadFailure(
          error, key: key, generation: generation, kept: "your bytes are kept in", diagnostics: diagnostics)
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

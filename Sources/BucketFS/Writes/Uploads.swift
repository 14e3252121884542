import FUSE
import ObjectStore

/// flush/fsync upload a dirty staged file with its precondition; the hooks
/// namespace changes use (docs/SEMANTICS.md#writes).
extension BucketFileSystem {
  public func flush(inode: UInt64, handle: UInt64) async throws {
    guard let staged = stagedFile(handle: handle) else { return }
    try await commit(staged)
  }

  public func fsync(inode: UInt64, handle: UInt64, dataOnly: Bool) async throws {
    guard let staged = stagedFile(handle: handle) else { return }
    try await commit(staged)
  }

  /// Uploads the staged bytes of `inode` if they are dirty, so a rename
  /// acts on stored bytes.
  func commitStaged(inode: UInt64) async throws {
    guard let staged = stagedFile(inode: inode) else { return }
    try await commit(staged)
  }

  /// Properties of generation `generation` of `key` that bucketfs inferred
  /// or generated (a contentType from the name, a generated download token)
  /// rather than the user set: an atomic save lets the replaced file's
  /// values win over these. Remembered for the last 4096 uploads.
  func inferredProperties(of key: String, generation: Int64) -> Set<XattrName> {
    writes.withLock { $0.inferred[StagedFiles.InferredKey(key: key, generation: generation)] ?? [] }
  }

  /// `inode` was unlinked: its handles keep reading and writing their bytes,
  /// as on a local filesystem, but never upload them to the removed name,
  /// and the stage is deleted when the last one closes.
  func stagedFileUnlinked(inode: UInt64) {
    stagedFile(inode: inode)?.state.withLock { $0.unlinked = true }
  }

  /// `inode` was renamed to `newKey`, stored as `generation`: its handles
  /// upload there from now on, replacing only that generation.
  func stagedFileRenamed(inode: UInt64, to newKey: String, generation: Int64) {
    guard let staged = stagedFile(inode: inode) else { return }
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

  /// Uploads a dirty staged file; returns once the object is stored. The
  /// upload runs in its own task: an interrupted close does not abandon it
  /// halfway, and the next close finds it done or reports why not.
  func commit(_ staged: StagedFile) async throws {
    let task = Task { try await self.upload(staged) }
    try await task.value
  }

  private func upload(_ staged: StagedFile) async throws {
    try await staged.gate.run {
      let snapshot = try staged.state.withLock { s -> (String, Int64, ObjectAttributes, UInt64)? in
        if let poisoned = s.poisoned { throw poisoned }
        guard s.dirty, !s.unlinked else { return nil }
        s.busy = true
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
      defer { staged.state.withLock { $0.busy = false } }
      let uploaded: ObjectMetadata
      do {
        uploaded = try await store.upload(
          key, from: StageSource(stage: staged.stage, size: Int64(size)), attributes: attributes,
          ifGenerationMatch: generation)
      } catch StorageError.preconditionFailed {
        staged.state.withLock { $0.poisoned = .stale }
        logger.error(
          "upload of \(key) refused: the object \(generation == 0 ? "appeared" : "changed since generation \(generation)") meanwhile; nothing was overwritten, your bytes are kept in \(staged.stage.path)"
        )
        throw Errno.stale
      } catch let local as StageFailure {
        staged.state.withLock { $0.poisoned = Errno(local.code) }
        throw localFailure(local.code, key: key)
      } catch {
        throw failure(error, operation: "upload", key: key)
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
      _ = staged.stage.writeRecord(staged.record)
      let now = clock()
      writes.withLock { writes in
        writes.remember(inferred: inferred, key: key, generation: uploaded.generation)
        if generation == 0 { writes.remember(created: key, at: now) }
      }
      state.withLock { state in
        state.inodes.refresh(uploaded, at: now)
        if state.inodes.inode(of: key) == staged.inode {
          state.inodes[staged.inode]?.openedGeneration = uploaded.generation
        }
      }
    }
  }
}

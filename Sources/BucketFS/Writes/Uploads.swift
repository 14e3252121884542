import FUSE
import ObjectStore

/// Uploads of dirty staged files with their precondition (docs/SEMANTICS.md#writes).
extension Staging {
  /// Uploads a dirty staged file (close, fsync; before a rename, so it acts
  /// on stored bytes); returns once the object is stored. The
  /// upload runs in its own task: an interrupted close does not abandon it
  /// halfway, and the next close finds it done or reports why not. The wait
  /// ignores cancellation on purpose: a cancelled upload whose last request
  /// reached the service would leave the mount on the old generation (the
  /// next upload's precondition would then fail as a false conflict), and a
  /// close answered before its upload ended would let release find the file
  /// dirty and keep its stage as unstored bytes.
  func commit(_ staged: StagedFile) async throws {
    let task = Task { try await self.upload(staged) }
    try await task.value
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
      } catch let failure as Errno {
        // The stream's own: already logged and recorded.
        throw failure
      } catch let failure as FileSystemError {
        throw failure
      } catch StorageError.preconditionFailed {
        staged.state.withLock { $0.poisoned = .stale }
        logger.error(
          "upload of \(key) refused: the object \(generation == 0 ? "appeared" : "changed since generation \(generation)") meanwhile; nothing was overwritten, your bytes are kept in \(staged.stage.path)"
        )
        throw Errno.stale
      } catch let local as StageFailure {
        staged.state.withLock { $0.poisoned = Errno(local.code) }
        throw diagnostics.localFailure(local.code, key: key)
      } catch {
        throw diagnostics.failure(error, operation: "upload", key: key)
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
      provenance.stored(
        key: key, generation: uploaded.generation, inferred: inferred, created: generation == 0)
      let now = clock()
      nodes.withLock { table in
        table.refresh(uploaded, at: now)
        if table.inode(of: key) == staged.inode {
          table[staged.inode]?.openedGeneration = uploaded.generation
        }
      }
    }
  }
}

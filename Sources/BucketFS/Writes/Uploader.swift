import FUSE
import Logging
import ObjectStore

/// Uploads of dirty staged files with their precondition (docs/SEMANTICS.md#writes),
/// and what becomes of a stage once its last writer closed: an upload
/// under way decides when it ends.
struct Uploader: MountComponent, Sendable {
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
  /// meanwhile leaves the stage to the upload's end (``settle(_:_:)``),
  /// so stored bytes are never kept as unstored ones.
  func commit(_ staged: StagedFile) async throws {
    staged.beginUpload()
    let task = tasks.start(.finish) {
      defer { if let settlement = staged.endUpload() { self.settle(staged, settlement) } }
      try await self.upload(staged)
    }
    try await task.valueUnlessCancelled()
  }

  /// Does what the file decided of its stage once its last writer closed
  /// and no upload is under way (``StagedFile/StageSettlement``): its
  /// stream's parts deleted, the stage removed apart from the caller (or
  /// kept, with its path in the log), a never-stored inode expired.
  func settle(_ closed: StagedFile, _ settlement: StagedFile.StageSettlement) {
    if settlement.dropsStream { streams.dropStream(closed) }
    switch settlement.stage {
    case .keptUnstored:
      logger.error(
        "\(settlement.key): closed with bytes that were not stored; they are kept in \(closed.stage.path) (see \(closed.stage.sidecarPath))"
      )
    case .removed:
      // Apart from the caller: release runs on the FUSE loop thread, which never waits for the disk.
      let stage = closed.stage
      tasks.start(.finish, priority: .utility) { stage.remove() }
    case .leftToReaders:
      break
    }
    if settlement.neverStored {
      // Never stored: what stat knows of it must come from the bucket again.
      nodes.expire(closed.inode)
    }
  }

  private func upload(_ staged: StagedFile) async throws {
    try await staged.exclusively {
      guard let request = try staged.uploadRequest() else { return }
      let (key, generation) = (request.key, request.generation)
      let uploaded: ObjectMetadata
      do {
        if let streamed = try await streams.commitStream(
          staged, key: key, generation: generation, attributes: request.attributes, size: request.size)
        {
          uploaded = streamed
        } else {
          uploaded = try await store.upload(
            key,
            from: StageSource(
              stage: staged.stage, size: Int64(request.size),
              crc32c: staged.writtenSum(of: 0..<Int64(request.size))),
            attributes: request.attributes,
            ifGenerationMatch: generation)
        }
      } catch {
        throw staged.uploadFailure(
          error, key: key, generation: generation, kept: "your bytes are kept in", diagnostics: diagnostics)
      }
      let inferred = staged.noteUploaded(uploaded)
      // The sidecar now says "stored": a crash from here on loses nothing.
      _ = await staged.stage.writeRecord(staged.record)
      provenance.stored(
        key: key, generation: uploaded.generation, inferred: inferred, created: generation == 0)
      nodes.remember(uploaded: uploaded, inode: staged.inode, at: clock())
    }
  }
}

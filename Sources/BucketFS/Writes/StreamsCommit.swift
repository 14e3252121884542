import FUSE
import ObjectStore

/// A stream made the object: what its close (or fsync) composes, under the
/// upload's precondition (docs/SEMANTICS.md#writes-streaming).
extension Staging {
  // MARK: - Committing a stream (under the gate)

  /// Makes the object from the stream: the committed generation, the parts,
  /// and the bytes after them as one last part, in one compose under the
  /// upload's precondition. Nil when the stream failed and was brought back
  /// (the caller uploads the stage as usual). On success every part is
  /// deleted and the stream goes on from the object.
  func commitStream(
    _ staged: StagedFile, key: String, generation: Int64, attributes: ObjectAttributes, size: UInt64
  ) async throws -> ObjectMetadata? {
    guard let stream = await streamToCompose(staged) else { return nil }
    if stream.failed {
      try await fallBack(staged)
      return nil
    }
    var sources: [StoredPart] = []
    if stream.committed > 0 {
      let crc = staged.state.withLock { $0.base?.crc32c }.flatMap { CRC32C.value(base64: $0) }
      sources.append(StoredPart(name: key, generation: generation, size: stream.committed, crc32c: crc))
    }
    sources += stream.parts.compactMap(\.stored)
    let uploaded: ObjectMetadata
    do {
      if stream.end < Int64(size) {
        sources.append(
          try await stream.upload.store(
            StageSource(stage: staged.stage, range: stream.end..<Int64(size))))
      }
      uploaded = try await stream.upload.compose(
        sources, into: key, attributes: attributes, ifGenerationMatch: generation)
    } catch {
      staged.state.withLock { s in if s.stream?.id == stream.id { s.stream?.composing = false } }
      if case StorageError.preconditionFailed = error {
        // Nothing overwritten, nothing left behind: the parts go before the close returns.
        staged.state.withLock { s in
          s.poisoned = .stale
          s.stream = nil
        }
        await stream.upload.removeParts(all: true)
      }
      throw uploadFailure(
        error, of: staged, key: key, generation: generation,
        kept: "its streamed parts are deleted, the bytes not yet sent are kept in")
    }
    // The object holds their bytes: the close need not wait for the deletes.
    let upload = stream.upload
    inBackground { await upload.removeParts(all: false) }
    staged.state.withLock { s in
      guard s.stream?.id == stream.id else { return }
      s.stream?.committed = Int64(size)
      s.stream?.committedComponents =
        stream.committedComponents + stream.components + (stream.end < Int64(size) ? 1 : 0)
      s.stream?.parts = []
      s.stream?.end = Int64(size)
      s.stream?.composing = false
    }
    return uploaded
  }

  /// The stream once every part upload under way is stored, marked
  /// composing (no combine starts until the commit ends). A combine under
  /// way is waited for only when the compose could not take its pieces
  /// instead; otherwise the compose goes ahead without it, and its result,
  /// dropped when it comes, is deleted in the background.
  private func streamToCompose(_ staged: StagedFile) async -> WriteStream? {
    while true {
      await settleParts(staged, combines: false)
      let (stream, wait, letGo) = staged.state.withLock {
        s -> (WriteStream?, Task<Void, Never>?, Task<Void, Never>?) in
        guard var stream = s.stream else { return (nil, nil, nil) }
        if stream.failed { return (stream, nil, nil) }
        let combining = stream.combining
        if let combining, stream.sourcesAtClose > WriteStream.composeLimit { return (nil, combining, nil) }
        if combining != nil {
          stream.combining = nil
          stream.combineRound += 1
        }
        stream.composing = true
        s.stream = stream
        return (stream, nil, combining)
      }
      if let wait {
        await wait.value
        continue
      }
      // An unmount waits for it, so its result is deleted before the mount goes.
      if let letGo { inBackground { await letGo.value } }
      return stream
    }
  }
}

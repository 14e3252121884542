import FUSE
import NIOCore
import ObjectStore

/// A stream made the object: what its close (or fsync) composes, under the
/// upload's precondition. Or it ended before its compose: its bytes brought
/// back into the stage (a write behind it, a read of an uploaded part, a
/// failed part) or dropped, and the deletes of parts no longer needed,
/// apart from the caller (docs/SEMANTICS.md#writes-streaming).
extension WriteStreams {
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
      throw staged.uploadFailure(
        error, key: key, generation: generation,
        kept: "its streamed parts are deleted, the bytes not yet sent are kept in", diagnostics: diagnostics)
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

  // MARK: - Ending a stream (under the gate)

  /// The file is not written in order any more (or a part failed): its
  /// stream's bytes come back into the stage, and it stays staged whole.
  func fallBack(_ staged: StagedFile) async throws {
    try await endStream(staged, bringBack: true)
    staged.state.withLock { $0.sequential = false }
  }

  /// Ends the file's stream once its part uploads are done: with
  /// `bringBack`, every byte that left the stage is read back into it (from
  /// the parts and the committed generation), so it is an ordinary staged
  /// file again; without, the bytes are dropped (a truncation to 0, an
  /// unlinked file). The parts are deleted apart from the caller.
  func endStream(_ staged: StagedFile, bringBack: Bool) async throws {
    await settleParts(staged, combines: true)
    guard let snapshot = staged.state.withLock({ s in s.stream.map { ($0, s.key, s.baseGeneration) } }) else {
      return
    }
    let (stream, key, generation) = snapshot
    if bringBack {
      var pieces: [(StoredPart, Int64)] = []
      if stream.committed > 0 {
        pieces.append((StoredPart(name: key, generation: generation, size: stream.committed, crc32c: nil), 0))
      }
      for part in stream.parts {
        if let stored = part.stored { pieces.append((stored, part.range.lowerBound)) }
      }
      for (piece, start) in pieces {
        try await copyBack(piece, to: start, of: staged, via: stream.upload, key: key)
      }
      staged.stage.refilled()
      logger.info("\(key): not written in order any more; its streamed bytes are staged again")
    }
    staged.state.withLock { s in if s.stream?.id == stream.id { s.stream = nil } }
    let upload = stream.upload
    inBackground { await upload.removeParts(all: true) }
  }

  /// Awaits every part upload under way, and with `combines` every combine
  /// (a stored part may start one) too.
  private func settleParts(_ staged: StagedFile, combines: Bool) async {
    while true {
      let tasks = staged.state.withLock { s -> [Task<Void, Never>] in
        guard let stream = s.stream else { return [] }
        let uploads = stream.parts.compactMap { $0.stored == nil ? $0.task : nil }
        return uploads + (combines ? stream.combining.map { [$0] } ?? [] : [])
      }
      if tasks.isEmpty { return }
      for task in tasks { await task.value }
    }
  }

  private func copyBack(
    _ piece: StoredPart, to start: Int64, of staged: StagedFile, via upload: any PartedUpload, key: String
  ) async throws {
    let chunk: Int64 = 8 << 20
    var at: Int64 = 0
    while at < piece.size {
      let range = at..<min(at + chunk, piece.size)
      let bytes: ByteBuffer
      do {
        bytes = try await upload.read(piece, range: range)
      } catch {
        throw diagnostics.failure(error, operation: "read back streamed bytes", key: key, context: .read)
      }
      guard bytes.readableBytes == range.count else {
        throw diagnostics.failure(
          StorageError.invalidResponse("short read of \(piece.name)"), operation: "read back streamed bytes",
          key: key,
          context: .read)
      }
      let code = await staged.stage.write(bytes, at: UInt64(start + at))
      if code != 0 {
        staged.state.withLock { $0.poisoned = Errno(code) }
        throw diagnostics.localFailure(code, key: key)
      }
      at = range.upperBound
    }
  }

  // MARK: - Reads and release

  /// Reads of a streaming file's bytes that left the stage bring them back first.
  func bringBackIfGone(_ staged: StagedFile, _ range: Range<Int64>) async throws -> Bool {
    guard staged.state.withLock({ $0.stream?.gone(range) ?? false }) else { return false }
    try await staged.gate.run {
      if staged.state.withLock({ $0.stream != nil }) { try await fallBack(staged) }
    }
    return true
  }

  /// The last handle closed on a stream that will never be composed (the
  /// file unlinked or failed): its parts are deleted once its uploads end.
  func dropStream(_ staged: StagedFile) {
    guard let upload = staged.state.withLock({ $0.stream?.upload }) else { return }
    inBackground {
      await self.settleParts(staged, combines: true)
      staged.state.withLock { $0.stream = nil }
      await upload.removeParts(all: true)
    }
  }

  // MARK: - Background work

  /// Runs `body` apart from the caller (the deletes of parts no longer
  /// needed); an unmount waits for what is under way.
  private func inBackground(_ body: @escaping @Sendable () async -> Void) {
    tasks.start(.finish, priority: .utility, body)
  }
}

import FUSE
import NIOCore
import ObjectStore

#if canImport(Glibc)
  import Glibc
#endif

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
    guard let stream = await streamToCompose(staged, size: Int64(size)) else { return nil }
    if stream.failed {
      try await fallBack(staged)
      return nil
    }
    var sources: [StoredPart] = []
    if stream.committed > 0 {
      sources.append(
        StoredPart(name: key, generation: generation, size: stream.committed, crc32c: staged.baseCRC32C))
    }
    sources += stream.parts.compactMap(\.stored)
    let uploaded: ObjectMetadata
    do {
      if stream.end < Int64(size) {
        sources.append(
          try await stream.upload.store(
            StageSource(
              stage: staged.stage, range: stream.end..<Int64(size),
              crc32c: staged.writtenSum(of: stream.end..<Int64(size)))))
      }
      // A part whose bounds miss the sums' marks (after a commit at an odd
      // offset) was summed from the stage: the bytes as written decide.
      if let written = staged.writtenSum(of: 0..<Int64(size)),
        let held = CRC32C.concatenated(sources.map { ($0.crc32c, $0.size) }),
        held != written
      {
        throw StageFailure(code: EIO)
      }
      uploaded = try await stream.upload.compose(
        sources, into: key, attributes: attributes, ifGenerationMatch: generation)
    } catch {
      let refused: Bool
      if case StorageError.preconditionFailed = error { refused = true } else { refused = false }
      staged.noteComposeFailed(stream: stream.id, refused: refused)
      // Nothing overwritten, nothing left behind: the parts go before the close returns.
      if refused { await stream.upload.removeParts(all: true) }
      throw staged.uploadFailure(
        error, key: key, generation: generation,
        kept: "its streamed parts are deleted, the bytes not yet sent are kept in", diagnostics: diagnostics)
    }
    // The object holds their bytes: the close need not wait for the deletes.
    let upload = stream.upload
    inBackground { await upload.removeParts(all: false) }
    staged.noteComposed(size: Int64(size), claimed: stream)
    return uploaded
  }

  /// The stream once every part upload under way is stored, marked
  /// composing (no combine starts until the commit ends). A combine under
  /// way is waited for only when the compose could not take its pieces
  /// instead; otherwise the compose goes ahead without it, and its result,
  /// dropped when it comes, is deleted in the background.
  private func streamToCompose(_ staged: StagedFile, size: Int64) async -> WriteStream? {
    while true {
      await settleParts(staged, combines: false)
      switch staged.claimStreamForCompose(size: size) {
      case .noStream: return nil
      case .waitFor(let combine): await combine.value
      case .claimed(let stream, let dropped):
        // An unmount waits for it, so its result is deleted before the mount goes.
        if let dropped { inBackground { await dropped.value } }
        return stream
      }
    }
  }

  // MARK: - Ending a stream (under the gate)

  /// The file is not written in order any more (or a part failed): its
  /// stream's bytes come back into the stage, and it stays staged whole.
  func fallBack(_ staged: StagedFile) async throws {
    try await endStream(staged, bringBack: true)
    staged.noteOutOfOrder()
  }

  /// Ends the file's stream once its part uploads are done: with
  /// `bringBack`, every byte that left the stage is read back into it (from
  /// the parts and the committed generation), so it is an ordinary staged
  /// file again; without, the bytes are dropped (a truncation to 0, an
  /// unlinked file). The parts are deleted apart from the caller.
  func endStream(_ staged: StagedFile, bringBack: Bool) async throws {
    await settleParts(staged, combines: true)
    guard let (stream, key, generation) = staged.streamSnapshot else { return }
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
    staged.endStream(stream.id)
    let upload = stream.upload
    inBackground { await upload.removeParts(all: true) }
  }

  /// Awaits every part upload under way, and with `combines` every combine
  /// (a stored part may start one) too.
  private func settleParts(_ staged: StagedFile, combines: Bool) async {
    while true {
      let tasks = staged.streamTasks(combines: combines)
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
      if code != 0 { throw staged.poison(code, diagnostics: diagnostics) }
      at = range.upperBound
    }
  }

  // MARK: - Reads and release

  /// Reads of a streaming file's bytes that left the stage bring them back first.
  func bringBackIfGone(_ staged: StagedFile, _ range: Range<Int64>) async throws -> Bool {
    guard staged.streamedAway(range) else { return false }
    try await staged.exclusively {
      if staged.isStreaming { try await fallBack(staged) }
    }
    return true
  }

  /// The last handle closed on a stream that will never be composed (the
  /// file unlinked or failed): its parts are deleted once its uploads end.
  func dropStream(_ staged: StagedFile) {
    guard let stream = staged.streamSnapshot?.stream else { return }
    inBackground {
      await self.settleParts(staged, combines: true)
      staged.endStream(stream.id)
      await stream.upload.removeParts(all: true)
    }
  }

  // MARK: - Background work

  /// Runs `body` apart from the caller (the deletes of parts no longer
  /// needed); an unmount waits for what is under way.
  private func inBackground(_ body: @escaping @Sendable () async -> Void) {
    tasks.start(.finish, priority: .utility, body)
  }
}

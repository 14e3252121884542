import FUSE
import NIOCore
import ObjectStore

#if canImport(Glibc)
  import Glibc
#endif

/// A file written in order from its first byte, whose full parts go up while
/// it is written and then leave the stage (docs/SEMANTICS.md#writes-streaming).
struct WriteStream: Sendable {
  struct Part: Sendable {
    let range: Range<Int64>
    var stored: StoredPart?
    /// The upload under way; awaited before the parts are composed or dropped.
    var task: Task<Void, Never>?
    /// Parts of the file this one is made of (more than 1: combined).
    var components = 1
  }

  /// Tells this stream's part uploads from those of a stream the file had before.
  let id: UInt64
  let upload: any PartedUpload
  let plan: PartPlan
  /// Bytes of the stage that may be on disk at once (the rest wait).
  let bound: Int64
  /// Bytes [0, committed) are the object's base generation, composed by a
  /// commit (fsync, a close of one of several descriptors): its first source.
  var committed: Int64 = 0
  /// That generation's components (the service allows 1024).
  var committedComponents = 0
  /// The parts after `committed`, in order and contiguous.
  var parts: [Part] = []
  /// Where the next part begins.
  var end: Int64 = 0
  /// Parts started in this stream, which sets the next one's size.
  var started = 0
  /// Bytes punched out of the stage.
  var gone: Int64 = 0
  /// A part failed (after the client's retries): the stream ends at the next write or commit.
  var failed = false
  /// The compose of stored parts into one, under way.
  var combining: Task<Void, Never>?

  /// Parts combined at a time: small, so the combine a close may wait for
  /// is short; the close composes up to 32 of them without a tree (2 GiB
  /// in 8 MiB parts).
  static let group = 8

  /// The components of the parts so far.
  var components: Int { parts.reduce(0) { $0 + $1.components } }

  /// The size of the next part: the plan's, doubling every 128 parts (the
  /// service composes at most 1024 components), at most half the bound.
  var nextPartSize: Int64 {
    let grown = plan.partSize << Int64(min(started / 128, 20))
    return min(grown, max(plan.partSize, bound / 2))
  }

  var inFlight: Int { parts.count(where: { $0.stored == nil }) }

  /// Whether `range` overlaps bytes that may have left the stage.
  func gone(_ range: Range<Int64>) -> Bool {
    range.lowerBound < committed || parts.contains { $0.stored != nil && $0.range.overlaps(range) }
  }
}

extension Staging {
  /// The most disk a stream holds when no `--stream-disk-limit` is given.
  static let defaultStreamBound: Int64 = 64 << 20

  // MARK: - Before and after a write (under the gate)

  /// Keeps the stream going for a write at `offset`, or ends it: a write
  /// anywhere but the end brings the uploaded bytes back first. Waits while
  /// the stage holds its bound.
  func streamBeforeWrite(_ staged: StagedFile, offset: UInt64, count: Int) async throws {
    let (sequential, streaming, failed) = staged.state.withLock { s in
      let sequential = s.sequential && offset == s.size
      if !sequential { s.sequential = false }
      return (sequential, s.stream != nil, s.stream?.failed ?? false)
    }
    guard streaming else { return }
    if !sequential || failed {
      try await endStream(staged, bringBack: true)
      staged.state.withLock { $0.sequential = false }
      return
    }
    try await makeRoom(staged, for: Int64(count))
  }

  /// After a write: starts the stream once the file passes the composite
  /// threshold (or holds as much as the bound lets it), and the uploads of
  /// the parts now complete.
  func streamAfterWrite(_ staged: StagedFile) async throws {
    let candidate = staged.state.withLock { s -> Int64? in
      guard s.stream == nil, s.sequential, s.loaded, !s.unlinked, s.poisoned == nil else { return nil }
      return Int64(s.size)
    }
    if let size = candidate, let plan = store.partPlan, size > plan.partSize {
      let bound = streamBound(staged.stage, plan: plan, holding: size)
      if size > min(plan.threshold, bound - plan.partSize), let upload = store.partedUpload() {
        try await startStream(staged, upload: upload, plan: plan, bound: bound)
      }
    }
    launchParts(staged)
  }

  /// `--stream-disk-limit`, else 64 MiB or half the staging disk's room
  /// (its free space and what the file holds), never below two parts.
  private func streamBound(_ stage: Stage, plan: PartPlan, holding: Int64) -> Int64 {
    let floor = 2 * plan.partSize
    if let limit = configuration.streamDiskLimit { return max(limit, floor) }
    var info = statvfs()
    guard fstatvfs(stage.fd, &info) == 0 else { return max(Self.defaultStreamBound, floor) }
    let free = Int64(info.f_bavail) * Int64(info.f_frsize)
    return max(min(Self.defaultStreamBound, (free + holding) / 2), floor)
  }

  private func startStream(_ staged: StagedFile, upload: any PartedUpload, plan: PartPlan, bound: Int64)
    async throws
  {
    let id = streamIDs.wrappingAdd(1, ordering: .relaxed).newValue
    let record = staged.state.withLock { s -> StageRecord in
      s.stream = WriteStream(id: id, upload: upload, plan: plan, bound: bound)
      return s.record(uploaded: false)
    }
    // The sidecar says where the stage's missing bytes went, for the next mount.
    let code = await staged.stage.writeRecord(record)
    if code != 0 {
      staged.state.withLock { $0.stream = nil }
      throw diagnostics.localFailure(code, key: record.key)
    }
    logger.debug("\(record.key): streaming parts under \(upload.prefix), holding at most \(bound >> 20) MiB")
  }

  /// Starts the uploads of the parts now complete, as many as the plan runs at once.
  func launchParts(_ staged: StagedFile) {
    staged.state.withLock { s in
      guard var stream = s.stream, !stream.failed else { return }
      let (id, upload) = (stream.id, stream.upload)
      while stream.inFlight < stream.plan.parallel,
        stream.committedComponents + stream.components + 2 < 1024
      {
        let range = stream.end..<(stream.end + stream.nextPartSize)
        guard range.upperBound <= Int64(s.size) else { break }
        var part = WriteStream.Part(range: range)
        part.task = tasks.start(.finish) {
          await self.uploadPart(staged, stream: id, range: range, via: upload)
        }
        stream.parts.append(part)
        stream.end = range.upperBound
        stream.started += 1
      }
      s.stream = stream
    }
  }

  /// One part: stored, then punched out of the stage (reads of it from then
  /// on bring the stream's bytes back first).
  private func uploadPart(
    _ staged: StagedFile, stream id: UInt64, range: Range<Int64>, via upload: any PartedUpload
  )
    async
  {
    do {
      let part = try await upload.store(StageSource(stage: staged.stage, range: range))
      let current = staged.state.withLock { s -> Bool in
        guard s.stream?.id == id, let index = s.stream?.parts.firstIndex(where: { $0.range == range }) else {
          return false
        }
        s.stream?.parts[index].stored = part
        return true
      }
      guard current else { return }
      combineIfReady(staged, stream: id)
      let code = await staged.stage.punch(range)
      if code == 0 {
        staged.state.withLock { s in if s.stream?.id == id { s.stream?.gone += Int64(range.count) } }
      } else if diagnostics.firstWarning("punch:" + staged.stage.path) {
        logger.warning(
          "cannot free the stage's uploaded bytes (fallocate PUNCH_HOLE: \(Errno(code))): this file's stage keeps them"
        )
      }
      // The next complete part goes up whether or not the writer writes again.
      launchParts(staged)
    } catch {
      let key = staged.state.withLock { s in
        if s.stream?.id == id { s.stream?.failed = true }
        return s.key
      }
      logger.warning(
        "\(key): a part of bytes \(range) could not be stored (\(error)); the file is staged whole")
    }
  }

  /// Once 8 parts in a row are stored, composes them into one apart from
  /// the writer, so that the close composes few sources (no tree) and
  /// deletes few parts.
  private func combineIfReady(_ staged: StagedFile, stream id: UInt64) {
    staged.state.withLock { s in
      guard var stream = s.stream, stream.id == id, stream.combining == nil, !stream.failed else { return }
      let start = stream.parts.prefix { $0.components > 1 }.count
      guard stream.parts.count >= start + WriteStream.group else { return }
      let slice = stream.parts[start..<start + WriteStream.group]
      let pieces = slice.compactMap(\.stored)
      guard pieces.count == slice.count, let first = slice.first, let last = slice.last else { return }
      let range = first.range.lowerBound..<last.range.upperBound
      let upload = stream.upload
      stream.combining = tasks.start(.finish) {
        await self.combine(staged, stream: id, pieces, range: range, via: upload)
      }
      s.stream = stream
    }
  }

  private func combine(
    _ staged: StagedFile, stream id: UInt64, _ pieces: [StoredPart], range: Range<Int64>,
    via upload: any PartedUpload
  ) async {
    do {
      let combined = try await upload.combine(pieces)
      let replaced = staged.state.withLock { s -> Bool in
        guard var stream = s.stream, stream.id == id else { return false }
        stream.combining = nil
        defer { s.stream = stream }
        guard let first = stream.parts.firstIndex(where: { $0.range.lowerBound == range.lowerBound }),
          first + pieces.count <= stream.parts.count,
          stream.parts[first + pieces.count - 1].range.upperBound == range.upperBound
        else { return false }
        var part = WriteStream.Part(range: range)
        part.stored = combined
        part.components = pieces.count
        stream.parts.replaceSubrange(first..<first + pieces.count, with: [part])
        return true
      }
      let unused = replaced ? pieces : [combined]
      inBackground { await upload.remove(unused) }
    } catch {
      staged.state.withLock { s in if s.stream?.id == id { s.stream?.combining = nil } }
      logger.debug(
        "combining \(pieces.count) parts under \(upload.prefix) failed (\(error)); the close composes them")
      return
    }
    combineIfReady(staged, stream: id)
  }

  /// Waits for parts to be stored until the stage can take `count` more
  /// bytes within the bound (or nothing more can leave it).
  private func makeRoom(_ staged: StagedFile, for count: Int64) async throws {
    while true {
      let next = staged.state.withLock { s -> (Task<Void, Never>?, Bool)? in
        guard let stream = s.stream else { return nil }
        if stream.failed { return (nil, true) }
        if Int64(s.size) - stream.gone + count <= stream.bound { return nil }
        return (stream.parts.first { $0.stored == nil }?.task, false)
      }
      guard let (task, failed) = next else { return }
      if failed {
        try await endStream(staged, bringBack: true)
        staged.state.withLock { $0.sequential = false }
        return
      }
      guard let task else { return }
      await task.value
      launchParts(staged)
    }
  }

  // MARK: - Ending a stream (under the gate)

  /// Ends the file's stream once its part uploads are done: with
  /// `bringBack`, every byte that left the stage is read back into it (from
  /// the parts and the committed generation), so it is an ordinary staged
  /// file again; without, the bytes are dropped (a truncation to 0, an
  /// unlinked file). The parts are deleted apart from the caller.
  func endStream(_ staged: StagedFile, bringBack: Bool) async throws {
    await settleParts(staged)
    guard let snapshot = staged.state.withLock({ s in s.stream.map { ($0, s.key, s.baseGeneration) } }) else {
      return
    }
    let (stream, key, generation) = snapshot
    if bringBack {
      var pieces: [StoredPart] = []
      if stream.committed > 0 {
        pieces.append(StoredPart(name: key, generation: generation, size: stream.committed, crc32c: nil))
      }
      var starts: [Int64] = stream.committed > 0 ? [0] : []
      for part in stream.parts {
        if let stored = part.stored {
          pieces.append(stored)
          starts.append(part.range.lowerBound)
        }
      }
      for (piece, start) in zip(pieces, starts) {
        try await copyBack(piece, to: start, of: staged, via: stream.upload, key: key)
      }
      staged.stage.refilled()
      logger.info("\(key): not written in order any more; its streamed bytes are staged again")
    }
    staged.state.withLock { s in if s.stream?.id == stream.id { s.stream = nil } }
    let upload = stream.upload
    inBackground { await upload.removeParts(all: true) }
  }

  /// Awaits every part upload and combine under way (a stored part may start a combine).
  func settleParts(_ staged: StagedFile) async {
    while true {
      let tasks = staged.state.withLock { s -> [Task<Void, Never>] in
        guard let stream = s.stream else { return [] }
        return stream.parts.compactMap { $0.stored == nil ? $0.task : nil }
          + (stream.combining.map { [$0] } ?? [])
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

  // MARK: - Committing a stream (under the gate)

  /// Makes the object from the stream: the committed generation, the parts,
  /// and the bytes after them as one last part, in one compose under the
  /// upload's precondition. Nil when the stream failed and was brought back
  /// (the caller uploads the stage as usual). On success every part is
  /// deleted and the stream goes on from the object.
  func commitStream(
    _ staged: StagedFile, key: String, generation: Int64, attributes: ObjectAttributes, size: UInt64
  ) async throws -> ObjectMetadata? {
    await settleParts(staged)
    guard let stream = staged.state.withLock({ $0.stream }) else { return nil }
    if stream.failed {
      try await endStream(staged, bringBack: true)
      staged.state.withLock { $0.sequential = false }
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
    } catch StorageError.preconditionFailed {
      // Nothing overwritten, nothing left behind: the parts go before the close returns.
      staged.state.withLock { s in
        s.poisoned = .stale
        s.stream = nil
      }
      await stream.upload.removeParts(all: true)
      logger.error(
        "upload of \(key) refused: the object \(generation == 0 ? "appeared" : "changed since generation \(generation)") meanwhile; nothing was overwritten; its streamed parts are deleted, the bytes not yet sent are kept in \(staged.stage.path)"
      )
      throw Errno.stale
    } catch let local as StageFailure {
      staged.state.withLock { $0.poisoned = Errno(local.code) }
      throw diagnostics.localFailure(local.code, key: key)
    } catch {
      throw diagnostics.failure(error, operation: "upload", key: key)
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
    }
    return uploaded
  }

  // MARK: - Background work

  /// Runs `body` apart from the caller (the deletes of parts no longer
  /// needed); an unmount waits for what is under way (``settleBackground()``).
  func inBackground(_ body: @escaping @Sendable () async -> Void) {
    tasks.start(.finish, priority: .utility, body)
  }

  /// Awaits the background work under way, and any it starts.
  func settleBackground() async {
    await tasks.finish()
  }

  // MARK: - Reads and release

  /// Reads of a streaming file's bytes that left the stage bring them back first.
  func bringBackIfGone(_ staged: StagedFile, _ range: Range<Int64>) async throws -> Bool {
    guard staged.state.withLock({ $0.stream?.gone(range) ?? false }) else { return false }
    try await staged.gate.run {
      if staged.state.withLock({ $0.stream != nil }) {
        try await endStream(staged, bringBack: true)
        staged.state.withLock { $0.sequential = false }
      }
    }
    return true
  }

  /// The last handle closed on a stream that will never be composed (the
  /// file unlinked or failed): its parts are deleted once its uploads end.
  func dropStream(_ staged: StagedFile) {
    guard let upload = staged.state.withLock({ $0.stream?.upload }) else { return }
    inBackground {
      await self.settleParts(staged)
      staged.state.withLock { $0.stream = nil }
      await upload.removeParts(all: true)
    }
  }
}

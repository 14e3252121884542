import FUSE
import Logging
import ObjectStore
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// The streaming upload of sequential writers (docs/SEMANTICS.md#writes-streaming):
/// while a file is written in order, its full parts go up and leave the
/// stage, the writer waits at the disk bound, and stored parts are combined
/// as far as the close needs (here); the close composes them, or the stream
/// ends and its bytes come back or are dropped (WriteStreams+Ending.swift).
/// Each file's ``WriteStream`` lives in its ``StagedFile``'s state and
/// changes only here; the calls that change the stage's bytes run under the
/// file's gate.
final class WriteStreams: MountComponent, Sendable {
  /// The most disk a stream holds when no `--stream-disk-limit` is given:
  /// 128 MiB, 16 parts of 8 MiB, so the parts in flight (16 at once) never
  /// hold the writer back for want of room.
  static let defaultStreamBound: Int64 = 128 << 20

  /// Numbers the files' streams (``WriteStream``).
  private let streamIDs = Atomic<UInt64>(0)
  /// The store, settings and diagnostics; its tasks own the part uploads,
  /// combines and part deletes.
  let context: MountContext

  init(context: MountContext) {
    self.context = context
  }

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
      try await fallBack(staged)
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

  /// `--stream-disk-limit`, else 128 MiB or half the staging disk's room
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

  // MARK: - Parts

  /// Starts the uploads of the parts now complete, as many as the plan runs at once.
  private func launchParts(_ staged: StagedFile) {
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
      combineIfNeeded(staged, stream: id)
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
        try await fallBack(staged)
        return
      }
      guard let task else { return }
      await task.value
      launchParts(staged)
    }
  }

  // MARK: - Combining parts

  /// Starts a combine, apart from the writer, when the close would
  /// otherwise compose too many sources. A file of fewer than 24 parts
  /// (192 MiB in 8 MiB parts) is never combined: its close makes one
  /// compose, and nothing during the write adds requests or, on an
  /// emulator, copies of its bytes.
  private func combineIfNeeded(_ staged: StagedFile, stream id: UInt64) {
    staged.state.withLock { s in
      guard var stream = s.stream, stream.id == id, stream.combining == nil, !stream.failed,
        !stream.composing, stream.needsCombining, let run = stream.combinable
      else { return }
      let pieces = stream.parts[run].compactMap(\.stored)
      let range =
        stream.parts[run.lowerBound].range.lowerBound..<stream.parts[run.upperBound - 1].range.upperBound
      let (upload, round) = (stream.upload, stream.combineRound)
      stream.combining = tasks.start(.finish) {
        await self.combine(staged, stream: id, round: round, pieces, range: range, via: upload)
      }
      s.stream = stream
    }
  }

  /// Composes `pieces` (the parts of bytes `range`) into one part, which
  /// then takes their place; the pieces, or the combined part when it came
  /// too late (a commit went ahead without it), are deleted.
  private func combine(
    _ staged: StagedFile, stream id: UInt64, round: Int, _ pieces: [StoredPart], range: Range<Int64>,
    via upload: any PartedUpload
  ) async {
    do {
      let combined = try await upload.combine(pieces)
      let replaced = staged.state.withLock { s -> Bool in
        guard var stream = s.stream, stream.id == id, stream.combineRound == round else { return false }
        stream.combining = nil
        defer { s.stream = stream }
        guard let first = stream.parts.firstIndex(where: { $0.range.lowerBound == range.lowerBound }),
          first + pieces.count <= stream.parts.count,
          stream.parts[first + pieces.count - 1].range.upperBound == range.upperBound
        else { return false }
        let replaced = first..<first + pieces.count
        var part = WriteStream.Part(range: range)
        part.stored = combined
        part.components = stream.parts[replaced].reduce(0) { $0 + $1.components }
        stream.parts.replaceSubrange(replaced, with: [part])
        return true
      }
      let unused = replaced ? pieces : [combined]
      tasks.start(.finish, priority: .utility) { await upload.remove(unused) }
    } catch {
      staged.state.withLock { s in
        if s.stream?.id == id, s.stream?.combineRound == round { s.stream?.combining = nil }
      }
      logger.debug(
        "combining \(pieces.count) parts under \(upload.prefix) failed (\(error)); the close composes them")
      return
    }
    combineIfNeeded(staged, stream: id)
  }
}

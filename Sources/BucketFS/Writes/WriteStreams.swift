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
/// Each file's ``WriteStream`` lives in its ``StagedFile``, which applies
/// the stream's own transitions (WriteStream.swift) when told here what
/// happened; the calls that change the stage's bytes run under the file's gate.
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
    switch staged.streamStep(beforeWriteAt: offset) {
    case .notStreaming: return
    case .fallsBack:
      try await fallBack(staged)
      return
    case .continues: break
    }
    try await makeRoom(staged, for: Int64(count))
  }

  /// After a write: starts the stream once the file passes the composite
  /// threshold (or holds as much as the bound lets it), and the uploads of
  /// the parts now complete.
  func streamAfterWrite(_ staged: StagedFile) async throws {
    let candidate = staged.streamCandidateSize
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
    let record = staged.beginStream(WriteStream(id: id, upload: upload, plan: plan, bound: bound))
    // The sidecar says where the stage's missing bytes went, for the next mount.
    let code = await staged.stage.writeRecord(record)
    if code != 0 {
      staged.endStream(id)
      throw diagnostics.localFailure(code, key: record.key)
    }
    logger.debug("\(record.key): streaming parts under \(upload.prefix), holding at most \(bound >> 20) MiB")
  }

  // MARK: - Parts

  /// Starts the uploads of the parts now complete, as many as the plan runs at once.
  private func launchParts(_ staged: StagedFile) {
    staged.launchParts { range, id, upload in
      tasks.start(.finish) { await self.uploadPart(staged, stream: id, range: range, via: upload) }
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
      let part = try await upload.store(
        StageSource(stage: staged.stage, range: range, crc32c: staged.writtenSum(of: range)))
      let current = staged.notePartStored(part, at: range, stream: id)
      guard current else { return }
      combineIfNeeded(staged, stream: id)
      let code = await staged.stage.punch(range)
      if code == 0 {
        staged.notePunched(range, stream: id)
      } else if diagnostics.firstWarning("punch:" + staged.stage.path) {
        logger.warning(
          "cannot free the stage's uploaded bytes (fallocate PUNCH_HOLE: \(Errno(code))): this file's stage keeps them"
        )
      }
      // The next complete part goes up whether or not the writer writes again.
      launchParts(staged)
    } catch {
      let key = staged.notePartFailed(at: range, stream: id)
      logger.warning(
        "\(key): a part of bytes \(range) could not be stored (\(error)); the file is staged whole")
    }
  }

  /// Waits for parts to be stored until the stage can take `count` more
  /// bytes within the bound (or nothing more can leave it).
  private func makeRoom(_ staged: StagedFile, for count: Int64) async throws {
    while true {
      switch staged.room(for: count) {
      case .enough: return
      case .failed:
        try await fallBack(staged)
        return
      case .waitFor(let task):
        await task.value
        launchParts(staged)
      }
    }
  }

  // MARK: - Combining parts

  /// Starts a combine, apart from the writer, when the close would
  /// otherwise compose too many sources. A file of fewer than 24 parts
  /// (192 MiB in 8 MiB parts) is never combined: its close makes one
  /// compose, and nothing during the write adds requests or, on an
  /// emulator, copies of its bytes.
  private func combineIfNeeded(_ staged: StagedFile, stream id: UInt64) {
    staged.startCombine(stream: id) { pieces, range, round, upload in
      tasks.start(.finish) {
        await self.combine(staged, stream: id, round: round, pieces, range: range, via: upload)
      }
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
      let replaced = staged.noteCombined(
        combined, replacing: pieces.count, range: range, stream: id, round: round)
      let unused = replaced ? pieces : [combined]
      tasks.start(.finish, priority: .utility) { await upload.remove(unused) }
    } catch {
      staged.noteCombineFailed(stream: id, round: round)
      logger.debug(
        "combining \(pieces.count) parts under \(upload.prefix) failed (\(error)); the close composes them")
      return
    }
    combineIfNeeded(staged, stream: id)
  }
}

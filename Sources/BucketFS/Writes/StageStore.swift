import CoreMetrics
import FUSE
import IOThreads
import Logging
import NIOCore
import ObjectStore
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// The stage store: each staged file's bytes and sidecar on local disk
/// (``Stage``, in the mount's ``StageDirectory``; Recovery.swift for what a
/// crash leaves), written, read and resized under the file's gate, never
/// under its state lock (docs/ARCHITECTURE.md#locks). A sequential writer's
/// bytes may leave the stage as parts (``WriteStreams``): a write or resize
/// ends or feeds the stream, a read brings gone bytes back.
final class StageStore: MountComponent, Sendable {
  private let stageDirectory = Mutex<StageDirectory?>(nil)
  /// The calls that write the stages' bytes.
  private let stageFiles: any StageFiles
  /// Where the stages' file work runs (``Stage``); nil: on the caller's thread.
  private let diskWork: IOPool?
  /// `bucketfs_staged_bytes` (``Stage``).
  private let stagedBytes: Meter
  private let streams: WriteStreams
  /// The store, settings, diagnostics, clock and task owner of the mount.
  let context: MountContext

  init(
    context: MountContext, stageFiles: any StageFiles, diskWork: IOPool?, metrics: any MetricsFactory,
    streams: WriteStreams
  ) {
    self.context = context
    self.stageFiles = stageFiles
    self.diskWork = diskWork
    self.stagedBytes = Meter(label: "bucketfs_staged_bytes", factory: metrics)
    self.streams = streams
  }

  /// A fresh, empty stage file in the mount's staging directory.
  func makeStage() throws -> Stage {
    // Where is policy (the CLI's, per mount under --cache-dir): none, no writes.
    let path = configuration.stageDirectory
    guard !path.isEmpty else {
      logger.error("no staging directory is configured; files cannot be written")
      throw Errno.readOnly
    }
    do throws(StageFailure) {
      // The first stage makes the directory (mkdir, chmod) with no lock held;
      // two racing first stages both make it, and the first one kept wins.
      let directory: StageDirectory
      if let made = stageDirectory.withLock({ $0 }) {
        directory = made
      } else {
        let made = try StageDirectory(path: path, files: stageFiles, io: diskWork, staged: stagedBytes)
        directory = stageDirectory.withLock { kept in
          if let kept { return kept }
          kept = made
          return made
        }
      }
      return try directory.makeStage()
    } catch {
      logger.error("cannot stage a file in \(path): \(Errno(error.code))")
      throw Errno(error.code)
    }
  }

  /// The bytes of a stage that holds the file's. A streaming file's bytes
  /// that left the stage are brought back first; a read that raced their
  /// leaving is made again.
  func read(_ staged: StagedFile, offset: UInt64, size: Int) async throws -> [ByteBuffer] {
    while true {
      let total = staged.size
      guard offset < total, size > 0 else { return [] }
      let count = Int(min(UInt64(size), total - offset))
      let range = Int64(offset)..<Int64(offset) + Int64(count)
      if try await streams.bringBackIfGone(staged, range) { continue }
      let bytes: ByteBuffer
      do {
        bytes = try await staged.stage.read(at: Int64(offset), count: count)
      } catch {
        throw Errno(error.code)
      }
      // Bytes are marked gone before they are punched: unmarked now, they were there.
      if staged.streamedAway(range) { continue }
      return [bytes]
    }
  }

  // MARK: - Writing

  /// The answer to a write that needs no stage: a bad handle, a poisoned
  /// file, a write of no bytes or one past the largest object. Nil when
  /// the write goes to the stage (off the FUSE loop: it is file I/O).
  func answerWithoutStage(_ staged: StagedFile, offset: UInt64, count: Int) -> Result<Int, Errno>? {
    do throws(Errno) {
      return unstagedWrite(try staged.keyForWriting(), offset: offset, count: count)
    } catch {
      return .failure(error)
    }
  }

  func write(_ staged: StagedFile, offset: UInt64, data: [UInt8]) async throws -> Int {
    try await staged.exclusively {
      let (key, covered) = try staged.prepareWrite(offset: offset, count: data.count)
      if let answer = unstagedWrite(key, offset: offset, count: data.count) { return try answer.get() }
      if !covered { try await load(staged) }
      try await markDirty(staged)
      try await streams.streamBeforeWrite(staged, offset: offset, count: data.count)
      // Summed here, while the bytes are in the CPU's cache: the upload
      // then declares their CRC-32C without reading the stage for it.
      let summed = staged.sumStart(at: offset).map { start in
        data.withUnsafeBytes { AppendSums.Written($0, from: start) }
      }
      let code = await staged.stage.write(data, at: offset)
      // A local failure poisons the file: its stage may hold part of the
      // write, and is never uploaded.
      if code != 0 { throw staged.poison(code, diagnostics: diagnostics) }
      staged.noteWritten(upTo: offset + UInt64(data.count), summed: summed)
      try await streams.streamAfterWrite(staged)
      return data.count
    }
  }

  /// The answer to a write that leaves the stage alone: 0 for no bytes (the
  /// size stays), EFBIG when it would end past ``Staging/maxObjectBytes``.
  private func unstagedWrite(_ key: String, offset: UInt64, count: Int) -> Result<Int, Errno>? {
    if count == 0 { return .success(0) }
    let (end, overflow) = offset.addingReportingOverflow(UInt64(count))
    let refused = Staging.refusal(
      ofEnd: overflow ? nil : end, change: "write to \(key) at byte \(offset)", logger: logger)
    return refused.map { .failure($0) }
  }

  /// Marks the file dirty, first recording so in the sidecar (a kill -9
  /// from now on leaves a stage the next mount lists). Under the gate.
  private func markDirty(_ staged: StagedFile) async throws {
    guard let record = staged.recordBeforeDirtying() else { return }
    let code = await staged.stage.writeRecord(record)
    if code != 0 { throw diagnostics.localFailure(code, key: record.key) }
    staged.noteDirty()
  }

  /// Fills the stage with the bytes of the generation it was opened on.
  /// Under the gate.
  private func load(_ staged: StagedFile, upTo limit: UInt64? = nil) async throws {
    guard let (base, size) = staged.bytesToLoad else { return }
    let end = min(limit ?? size, size)
    let chunk: UInt64 = 8 << 20
    var at: UInt64 = 0
    while at < end {
      let upper = min(at + chunk, end)
      let bytes: ByteBuffer
      do {
        bytes = try await store.read(
          base.name, generation: base.generation, range: Int64(at)..<Int64(upper), reusing: nil)
      } catch {
        throw diagnostics.failure(error, operation: "read for writing", key: base.name, context: .read)
      }
      guard bytes.readableBytes > 0 else { break }
      let code = await staged.stage.write(bytes, at: at)
      if code != 0 { throw diagnostics.localFailure(code, key: base.name) }
      at += UInt64(bytes.readableBytes)
    }
    let code = await staged.stage.truncate(to: end)
    if code != 0 { throw diagnostics.localFailure(code, key: base.name) }
    staged.noteLoaded(size: end)
  }

  /// Truncates or extends the staged file to `size`, downloading only the
  /// bytes it keeps (none for 0).
  func resize(_ staged: StagedFile, to size: UInt64) async throws {
    try await staged.exclusively {
      let (loaded, current) = try staged.prepareResize()
      // Nothing changes, nothing to download or upload (truncate(2) of a
      // local file to its size leaves even its times).
      if current == size { return }
      if !loaded && size > 0 { try await load(staged, upTo: min(size, current)) }
      // A stream's bytes come back for any size but 0, which drops them.
      try await streams.endStream(staged, bringBack: size > 0)
      try await markDirty(staged)
      let code = await staged.stage.truncate(to: size)
      if code != 0 { throw staged.poison(code, diagnostics: diagnostics) }
      staged.noteResized(to: size)
    }
  }
}

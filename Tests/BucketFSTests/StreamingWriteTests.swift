import AsyncHTTPClient
import CloudStorage
import FUSE
import Foundation
import NIOCore
import ObjectStore
import ServiceAccess
import StorageFake
import Synchronization
import XCTest

@testable import BucketFS

#if canImport(FoundationEssentials)
  import FoundationEssentials
#endif

#if canImport(Glibc)
  import Glibc
#endif

/// Streaming writes (docs/SEMANTICS.md#writes-streaming) over the real HTTP
/// client and the fake service: composite above 1 MiB in parts of 256 KiB,
/// 2 at once, and a stage bound of 1 MiB, so a file of a few MiB streams.
final class StreamingWriteTests: XCTestCase {
  var server: FakeStorageServer!
  var http: HTTPClient!
  var fs: BucketFileSystem!
  var stages: String!
  let bound: Int64 = 1 << 20

  private func quickRetry(attemptTimeout: Double, deadline: Double) -> RetryPolicy {
    var retry = RetryPolicy()
    retry.initialBackoff = 0.01
    retry.maxBackoff = 0.05
    retry.attemptTimeout = attemptTimeout
    retry.deadline = deadline
    return retry
  }

  /// A client of the fake whose files over 1 MiB stream in parts of 256 KiB.
  private func makeClient(_ retry: RetryPolicy) throws -> CloudStorageClient {
    CloudStorageClient(
      bucket: "demo", endpoint: try Endpoint(server.endpoint), http: http, tokens: nil, retry: retry,
      uploads: try UploadPolicy(
        threshold: 256 << 10, chunkSize: 256 << 10, compositeThreshold: 1 << 20, partSize: 256 << 10,
        parallelParts: 2),
      logger: quietLogger)
  }

  override func setUp() async throws {
    server = FakeStorageServer(bucket: "demo")
    try await server.start()
    let retry = quickRetry(attemptTimeout: 60, deadline: 60)
    http = CloudStorageClient.makeHTTPClient(retry: retry)
    let client = try makeClient(retry)
    stages = makeStageDirectory()
    fs = makeWritingFileSystem(client, stageDirectory: stages, streamDiskLimit: bound)
  }

  override func tearDown() async throws {
    try await http?.shutdown()
    try await server?.stop()
  }

  /// Bytes that differ at every offset of interest.
  private func pattern(_ count: Int, seed: Int = 7) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: ($0 &* 31) ^ ($0 >> 9) &+ seed) }
  }

  private var parts: [String] { server.store.names.filter { $0.hasPrefix(UploadPolicy.partDirectory) } }

  /// Writes `data` at `offset` in 128 KiB writes, as the kernel sends a large write.
  private func write(_ inode: UInt64, _ handle: UInt64, _ data: [UInt8], at offset: Int) async throws {
    var done = 0
    while done < data.count {
      let end = min(done + (128 << 10), data.count)
      let written = try await fs.writeBytes(inode, handle, at: UInt64(offset + done), Array(data[done..<end]))
      XCTAssertEqual(written, end - done)
      done = end
    }
  }

  /// The disk the stage files take (allocated blocks, holes not counted).
  private var stageDisk: Int64 {
    filesIn(stages).filter { !$0.hasSuffix(".json") }.reduce(0) { total, name in
      var info = stat()
      return total + (stat(stages + "/" + name, &info) == 0 ? Int64(info.st_blocks) * 512 : 0)
    }
  }

  /// Parts are deleted apart from the close that composed them: bounded wait.
  private func waitForNoParts() async throws {
    await fs.tasks.finish()
    for _ in 0..<200 where !parts.isEmpty { try await Task.sleep(for: .milliseconds(20)) }
    XCTAssertEqual(parts, [])
  }

  func testPartsGoUpWhileTheFileIsWrittenAndLeaveTheStage() async throws {
    let data = pattern(6 << 20)
    let (inode, handle) = try await fs.createFile("big.bin")
    var peak: Int64 = 0
    for start in stride(from: 0, to: data.count, by: 512 << 10) {
      try await write(inode, handle, Array(data[start..<min(start + (512 << 10), data.count)]), at: start)
      peak = max(peak, stageDisk)
    }
    XCTAssertLessThanOrEqual(peak, bound + (128 << 10), "the stage holds the bound (and one write) at most")
    // Writes waited for room: all but the bound's worth are stored before close
    // (each part in one request: parts are no larger than the upload threshold).
    XCTAssertEqual(server.requests(.uploadSession).count, 0)
    let stored = server.requests(.upload).count
    XCTAssertGreaterThanOrEqual(stored, Int((Int64(data.count) - bound) >> 18) - 1)
    XCTAssertNil(server.store.object("big.bin"), "no object before close")
    try await fs.close(inode, handle)
    XCTAssertEqual(server.store.data("big.bin"), data)
    let composes = server.requests(.compose)
    XCTAssertEqual(composes.count, 1, "24 parts: one compose of the object, no combine")
    XCTAssertEqual(composes.first?.objectName, "big.bin")
    XCTAssertEqual(composes.first?.query["ifGenerationMatch"], "0")
    XCTAssertEqual(try sources(of: try XCTUnwrap(composes.first)), 24)
    try await waitForNoParts()
  }

  /// A part the service keeps refusing (its bytes arrive changed every
  /// time) ends the stream; the close then uploads the stage whole, which is
  /// refused too, and fails with EIO: it returns, and stores nothing.
  func testAPartNeverStoredEndsTheStreamAndTheCloseFailsWithoutHanging() async throws {
    let client = try makeClient(quickRetry(attemptTimeout: 30, deadline: 0.5))
    let fs = makeWritingFileSystem(client, stageDirectory: stages, streamDiskLimit: bound)
    server.corrupt { $0.uploads = Int.max }
    server.corrupt { $0.chunks = Int.max }
    let data = pattern(3 << 20)
    let (inode, handle) = try await fs.createFile("big.bin")
    for start in stride(from: 0, to: data.count, by: 128 << 10) {
      _ = try await fs.writeBytes(inode, handle, at: UInt64(start), Array(data[start..<start + (128 << 10)]))
    }
    let closed = try await outcome(ofClosing: inode, handle, on: fs)
    XCTAssertEqual(closed, "errno \(EIO)")
    XCTAssertNil(server.store.object("big.bin"))
  }

  /// "stored", "errno N" or the error a close ends with. Polled, not
  /// awaited: a close that never returns must fail the test, not hang it.
  private func outcome(ofClosing inode: UInt64, _ handle: UInt64, on fs: BucketFileSystem) async throws
    -> String
  {
    let outcome = Mutex<String?>(nil)
    Task {
      let result: String
      do {
        try await fs.close(inode, handle)
        result = "stored"
      } catch let error as Errno {
        result = "errno \(error.code)"
      } catch {
        result = "\(error)"
      }
      outcome.withLock { $0 = result }
    }
    for _ in 0..<600 where outcome.withLock({ $0 }) == nil { try await Task.sleep(for: .milliseconds(50)) }
    return outcome.withLock { $0 } ?? "still closing after 30 s"
  }

  /// Every upload declares the CRC-32C of the bytes as the writer gave them
  /// (summed as they were written in order), not as the stage holds them: a
  /// byte changed on the staging disk is refused by the service and never
  /// becomes the object, whether the file goes up in one request (100 KB),
  /// in a resumable session (700 KB) or streams in parts (3 MiB).
  func testAByteChangedOnTheStagingDiskNeverBecomesTheObject() async throws {
    let client = try makeClient(quickRetry(attemptTimeout: 30, deadline: 0.5))
    for (name, size) in [("small.bin", 100_000), ("middle.bin", 700_000), ("big.bin", 3 << 20)] {
      fs = makeWritingFileSystem(
        client, stageDirectory: stages, stageFiles: FlippingStageFiles(offset: UInt64(size / 2)),
        streamDiskLimit: bound)
      let (inode, handle) = try await fs.createFile(name)
      try await write(inode, handle, pattern(size), at: 0)
      let closed = try await outcome(ofClosing: inode, handle, on: fs)
      XCTAssertEqual(closed, "errno \(EIO)", name)
      XCTAssertNil(server.store.object(name), name)
    }
    XCTAssertGreaterThan(server.requests(.upload).count, 0)
  }

  /// The final compose answers a crc32c that is not its sources' combined:
  /// that generation is deleted under its precondition and the close fails
  /// with EIO, the file kept (its stage and stored parts), so a later fsync
  /// stores exactly what was written.
  func testAComposeWithTheWrongCRC32CIsDeletedAndTheCloseFailsWithTheFileKept() async throws {
    server.corrupt { $0.composes = 1 }
    let data = pattern(3 << 20)
    let (inode, handle) = try await fs.createFile("big.bin")
    try await write(inode, handle, data, at: 0)
    await XCTAssertErrno(.io) { try await self.fs.flush(inode: inode, handle: handle) }
    XCTAssertNil(server.store.object("big.bin"), "that generation is deleted")
    let deletes = server.requests(.delete).filter { $0.objectName == "big.bin" }
    XCTAssertEqual(deletes.count, 1)
    XCTAssertNotNil(deletes.first?.query["ifGenerationMatch"])
    try await fs.fsync(inode: inode, handle: handle, dataOnly: false)
    XCTAssertEqual(server.store.data("big.bin"), data)
    try await fs.close(inode, handle)
    try await waitForNoParts()
  }

  /// The sources a compose request names.
  private func sources(of compose: FakeStorageServer.RecordedRequest) throws -> Int {
    let body = try JSONSerialization.jsonObject(with: Data(compose.body)) as? [String: Any]
    return try XCTUnwrap(body?["sourceObjects"] as? [Any]).count
  }

  func testPartsAreCombinedOnlyOnceTheCloseWouldComposeTooManySources() async throws {
    let data = pattern(10 << 20)  // 40 parts
    let (inode, handle) = try await fs.createFile("long.bin")
    try await write(inode, handle, data, at: 0)
    try await fs.close(inode, handle)
    XCTAssertEqual(server.store.data("long.bin"), data)
    let composes = server.requests(.compose)
    XCTAssertEqual(
      composes.count, 2,
      "one combine (at 30 parts, with 2 more under way and a tail, a close would pass 32), then the close's compose"
    )
    let final = try XCTUnwrap(composes.last)
    XCTAssertEqual(final.objectName, "long.bin")
    XCTAssertLessThanOrEqual(try sources(of: final), 32)
    XCTAssertGreaterThan(try sources(of: final), 1)
    XCTAssertEqual(server.store.componentCount("long.bin"), 40)
    try await waitForNoParts()
  }

  /// The default: 16 parts at once, which a bound of 16 parts lets run. A
  /// file of 23 parts and a tail (a 184 MiB file in 8 MiB parts) is never
  /// combined: its close is one compose of 24 sources.
  func testSixteenPartsGoUpAtOnceAndAFileThatFitsOneComposeIsNotCombined() async throws {
    let uploads = try UploadPolicy(
      threshold: 256 << 10, chunkSize: 256 << 10, compositeThreshold: 1 << 20, partSize: 256 << 10)
    XCTAssertEqual(uploads.parallelParts, 16)
    var retry = RetryPolicy()
    retry.attemptTimeout = 60
    let client = CloudStorageClient(
      bucket: "demo", endpoint: try Endpoint(server.endpoint), http: http, tokens: nil, retry: retry,
      uploads: uploads, logger: quietLogger)
    fs = makeWritingFileSystem(client, stageDirectory: stages, streamDiskLimit: 16 << 18)
    // The parts answer slowly, so the 16 are under way together.
    server.injectFaults(Array(repeating: .stall(.milliseconds(300)), count: 16), for: .upload)
    let data = pattern(23 << 18 + 100 << 10)
    let (inode, handle) = try await fs.createFile("wide.bin")
    try await write(inode, handle, data, at: 0)
    try await fs.close(inode, handle)
    XCTAssertEqual(server.store.data("wide.bin"), data)
    XCTAssertEqual(server.peakInFlight(.upload), 16, "16 parts at once, no more")
    let composes = server.requests(.compose)
    XCTAssertEqual(composes.count, 1, "no combine")
    XCTAssertEqual(try sources(of: try XCTUnwrap(composes.first)), 24)
    try await waitForNoParts()
  }

  func testACloseComposesWithoutWaitingForACombineWhenItsPiecesFitOneCompose() async throws {
    // 30 parts: once 30 are under way a combine starts; it hangs here, and the
    // close composes the 30 parts themselves instead of waiting for it. The
    // close's compose hangs longer: the combine ends meanwhile, and no other
    // starts (it would delete parts the compose is reading).
    server.injectFaults(
      [.stall(.seconds(1))],
      when: { $0.kind == .compose && $0.objectName?.hasPrefix(UploadPolicy.partDirectory) == true })
    server.injectFaults([.stall(.seconds(3))], when: { $0.kind == .compose && $0.objectName == "soon.bin" })
    let data = pattern(30 << 18)
    let (inode, handle) = try await fs.createFile("soon.bin")
    try await write(inode, handle, data, at: 0)
    try await fs.close(inode, handle)
    XCTAssertEqual(server.store.data("soon.bin"), data)
    let final = try XCTUnwrap(server.requests(.compose).last { $0.objectName == "soon.bin" })
    XCTAssertEqual(try sources(of: final), 30, "the parts themselves: the close did not wait for the combine")
    XCTAssertEqual(
      server.requests(.compose).count, 2, "the combine, and the close's compose: no combine after it")
    // The combine's result comes too late for anything: it is deleted too.
    try await waitForNoParts()
  }

  /// A file of exactly 32 parts has no bytes after them: its close composes
  /// the 32 parts themselves, without waiting for the combine under way.
  func testACloseOfExactly32PartsDoesNotWaitForACombine() async throws {
    server.injectFaults(
      [.stall(.seconds(3))],
      when: { $0.kind == .compose && $0.objectName?.hasPrefix(UploadPolicy.partDirectory) == true })
    let data = pattern(32 << 18)
    let (inode, handle) = try await fs.createFile("even.bin")
    try await write(inode, handle, data, at: 0)
    let start = ContinuousClock.now
    try await fs.close(inode, handle)
    let seconds = (ContinuousClock.now - start) / .seconds(1)
    XCTAssertEqual(server.store.data("even.bin"), data)
    let final = try XCTUnwrap(server.requests(.compose).last { $0.objectName == "even.bin" })
    XCTAssertEqual(try sources(of: final), 32, "the parts themselves: the close did not wait for the combine")
    XCTAssertLessThan(seconds, 2.5, "the close did not wait out the combine's stall")
    try await waitForNoParts()
  }

  func testASmallFileAndOneBelowTheThresholdAreUnchanged() async throws {
    let small = pattern(100 << 10)
    let (i1, h1) = try await fs.createFile("small.bin")
    try await write(i1, h1, small, at: 0)
    try await fs.close(i1, h1)
    let medium = pattern(600 << 10)
    let (i2, h2) = try await fs.createFile("medium.bin")
    try await write(i2, h2, medium, at: 0)
    try await fs.close(i2, h2)
    XCTAssertEqual(server.store.data("small.bin"), small)
    XCTAssertEqual(server.store.data("medium.bin"), medium)
    XCTAssertEqual(server.requests(.compose).count, 0)
    XCTAssertNotNil(server.store.object("medium.bin")?.md5Hash, "not a composite")
  }

  func testAWriteBehindTheStreamBringsTheBytesBack() async throws {
    var data = pattern(4 << 20)
    let (inode, handle) = try await fs.createFile("f.bin")
    try await write(inode, handle, data, at: 0)
    XCTAssertFalse(parts.isEmpty)
    let patch = [UInt8](repeating: 0xAB, count: 5000)
    try await write(inode, handle, patch, at: 100_000)
    data.replaceSubrange(100_000..<105_000, with: patch)
    let more = pattern(1 << 20, seed: 3)
    try await write(inode, handle, more, at: data.count)
    data += more
    try await fs.close(inode, handle)
    XCTAssertEqual(server.store.data("f.bin"), data)
    try await waitForNoParts()
  }

  func testTruncatingDownThenUpKeepsExactlyTheBytes() async throws {
    let data = pattern(4 << 20)
    let (inode, handle) = try await fs.createFile("t.bin")
    try await write(inode, handle, data, at: 0)
    _ = try await fs.setattr(inode: inode, handle: handle, changes: AttributeChanges(size: 3_000_001))
    _ = try await fs.setattr(inode: inode, handle: handle, changes: AttributeChanges(size: 3_500_000))
    let expected = Array(data[0..<3_000_001]) + [UInt8](repeating: 0, count: 499_999)
    let staged = try await fs.readAll(inode, handle)
    XCTAssertEqual(staged, expected)
    try await fs.close(inode, handle)
    XCTAssertEqual(server.store.data("t.bin"), expected)
    try await waitForNoParts()
  }

  func testTruncatingToZeroDropsTheStreamAndStartsAgain() async throws {
    let (inode, handle) = try await fs.createFile("z.bin")
    try await write(inode, handle, pattern(3 << 20), at: 0)
    _ = try await fs.setattr(inode: inode, handle: handle, changes: AttributeChanges(size: 0))
    let data = pattern(3 << 20, seed: 9)
    try await write(inode, handle, data, at: 0)
    try await fs.close(inode, handle)
    XCTAssertEqual(server.store.data("z.bin"), data)
    try await waitForNoParts()
  }

  func testReadingAnUploadedPartGivesTheBytesWritten() async throws {
    var data = pattern(4 << 20)
    let (inode, handle) = try await fs.createFile("r.bin")
    try await write(inode, handle, data, at: 0)
    let read = try await fs.read(inode: inode, handle: handle, offset: 0, size: 65536)
    XCTAssertEqual(read.flatMap { Array($0.readableBytesView) }, Array(data[0..<65536]))
    let whole = try await fs.readAll(inode, handle)
    XCTAssertEqual(whole, data)
    let more = pattern(2 << 20, seed: 5)
    try await write(inode, handle, more, at: data.count)
    data += more
    try await fs.close(inode, handle)
    XCTAssertEqual(server.store.data("r.bin"), data)
    try await waitForNoParts()
  }

  func testTwoHandlesSeeAndStoreExactlyWhatWasWritten() async throws {
    var data = pattern(3 << 20)
    let (inode, first) = try await fs.createFile("two.bin")
    try await write(inode, first, data, at: 0)
    let second = try await fs.open(inode: inode, flags: O_RDWR).handle
    // Appending through the other handle continues the stream.
    let tail = pattern(1 << 20, seed: 11)
    try await write(inode, second, tail, at: data.count)
    data += tail
    let seen = try await fs.readAll(inode, second)
    XCTAssertEqual(seen, data)
    try await write(inode, second, Array("X".utf8), at: 10)
    data[10] = UInt8(ascii: "X")
    let more = pattern(1 << 20, seed: 13)
    try await write(inode, first, more, at: data.count)
    data += more
    try await fs.close(inode, second)
    try await fs.close(inode, first)
    XCTAssertEqual(server.store.data("two.bin"), data)
    try await waitForNoParts()
  }

  func testAnObjectThatAppearedMeanwhileGivesESTALEAndNoPartsAreLeft() async throws {
    let (inode, handle) = try await fs.createFile("race.bin")
    try await write(inode, handle, pattern(4 << 20), at: 0)
    XCTAssertFalse(parts.isEmpty)
    server.store.put("race.bin", data: Array("theirs".utf8))
    await XCTAssertErrno(.stale) { try await self.fs.flush(inode: inode, handle: handle) }
    XCTAssertEqual(parts, [], "deleted before the close returns")
    XCTAssertEqual(text(server.store.data("race.bin")), "theirs")
    await XCTAssertErrno(.stale) { try await self.fs.flush(inode: inode, handle: handle) }
    fs.release(inode: inode, handle: handle)
  }

  func testAnOverwriteComposesUnderTheOpenedGenerationWithItsMetadata() async throws {
    let old = server.store.put(
      "o.bin", data: [1, 2, 3], contentType: "text/x-big", custom: ["k": "v"])
    let (inode, handle) = try await fs.openFile("o.bin", flags: O_WRONLY | O_TRUNC)
    let data = pattern(3 << 20)
    try await write(inode, handle, data, at: 0)
    try await fs.close(inode, handle)
    XCTAssertEqual(server.requests(.compose).last?.query["ifGenerationMatch"], String(old.generation))
    XCTAssertEqual(server.store.data("o.bin"), data)
    let meta = try XCTUnwrap(server.store.object("o.bin"))
    XCTAssertEqual(meta.contentType, "text/x-big")
    XCTAssertEqual(meta.custom["k"], "v")
    XCTAssertNotNil(meta.custom[Staging.mtimeKey])
    try await waitForNoParts()
  }

  func testFsyncStoresWhatWasWrittenAndLaterPartsComposeOntoIt() async throws {
    let first = pattern(2_500_000)
    let (inode, handle) = try await fs.createFile("sync.bin")
    try await write(inode, handle, first, at: 0)
    try await fs.fsync(inode: inode, handle: handle, dataOnly: false)
    XCTAssertEqual(server.store.data("sync.bin"), first, "fsync: everything written so far is the object")
    try await waitForNoParts()
    let synced = try XCTUnwrap(server.store.object("sync.bin"))
    let second = pattern(2 << 20, seed: 17)
    try await write(inode, handle, second, at: first.count)
    XCTAssertEqual(server.store.data("sync.bin"), first, "later bytes only at the next commit")
    try await fs.close(inode, handle)
    XCTAssertEqual(server.store.data("sync.bin"), first + second)
    XCTAssertEqual(server.requests(.compose).last?.query["ifGenerationMatch"], String(synced.generation))
    try await waitForNoParts()
  }

  /// After an fsync at an offset no mark falls on, the next parts are
  /// summed from the stage as they are read; their combined sum is checked
  /// against the bytes as written before the compose: a byte the staging
  /// disk changed fails the close with EIO and the object stays the one
  /// fsync stored.
  func testAPartSummedFromAChangedStageIsNeverComposed() async throws {
    let first = pattern(2_500_000)
    fs = makeWritingFileSystem(
      try makeClient(quickRetry(attemptTimeout: 60, deadline: 60)), stageDirectory: stages,
      stageFiles: FlippingStageFiles(offset: UInt64(first.count + 300_000)), streamDiskLimit: bound)
    let (inode, handle) = try await fs.createFile("sync.bin")
    try await write(inode, handle, first, at: 0)
    try await fs.fsync(inode: inode, handle: handle, dataOnly: false)
    XCTAssertEqual(server.store.data("sync.bin"), first)
    try await write(inode, handle, pattern(2 << 20, seed: 17), at: first.count)
    let closed = try await outcome(ofClosing: inode, handle, on: fs)
    XCTAssertEqual(closed, "errno \(EIO)")
    XCTAssertTrue(server.store.data("sync.bin") == first, "the object stays what fsync stored")
    try await waitForNoParts()
  }

  func testAnUnlinkedStreamingFileLeavesNoParts() async throws {
    let (inode, handle) = try await fs.createFile("gone.bin")
    try await write(inode, handle, pattern(3 << 20), at: 0)
    XCTAssertFalse(parts.isEmpty)
    let root = try await fs.inode(at: "")
    try await fs.unlink(parent: root, name: "gone.bin")
    try await fs.close(inode, handle)
    try await waitForNoParts()
    XCTAssertNil(server.store.object("gone.bin"))
  }

  func testCRC32CCombinesAsTheServiceComposes() {
    let a = pattern(1000)
    let b = pattern(777, seed: 2)
    let crc = { (bytes: [UInt8]) in bytes.withUnsafeBytes { CRC32C.update(0, $0) } }
    XCTAssertEqual(CRC32C.combine(crc(a), crc(b), lengthB: Int64(b.count)), crc(a + b))
    XCTAssertEqual(CRC32C.combine(crc(a), crc([]), lengthB: 0), crc(a))
  }
}

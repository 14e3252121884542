import CoreMetrics
import IOThreads
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// A stage's second name (the read cache's entry of the bytes just stored)
/// goes before the stage's bytes change: what holds it sees a missing
/// file, never changed bytes.
final class StageLinkTests: XCTestCase {
  private func inode(_ path: String) -> ino_t? {
    var info = stat()
    return lstat(path, &info) == 0 ? info.st_ino : nil
  }

  private func makeStage() throws -> (Stage, String) {
    let path = makeStageDirectory()
    let directory = try StageDirectory(path: path, staged: Meter(label: "test_staged_bytes"))
    return (try directory.makeStage(), path)
  }

  func testAWriteRemovesTheLinkFirst() async throws {
    let (stage, directory) = try makeStage()
    let bytes: [UInt8] = Array(repeating: 7, count: 1000)
    let first = await stage.write(bytes, at: 0)
    XCTAssertEqual(first, 0)
    let linked = directory + "/entry.data"
    XCTAssertTrue(StageSource(stage: stage, size: 1000).link(to: linked))
    XCTAssertEqual(inode(linked), inode(stage.path), "the same file, no copy")
    let second = await stage.write(bytes, at: 10)
    XCTAssertEqual(second, 0)
    XCTAssertNil(inode(linked), "gone before the bytes changed")
  }

  func testATruncateRemovesTheLinkFirst() async throws {
    let (stage, directory) = try makeStage()
    let linked = directory + "/entry.data"
    XCTAssertTrue(stage.link(to: linked))
    let truncated = await stage.truncate(to: 5)
    XCTAssertEqual(truncated, 0)
    XCTAssertNil(inode(linked))
  }

  func testANameNoLongerTheStagesIsLeftAlone() async throws {
    let (stage, directory) = try makeStage()
    let linked = directory + "/entry.data"
    XCTAssertTrue(stage.link(to: linked))
    // The cache dropped the entry and a later read filled a new file there.
    unlink(linked)
    let fd = open(linked, O_WRONLY | O_CREAT, 0o600)
    close(fd)
    let other = inode(linked)
    let truncated = await stage.truncate(to: 5)
    XCTAssertEqual(truncated, 0)
    XCTAssertEqual(inode(linked), other, "not the stage's file: kept")
  }

  /// The stage's file work runs on the I/O pool's threads, not the caller's.
  func testStageFileWorkRunsOnTheIOPool() async throws {
    final class Threads: StageFiles, @unchecked Sendable {
      let names = NSLock()
      var seen: [String] = []
      /// The calling thread's name, as Linux shows it.
      func note() {
        let fd = open("/proc/thread-self/comm", O_RDONLY)
        var name = [UInt8](repeating: 0, count: 32)
        let count = fd < 0 ? 0 : max(Glibc.read(fd, &name, name.count), 0)
        if fd >= 0 { close(fd) }
        names.withLock { seen.append(String(decoding: name.prefix(count), as: UTF8.self)) }
      }
      func write(_ fd: Int32, _ data: UnsafeRawBufferPointer, at offset: UInt64) -> Int32 {
        note()
        return LocalStageFiles().write(fd, data, at: offset)
      }
      func truncate(_ fd: Int32, to size: UInt64) -> Int32 {
        note()
        return LocalStageFiles().truncate(fd, to: size)
      }
    }
    let files = Threads()
    let pool = IOPool(threadCount: 2, byteLimit: 0)
    let directory = try StageDirectory(
      path: makeStageDirectory(), files: files, io: pool, staged: Meter(label: "test_staged_bytes"))
    let stage = try directory.makeStage()
    let written = await stage.write([1, 2, 3, 4], at: 0)
    let truncated = await stage.truncate(to: 3)
    let readBack = try await stage.read(at: 0, count: 10)
    XCTAssertEqual([written, truncated], [0, 0])
    XCTAssertEqual(Array(readBack.readableBytesView), [1, 2, 3])
    XCTAssertEqual(files.names.withLock { files.seen.count }, 2)
    XCTAssertTrue(files.names.withLock { files.seen.allSatisfy { $0.hasPrefix("TP-") } }, "\(files.seen)")
    _ = await pool.shutdown(patience: .seconds(5))
    // Once the pool is gone the work still happens, on the caller's thread.
    let after = await stage.write([5], at: 3)
    XCTAssertEqual(after, 0)
  }
}

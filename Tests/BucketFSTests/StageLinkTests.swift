import CoreMetrics
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

  func testAWriteRemovesTheLinkFirst() throws {
    let (stage, directory) = try makeStage()
    let bytes: [UInt8] = Array(repeating: 7, count: 1000)
    XCTAssertEqual(bytes.withUnsafeBytes { stage.write($0, at: 0) }, 0)
    let linked = directory + "/entry.data"
    XCTAssertTrue(StageSource(stage: stage, size: 1000).link(to: linked))
    XCTAssertEqual(inode(linked), inode(stage.path), "the same file, no copy")
    XCTAssertEqual(bytes.withUnsafeBytes { stage.write($0, at: 10) }, 0)
    XCTAssertNil(inode(linked), "gone before the bytes changed")
  }

  func testATruncateRemovesTheLinkFirst() throws {
    let (stage, directory) = try makeStage()
    let linked = directory + "/entry.data"
    XCTAssertTrue(stage.link(to: linked))
    XCTAssertEqual(stage.truncate(to: 5), 0)
    XCTAssertNil(inode(linked))
  }

  func testANameNoLongerTheStagesIsLeftAlone() throws {
    let (stage, directory) = try makeStage()
    let linked = directory + "/entry.data"
    XCTAssertTrue(stage.link(to: linked))
    // The cache dropped the entry and a later read filled a new file there.
    unlink(linked)
    let fd = open(linked, O_WRONLY | O_CREAT, 0o600)
    close(fd)
    let other = inode(linked)
    XCTAssertEqual(stage.truncate(to: 5), 0)
    XCTAssertEqual(inode(linked), other, "not the stage's file: kept")
  }
}

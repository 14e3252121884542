import FUSE
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

/// A truncate by path (setattr with no handle) of a file another handle
/// has open for writing (docs/SEMANTICS.md#setattr-truncate-times-modes).
final class TruncateByPathTests: XCTestCase {
  /// The other handle's last release lands while the truncate waits for the
  /// file's gate: the truncate holds the staged file as a writer of its own,
  /// so the release discards nothing under it, and its change is stored.
  /// (It used to resize a staged file it did not hold: the release removed
  /// the stage, then the change rewrote the sidecar, "not uploaded", next to
  /// no data file, and was never stored.)
  func testATruncateByPathRacingTheLastWritersReleaseIsStoredAndLeavesNoSidecar() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("docs/readme.txt", data: bytes("hello world"), contentType: "text/plain")
    let stages = makeStageDirectory()
    let fs = makeWritingFileSystem(store, stageDirectory: stages)
    let (inode, handle) = try await fs.openFile("docs/readme.txt", flags: O_RDWR)
    guard let staged = fs.stagedInodes.file(inode: inode) else { return XCTFail("the open staged the file") }
    try await staged.gate.lock()
    let truncate = Task {
      try await fs.setattr(inode: inode, handle: nil, changes: AttributeChanges(size: 5))
    }
    var polls = 0
    while staged.gate.waiting == 0 && polls < 2_000 {
      polls += 1
      try await Task.sleep(nanoseconds: 1_000_000)
    }
    XCTAssertEqual(staged.gate.waiting, 1, "the truncate waits for the gate")
    fs.release(inode: inode, handle: handle)
    await fs.tasks.finish()
    staged.gate.unlock()
    let attributes = try await truncate.value.0
    await fs.tasks.finish()
    XCTAssertEqual(attributes.size, 5)
    XCTAssertEqual(store.data("docs/readme.txt"), bytes("hello"), "the truncate is stored")
    XCTAssertEqual(filesIn(stages), [], "no stage or sidecar left behind")
    XCTAssertEqual(fs.stagedInodes.count, 0, "every stage released")
  }
}

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
    // Something else holds the stage's bytes until `release` ends.
    let (held, release) = AsyncStream<Void>.makeStream()
    let holding = Locked(false)
    let holder = Task {
      try await staged.exclusively {
        holding.withLock { $0 = true }
        for await _ in held {}
      }
    }
    let holds = await eventually { holding.current }
    XCTAssertTrue(holds)
    let truncate = Task {
      try await fs.setattr(inode: inode, handle: nil, changes: AttributeChanges(size: 5))
    }
    var polls = 0
    while staged.waitingForStage == 0 && polls < 2_000 {
      polls += 1
      try await Task.sleep(nanoseconds: 1_000_000)
    }
    XCTAssertEqual(staged.waitingForStage, 1, "the truncate waits for the gate")
    fs.release(inode: inode, handle: handle)
    await fs.tasks.finish()
    release.finish()
    try await holder.value
    let attributes = try await truncate.value.0
    await fs.tasks.finish()
    XCTAssertEqual(attributes.size, 5)
    XCTAssertEqual(store.data("docs/readme.txt"), bytes("hello"), "the truncate is stored")
    XCTAssertEqual(filesIn(stages), [], "no stage or sidecar left behind")
    XCTAssertEqual(fs.stagedInodes.count, 0, "every stage released")
  }
}

/// What a truncate by path stores (docs/SEMANTICS.md#setattr-truncate-times-modes).
final class TruncateMetadataTests: XCTestCase {
  /// From the reference model's seed 785. A truncate to the size a file has
  /// changes nothing and stores nothing, whether or not its bytes are here
  /// (they used to be downloaded and stored again when they were not). One
  /// that changes the size stores a generation that carries the file's
  /// properties, and with its contentType removed, the service's default.
  func testATruncateToTheSameSizeStoresNothingAndOneThatChangesItCarriesTheProperties() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("c", data: bytes("hello"), contentType: "text/plain", cacheControl: "v4")
    let fs = makeWritingFileSystem(store, stageDirectory: makeStageDirectory())
    func truncate(to size: UInt64) async throws -> Int64? {
      let inode = try await fs.lookup(parent: InodeTable.rootInode, name: "c").attributes!.inode
      _ = try await fs.setattr(inode: inode, handle: nil, changes: AttributeChanges(size: size))
      await fs.tasks.finish()
      return store.object("c")?.generation
    }
    let first = store.object("c")?.generation
    let reads = store.calls(.read).count
    let unchanged = try await truncate(to: 5)
    XCTAssertEqual(unchanged, first, "the same size: nothing stored")
    XCTAssertEqual(store.calls(.read).count, reads, "and nothing downloaded")
    let inode = try await fs.lookup(parent: InodeTable.rootInode, name: "c").attributes!.inode
    try await fs.removexattr(inode: inode, name: "user.contentType")
    XCTAssertNil(store.object("c")?.contentType)
    let emptied = try await truncate(to: 0)
    XCTAssertNotEqual(emptied, first)
    XCTAssertEqual(store.data("c"), [])
    XCTAssertEqual(store.object("c")?.contentType, "application/octet-stream")
    XCTAssertEqual(store.object("c")?.cacheControl, "v4")
    let again = try await truncate(to: 0)
    XCTAssertEqual(again, emptied, "empty and emptied again: nothing stored")
  }

  /// The same for a file this mount just created, known from its own
  /// upload: its contentType removed, then truncated to the size it has.
  func testATruncateToTheSizeOfAFileJustCreatedStoresNothing() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    let fs = makeWritingFileSystem(store, stageDirectory: makeStageDirectory())
    let (entry, opened) = try await fs.create(
      parent: InodeTable.rootInode, name: "b", mode: 0o644, flags: O_WRONLY | O_CREAT | O_TRUNC)
    let inode = entry.attributes!.inode
    try await ModelRun.writeAndClose(fs, inode, opened.handle, offset: 0, bytes("daa"))
    await fs.tasks.finish()
    try await fs.removexattr(inode: inode, name: "user.contentType")
    XCTAssertNil(store.object("b")?.contentType)
    let before = store.object("b")?.generation
    _ = try await fs.setattr(inode: inode, handle: nil, changes: AttributeChanges(size: 3))
    await fs.tasks.finish()
    XCTAssertEqual(store.object("b")?.generation, before, "nothing stored")
    XCTAssertNil(store.object("b")?.contentType)
  }
}

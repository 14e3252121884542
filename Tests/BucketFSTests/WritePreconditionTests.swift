import FUSE
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

#if canImport(Glibc)
  import Glibc
#endif

/// Uploads never overwrite someone else's change, errors reach close and
/// fsync, and unsaved stages survive for the next mount
/// (docs/SEMANTICS.md#writes).
final class WritePreconditionTests: XCTestCase {
  var store: InMemoryObjectStore!
  var fs: BucketFileSystem!
  var stages: String!

  override func setUp() async throws {
    store = InMemoryObjectStore(bucket: "demo")
    store.put("notes.txt", data: bytes("v1"))
    stages = makeStageDirectory()
    fs = makeWritingFileSystem(store, stageDirectory: stages)
  }

  private var stageFiles: [String] { filesIn(stages).filter { $0.hasPrefix("stage-") } }

  func testAConcurrentUploadBetweenOpenAndCloseWinsAndTheHandleIsPoisoned() async throws {
    let (inode, handle) = try await fs.openFile("notes.txt", flags: O_WRONLY | O_TRUNC)
    try await fs.writeText(inode, handle, at: 0, "mine")
    store.beforeNext(.upload) { store in _ = store.put("notes.txt", data: bytes("theirs")) }
    await XCTAssertErrno(.stale) { try await self.fs.flush(inode: inode, handle: handle) }
    XCTAssertEqual(text(store.data("notes.txt")), "theirs", "the other upload survives")
    // Poisoned until closed: no more writes or uploads through this file.
    await XCTAssertErrno(.stale) { _ = try await self.fs.writeBytes(inode, handle, at: 4, [1]) }
    await XCTAssertErrno(.stale) { try await self.fs.fsync(inode: inode, handle: handle, dataOnly: false) }
    XCTAssertEqual(store.calls(.upload).count, 1)
    fs.release(inode: inode, handle: handle)
    XCTAssertEqual(stageFiles.count, 2, "the stage and its sidecar are kept")
    let data = stageFiles.first { !$0.hasSuffix(".json") }!
    XCTAssertEqual(text(Array(try String(contentsOfFile: stages + "/" + data, encoding: .utf8).utf8)), "mine")
    // A new open starts over from the object as it is now.
    let (again, second) = try await fs.openFile("notes.txt", flags: O_WRONLY | O_APPEND)
    XCTAssertNotEqual(again, 0)
    try await fs.close(again, second)
  }

  func testANewFileWhoseNameAppearedMeanwhileIsNotOverwritten() async throws {
    let (inode, handle) = try await fs.createFile("fresh.txt")
    try await fs.writeText(inode, handle, at: 0, "mine")
    store.put("fresh.txt", data: bytes("someone else's"))
    await XCTAssertErrno(.stale) { try await self.fs.flush(inode: inode, handle: handle) }
    XCTAssertEqual(store.calls(.upload), [.upload("fresh.txt", ifGenerationMatch: 0)])
    XCTAssertEqual(text(store.data("fresh.txt")), "someone else's")
    fs.release(inode: inode, handle: handle)
  }

  func testAFailedUploadFailsCloseLeavesNoObjectAndALaterFsyncCanStoreIt() async throws {
    let (inode, handle) = try await fs.createFile("retry.txt")
    try await fs.writeText(inode, handle, at: 0, "payload")
    store.injectFaults([.unavailable("503 past the retry deadline")], for: .upload)
    await XCTAssertErrno(.io) { try await self.fs.flush(inode: inode, handle: handle) }
    XCTAssertNil(store.object("retry.txt"), "no partial or empty object")
    try await fs.fsync(inode: inode, handle: handle, dataOnly: false)
    XCTAssertEqual(text(store.data("retry.txt")), "payload")
    try await fs.close(inode, handle)
  }

  func testAccessDeniedIsEACCESAndAClosedFileKeepsItsBytes() async throws {
    let (inode, handle) = try await fs.createFile("denied.txt")
    try await fs.writeText(inode, handle, at: 0, "payload")
    store.injectFaults([.accessDenied("403")], for: .upload)
    await XCTAssertErrno(.accessDenied) { try await self.fs.close(inode, handle) }
    XCTAssertNil(store.object("denied.txt"))
    XCTAssertEqual(stageFiles.count, 2, "never uploaded, so kept for the user")
  }

  func testAnUnlinkedFileKeepsItsBytesForItsHandlesButNeverUploads() async throws {
    let (inode, handle) = try await fs.createFile("gone.txt")
    try await fs.writeText(inode, handle, at: 0, "scratch")
    try XCTUnwrap(fs.stagedInodes.file(inode: inode)).noteUnlinked()
    await XCTAssertEqualAsync(text(try await fs.readAll(inode, handle)), "scratch")
    try await fs.close(inode, handle)
    XCTAssertEqual(store.calls(.upload), [])
    // Removed apart from the release, which runs on the FUSE loop thread.
    let removed = await eventually { self.stageFiles.isEmpty }
    XCTAssertTrue(removed, "its bytes go with its last handle, as on a local filesystem: \(stageFiles)")
  }

  func testARenamedStagedFileUploadsToTheNewKeyOverTheGivenGeneration() async throws {
    let (inode, handle) = try await fs.createFile("draft.txt")
    try await fs.writeText(inode, handle, at: 0, "draft")
    try await fs.uploader.commit(XCTUnwrap(fs.stagedInodes.file(inode: inode)))
    let stored = store.object("draft.txt")!
    // What the namespace layer does: a server-side move, then tells the stage.
    let moved = try await store.move(
      "draft.txt", sourceGeneration: stored.generation, to: "final.txt", ifGenerationMatch: 0)
    try XCTUnwrap(fs.stagedInodes.file(inode: inode)).noteRenamed(
      to: "final.txt", generation: moved.generation)
    try await fs.writeText(inode, handle, at: 5, "+more")
    store.resetCalls()
    try await fs.close(inode, handle)
    XCTAssertEqual(store.calls(.upload), [.upload("final.txt", ifGenerationMatch: moved.generation)])
    XCTAssertEqual(text(store.data("final.txt")), "draft+more")
    XCTAssertNil(store.object("draft.txt"))
  }

  func testCommitStagedUploadsOnlyWhenDirty() async throws {
    let (inode, handle) = try await fs.createFile("c.txt")
    try await fs.uploader.commit(XCTUnwrap(fs.stagedInodes.file(inode: inode)))
    try await fs.uploader.commit(XCTUnwrap(fs.stagedInodes.file(inode: inode)))
    XCTAssertEqual(store.calls(.upload).count, 1)
    try await fs.close(inode, handle)
    XCTAssertEqual(store.calls(.upload).count, 1)
  }

  func testLeftoverStagesAreListedNeverUploadedAndStoredOnesAreCleanedUp() async throws {
    // A file written but never closed, as a kill -9 leaves it…
    let (inode, handle) = try await fs.createFile("unsaved.txt")
    try await fs.writeText(inode, handle, at: 0, "precious")
    // …and one stored and still open (nothing would be lost).
    let (other, otherHandle) = try await fs.createFile("saved.txt")
    try await fs.fsync(inode: other, handle: otherHandle, dataOnly: false)
    _ = (inode, handle, otherHandle)
    // The stages of this (live) process are not leftovers; as another,
    // dead process's they are.
    XCTAssertEqual(Recovery.leftovers(in: stages), [])
    let dead = "2147483646"
    for name in stageFiles {
      let parts = name.split(separator: "-", maxSplits: 2)
      XCTAssertEqual(rename(stages + "/" + name, stages + "/stage-\(dead)-" + parts[2]), 0)
    }
    store.resetCalls()
    let leftovers = Recovery.leftovers(in: stages)
    XCTAssertEqual(leftovers.map(\.key), ["unsaved.txt"])
    XCTAssertEqual(leftovers.first?.size, 8)
    XCTAssertEqual(leftovers.first?.baseGeneration, 0)
    XCTAssertEqual(store.calls, [], "never uploaded")
    XCTAssertEqual(stageFiles.count, 2, "the stored one is gone, the unsaved one stays")
    XCTAssertEqual(
      Recovery.leftovers(in: stages).map(\.key), ["unsaved.txt"], "and is listed again next time")
    // A mount of something else under the same cache directory lists it too.
    let cache = makeStageDirectory()
    defer { try? FileManager.default.removeItem(atPath: cache) }
    let elsewhere = cache + "/bucket-0000000000000001"
    XCTAssertEqual(mkdir(elsewhere, 0o700), 0)
    let path = leftovers[0].path
    let name = String(path[path.index(after: path.lastIndex(of: "/")!)...])
    XCTAssertEqual(link(path, elsewhere + "/" + name), 0)
    XCTAssertEqual(link(path + ".json", elsewhere + "/" + name + ".json"), 0)
    XCTAssertEqual(
      Recovery.leftovers(under: cache + "/", except: cache + "/another-mount").map(\.key), ["unsaved.txt"])
    XCTAssertEqual(Recovery.leftovers(under: cache, except: elsewhere), [])
  }

  func testTheStagingDirectoryIsPrivate() async throws {
    let (inode, handle) = try await fs.createFile("p.txt")
    var info = stat()
    XCTAssertEqual(stat(stages, &info), 0)
    XCTAssertEqual(info.st_mode & 0o777, 0o700)
    try await fs.close(inode, handle)
  }

  func testTheStageDirectoryIsOnePerBucketPrefixAndMountpoint() {
    let a = Recovery.stageDirectory(cacheDirectory: "/c", bucket: "b", prefix: "", mountpoint: "/mnt/x")
    let b = Recovery.stageDirectory(cacheDirectory: "/c/", bucket: "b", prefix: "", mountpoint: "/mnt/x")
    let c = Recovery.stageDirectory(cacheDirectory: "/c", bucket: "b", prefix: "p/", mountpoint: "/mnt/x")
    XCTAssertEqual(a, b)
    XCTAssertNotEqual(a, c)
    XCTAssertTrue(a.hasPrefix("/c/b-"))
  }
}

extension WritePreconditionTests {
  func testAHandleOfAnUnlinkedFileKeepsItsOwnBytesWhenTheNameIsMadeAgain() async throws {
    let (inode, old) = try await fs.createFile("again.txt")
    try await fs.writeText(inode, old, at: 0, "old bytes")
    try XCTUnwrap(fs.stagedInodes.file(inode: inode)).noteUnlinked()
    // The same name made anew gets the same inode number (a hash of the name).
    let (again, new) = try await fs.createFile("again.txt")
    XCTAssertEqual(again, inode)
    try await fs.writeText(again, new, at: 0, "new")
    await XCTAssertEqualAsync(text(try await fs.readAll(inode, old)), "old bytes")
    _ = try await fs.setattr(inode: inode, handle: old, changes: AttributeChanges(size: 3))
    await XCTAssertEqualAsync(text(try await fs.readAll(again, new)), "new")
    try await fs.close(inode, old)
    try await fs.close(again, new)
    XCTAssertEqual(store.calls(.upload), [.upload("again.txt", ifGenerationMatch: 0)])
    XCTAssertEqual(text(store.data("again.txt")), "new")
  }
}

import FUSE
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// unlink, mkdir and rmdir against the exact in-process model of the service.
final class NamespaceTests: XCTestCase {
  var store: InMemoryObjectStore!
  var fs: BucketFileSystem!

  override func setUp() async throws {
    store = InMemoryObjectStore(bucket: "demo")
    fs = makeFileSystem(store)
  }

  // MARK: unlink

  func testUnlinkDeletesTheGenerationTheMountKnows() async throws {
    let a = store.put("dir/a.txt", data: bytes("a"))
    store.put("dir/b.txt", data: bytes("b"))
    let dir = try await fs.inode(at: "dir")
    _ = try await fs.inode(at: "dir/a.txt")
    store.resetCalls()
    try await fs.unlink(parent: dir, name: "a.txt")
    XCTAssertEqual(store.calls, [.delete("dir/a.txt", ifGenerationMatch: a.generation)])
    XCTAssertNil(store.object("dir/a.txt"))
    await XCTAssertEqualAsync(try await fs.names(of: dir), ["b.txt"])
    await XCTAssertNilAsync(try await fs.lookup(parent: dir, name: "a.txt").attributes)
  }

  func testUnlinkOfANameTheMountHasNotSeenAsksFirst() async throws {
    let a = store.put("a.txt", data: bytes("a"))
    try await fs.unlink(parent: 1, name: "a.txt")
    XCTAssertEqual(store.calls(.delete), [.delete("a.txt", ifGenerationMatch: a.generation)])
    XCTAssertEqual(store.names, [])
  }

  func testUnlinkOfAVersionChangedMeanwhileDeletesNothing() async throws {
    store.put("a.txt", data: bytes("old"))
    let inode = try await fs.inode(at: "a.txt")
    store.beforeNext(.delete) { $0.put("a.txt", data: bytes("theirs")) }
    await XCTAssertErrno(.stale) { try await self.fs.unlink(parent: 1, name: "a.txt") }
    XCTAssertEqual(store.data("a.txt"), bytes("theirs"), "someone else's version survives")
    // The mount now knows their version: a repeated rm removes it.
    let theirs = store.object("a.txt")!
    await XCTAssertEqualAsync(try await fs.getattr(inode: inode).0.size, 6)
    store.resetCalls()
    try await fs.unlink(parent: 1, name: "a.txt")
    XCTAssertEqual(store.calls, [.delete("a.txt", ifGenerationMatch: theirs.generation)])
  }

  func testUnlinkOfAMissingFileIsENOENT() async throws {
    await XCTAssertErrno(.noEntry) { try await self.fs.unlink(parent: 1, name: "missing") }
    store.put("gone.txt", data: bytes("x"))
    _ = try await fs.inode(at: "gone.txt")
    store.delete("gone.txt")
    await XCTAssertErrno(.noEntry) { try await self.fs.unlink(parent: 1, name: "gone.txt") }
    XCTAssertEqual(store.calls(.delete).count, 1)
  }

  func testUnlinkOfADirectoryIsEISDIR() async throws {
    store.put("d/x", data: bytes("x"))
    await XCTAssertErrno(.isDirectory) { try await self.fs.unlink(parent: 1, name: "d") }
    _ = try await fs.inode(at: "d")
    await XCTAssertErrno(.isDirectory) { try await self.fs.unlink(parent: 1, name: "d") }
    XCTAssertEqual(store.calls(.delete), [])
    XCTAssertEqual(store.names, ["d/x"])
  }

  func testAFileUnlinkedWhileHeldKeepsItsAttributesAndANewFileGetsItsOwnInode() async throws {
    store.put("a.txt", data: bytes("abc"))
    let old = try await fs.inode(at: "a.txt")
    try await fs.unlink(parent: 1, name: "a.txt")
    store.put("a.txt", data: bytes("a new file"))
    let new = try await fs.inode(at: "a.txt")
    XCTAssertNotEqual(new, old, "the kernel still holds the unlinked one")
    await XCTAssertEqualAsync(try await fs.getattr(inode: old).0.size, 3)
    await XCTAssertEqualAsync(try await fs.getattr(inode: new).0.size, 10)
    fs.forget(inode: old, count: 1)
    await XCTAssertEqualAsync(try await fs.inode(at: "a.txt"), new)
  }

  // MARK: mkdir

  func testMkdirCreatesThePlaceholderOnlyIfAbsent() async throws {
    let entry = try await fs.mkdir(parent: 1, name: "new", mode: 0o755)
    XCTAssertEqual(entry.attributes?.kind, .directory)
    XCTAssertEqual(store.calls(.upload), [.upload("new/", ifGenerationMatch: 0)])
    XCTAssertEqual(store.object("new/")?.size, 0)
    await XCTAssertEqualAsync(try await fs.names(of: 1), ["new"])
    await XCTAssertEqualAsync(try await fs.inode(at: "new"), entry.attributes!.inode)
    await XCTAssertEqualAsync(try await fs.names(of: entry.attributes!.inode), [])
    // mkdir -p's second level.
    let sub = try await fs.mkdir(parent: entry.attributes!.inode, name: "sub", mode: 0o755)
    XCTAssertNotNil(sub.attributes)
    XCTAssertEqual(store.names, ["new/", "new/sub/"])
  }

  func testMkdirOfAnExistingNameIsEEXIST() async throws {
    store.put("file", data: bytes("x"))
    store.put("implicit/child", data: bytes("x"))
    store.put("empty/", data: [])
    for name in ["file", "implicit", "empty"] {
      await XCTAssertErrno(.exists) { _ = try await self.fs.mkdir(parent: 1, name: name, mode: 0o755) }
    }
    XCTAssertEqual(store.calls(.upload), [])
    // Created by someone else between the check and the upload.
    store.beforeNext(.upload) { $0.put("late/", data: []) }
    await XCTAssertErrno(.exists) { _ = try await self.fs.mkdir(parent: 1, name: "late", mode: 0o755) }
    XCTAssertEqual(store.calls(.upload), [.upload("late/", ifGenerationMatch: 0)])
  }

  func testMkdirNamesAreCheckedBeforeAnyRequest() async throws {
    await XCTAssertErrno(.nameTooLong) {
      _ = try await self.fs.mkdir(parent: 1, name: String(repeating: "n", count: 256), mode: 0o755)
    }
    await XCTAssertErrno(.invalid) { _ = try await self.fs.mkdir(parent: 1, name: "..", mode: 0o755) }
    // Deep enough that the object name passes the service's 1024 bytes.
    var parent: UInt64 = 1
    for level in 0..<4 {
      let name = String(repeating: Character(String(level)), count: 250)
      parent = try await fs.mkdir(parent: parent, name: name, mode: 0o755).attributes!.inode
    }
    store.resetCalls()
    await XCTAssertErrno(.nameTooLong) {
      _ = try await self.fs.mkdir(parent: parent, name: String(repeating: "x", count: 30), mode: 0o755)
    }
    // 1,004 bytes of parent: a placeholder of 1,024 bytes (with its `/`) is the limit.
    await XCTAssertErrno(.nameTooLong) {
      _ = try await self.fs.mkdir(parent: parent, name: String(repeating: "x", count: 20), mode: 0o755)
    }
    XCTAssertEqual(store.calls, [])
    _ = try await fs.mkdir(parent: parent, name: String(repeating: "x", count: 19), mode: 0o755)
    // A file name of exactly 1,024 bytes is valid: a rename may make one.
    store.put("file", data: [1])
    try await fs.rename(
      parent: 1, name: "file", newParent: parent, newName: String(repeating: "f", count: 20), flags: [])
    XCTAssertTrue(
      store.names.contains { $0.utf8.count == 1024 && $0.hasSuffix("/" + String(repeating: "f", count: 20)) })
    await XCTAssertErrno(.nameTooLong) {
      try await self.fs.rename(
        parent: parent, name: String(repeating: "f", count: 20), newParent: parent,
        newName: String(repeating: "f", count: 21), flags: [])
    }
  }

  // MARK: rmdir

  func testRmdirDeletesTheEmptyDirectorysPlaceholder() async throws {
    let placeholder = store.put("d/", data: [])
    _ = try await fs.inode(at: "d")
    store.resetCalls()
    try await fs.rmdir(parent: 1, name: "d")
    XCTAssertEqual(
      store.calls,
      [.list(prefix: "d/", pageToken: nil), .delete("d/", ifGenerationMatch: placeholder.generation)])
    XCTAssertEqual(store.names, [])
    await XCTAssertEqualAsync(try await fs.names(of: 1), [])
  }

  func testRmdirOfANonEmptyDirectoryIsENOTEMPTY() async throws {
    store.put("d/", data: [])
    store.put("d/x", data: bytes("x"))
    store.put("hidden/", data: [])
    store.put("hidden//odd", data: bytes("a name no listing shows"))
    store.put("nested/sub/x", data: bytes("x"))
    for name in ["d", "hidden", "nested"] {
      await XCTAssertErrno(Errno(ENOTEMPTY)) { try await self.fs.rmdir(parent: 1, name: name) }
    }
    XCTAssertEqual(store.calls(.delete), [])
    XCTAssertEqual(store.names.count, 5)
  }

  func testRmdirOfAFileIsENOTDIRAndOfNothingENOENT() async throws {
    store.put("f", data: bytes("x"))
    await XCTAssertErrno(.notDirectory) { try await self.fs.rmdir(parent: 1, name: "f") }
    _ = try await fs.inode(at: "f")
    await XCTAssertErrno(.notDirectory) { try await self.fs.rmdir(parent: 1, name: "f") }
    await XCTAssertErrno(.noEntry) { try await self.fs.rmdir(parent: 1, name: "nothing") }
    XCTAssertEqual(store.names, ["f"])
  }

  func testRmdirOfADirectoryWhoseLastObjectWentSucceeds() async throws {
    // rm -r of a directory without a placeholder: unlinking its last file
    // makes it vanish from the bucket, and the final rmdir must not fail.
    store.put("d/only", data: bytes("x"))
    let d = try await fs.inode(at: "d")
    try await fs.unlink(parent: d, name: "only")
    store.resetCalls()
    try await fs.rmdir(parent: 1, name: "d")
    XCTAssertEqual(store.calls(.delete), [])
  }

  func testRmdirRetriesWhenThePlaceholderIsReplacedMeanwhile() async throws {
    store.put("d/", data: [])
    _ = try await fs.inode(at: "d")
    store.beforeNext(.delete) { $0.put("d/", data: []) }
    try await fs.rmdir(parent: 1, name: "d")
    XCTAssertEqual(store.calls(.delete).count, 2)
    XCTAssertEqual(store.names, [])
  }

  func testAReadOnlyMountChangesNothing() async throws {
    fs = makeFileSystem(store, readOnly: true)
    store.put("d/", data: [])
    store.put("f", data: [])
    await XCTAssertErrno(.readOnly) { try await self.fs.unlink(parent: 1, name: "f") }
    await XCTAssertErrno(.readOnly) { try await self.fs.rmdir(parent: 1, name: "d") }
    await XCTAssertErrno(.readOnly) { _ = try await self.fs.mkdir(parent: 1, name: "n", mode: 0o755) }
    await XCTAssertErrno(.readOnly) {
      try await self.fs.rename(parent: 1, name: "f", newParent: 1, newName: "g", flags: [])
    }
    XCTAssertEqual(store.calls, [])
  }

  // MARK: Listings

  func testKeptTreeListingsNeverShowARemovedNameOrMissANewOne() async throws {
    WalkTests.seedTree(store, top: 3, middle: 1, files: 2)
    _ = try await fs.names(of: InodeTable.rootInode)
    let d0 = try await fs.inode(at: "d0")
    let d1 = try await fs.inode(at: "d1")
    let d2 = try await fs.inode(at: "d2")
    // A descent into d0 keeps d1's and d2's subtrees for the walk's next opendirs.
    await XCTAssertEqualAsync(try await fs.names(of: d0), ["m0"])
    let walks = fs.directories.walks
    let settled = await eventually { walks.fetchesUnderWay == 0 }
    XCTAssertTrue(settled)
    // The walk goes on into d1, which keeps listings of what comes next.
    await XCTAssertEqualAsync(try await fs.names(of: d1), ["m0"])
    let settledAgain = await eventually { walks.fetchesUnderWay == 0 }
    XCTAssertTrue(settledAgain)
    let d1m0 = try await fs.inode(at: "d1/m0")
    let d2m0 = try await fs.inode(at: "d2/m0")
    try await fs.unlink(parent: d1m0, name: "f0")
    _ = try await fs.mkdir(parent: d1, name: "new", mode: 0o755)
    try await fs.rename(parent: d2m0, name: "f1", newParent: d1m0, newName: "moved", flags: [])
    try await fs.rename(parent: d2, name: "m0", newParent: d2, newName: "m1", flags: [])
    await XCTAssertEqualAsync(try await fs.names(of: d1), ["m0", "new"])
    await XCTAssertEqualAsync(try await fs.names(of: d1m0), ["f1", "moved"])
    await XCTAssertEqualAsync(try await fs.names(of: d2), ["m1"])
    await XCTAssertEqualAsync(try await fs.names(of: d2m0), ["f0"])
  }
}

import FUSE
import Foundation
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// rename of files: server-side, preconditions on both names, races with
/// another writer, and the errnos a local filesystem gives.
final class NamespaceRenameTests: XCTestCase {
  var store: InMemoryObjectStore!
  var fs: BucketFileSystem!

  override func setUp() async throws {
    store = InMemoryObjectStore(bucket: "demo")
    fs = makeFileSystem(store)
  }

  private func rename(_ from: String, _ to: String, flags: RenameFlags = []) async throws {
    func split(_ path: String) async throws -> (UInt64, String) {
      let parts = path.split(separator: "/")
      let parent = try await fs.inode(at: parts.dropLast().joined(separator: "/"))
      return (parent, String(parts.last!))
    }
    let (parent, name) = try await split(from)
    let (newParent, newName) = try await split(to)
    try await fs.rename(parent: parent, name: name, newParent: newParent, newName: newName, flags: flags)
  }

  func testRenameMovesServerSideAndTheKernelKeepsTheInode() async throws {
    let a = store.put(
      "dir/a.txt", data: bytes("hello"), contentType: "text/plain",
      custom: ["k": "v", "goog-reserved-file-mtime": "1000000000"])
    store.put("other/", data: [])
    let inode = try await fs.inode(at: "dir/a.txt")
    store.resetCalls()
    try await rename("dir/a.txt", "other/b.txt")
    XCTAssertEqual(store.calls(.move), [.move("dir/a.txt", to: "other/b.txt", ifGenerationMatch: 0)])
    XCTAssertEqual(store.calls(.copy) + store.calls(.delete) + store.calls(.upload), [])
    XCTAssertNil(store.object("dir/a.txt"))
    let b = try XCTUnwrap(store.object("other/b.txt"))
    XCTAssertEqual(store.data("other/b.txt"), bytes("hello"))
    XCTAssertEqual(b.contentType, "text/plain")
    XCTAssertEqual(b.custom, a.custom, "the name's metadata comes with the object")
    // The moved dentry keeps its inode number, now answering for the new name.
    await XCTAssertEqualAsync(try await fs.inode(at: "other/b.txt"), inode)
    await XCTAssertEqualAsync(try await fs.getattr(inode: inode).0.size, 5)
    await XCTAssertEqualAsync(
      String(decoding: try await fs.getxattr(inode: inode, name: "user.fullPath"), as: UTF8.self),
      "other/b.txt")
    await XCTAssertEqualAsync(try await fs.names(of: fs.inode(at: "dir")), [])
    await XCTAssertNilAsync(try await fs.lookup(parent: fs.inode(at: "dir"), name: "a.txt").attributes)
  }

  func testWithoutMoveItCopiesWithPreconditionsThenDeletesTheSourceGeneration() async throws {
    store.supportsMove = false
    let a = store.put("a", data: bytes("1"))
    let c = store.put("c", data: bytes("3"))
    _ = try await fs.inode(at: "a")
    store.resetCalls()
    try await rename("a", "b")
    // The destination is probed with two requests at once, in either order.
    XCTAssertEqual(
      Set(store.calls.prefix(2).map(\.description)), ["metadata(b)", "list(b/, token: nil)"])
    XCTAssertEqual(
      Array(store.calls.dropFirst(2)),
      [
        .move("a", to: "b", ifGenerationMatch: 0),
        .copy("a", to: "b", ifGenerationMatch: 0),
        .delete("a", ifGenerationMatch: a.generation),
      ])
    XCTAssertEqual(store.data("b"), bytes("1"))
    // The store remembers that the bucket cannot move (the client does, and
    // answers at once: CloudStorageTests); the mount keeps no copy of that
    // fact and asks it again.
    store.resetCalls()
    try await rename("c", "d")
    XCTAssertEqual(store.calls(.move).count, 1)
    XCTAssertEqual(store.calls(.delete), [.delete("c", ifGenerationMatch: c.generation)])
    XCTAssertEqual(store.names, ["b", "d"])
  }

  func testASourceTheMountDoesNotHoldIsAskedForOnce() async throws {
    store.put("a", data: bytes("1"))
    store.resetCalls()
    try await rename("a", "b")
    XCTAssertEqual(store.calls(.metadata).filter { $0 == .metadata("a") }.count, 1)
    XCTAssertEqual(store.calls(.list).filter { $0 == .list(prefix: "a/", pageToken: nil) }.count, 1)
    XCTAssertEqual(store.calls(.move), [.move("a", to: "b", ifGenerationMatch: 0)])
    XCTAssertEqual(store.data("b"), bytes("1"))
    XCTAssertEqual(store.names, ["b"])
  }

  func testReplacingAFileNamesItsGeneration() async throws {
    store.put("new", data: bytes("new bytes"))
    let old = store.put("old", data: bytes("old bytes"))
    try await rename("new", "old")
    XCTAssertEqual(store.calls(.move), [.move("new", to: "old", ifGenerationMatch: old.generation)])
    XCTAssertEqual(store.names, ["old"])
    XCTAssertEqual(store.data("old"), bytes("new bytes"))
  }

  func testRenameFlags() async throws {
    store.put("a", data: bytes("a"))
    store.put("b", data: bytes("b"))
    await XCTAssertErrno(.exists) { try await self.rename("a", "b", flags: .noReplace) }
    await XCTAssertErrno(.invalid) { try await self.rename("a", "b", flags: .exchange) }
    XCTAssertEqual(store.calls(.move) + store.calls(.copy), [])
    try await rename("a", "c", flags: .noReplace)
    XCTAssertEqual(store.names, ["b", "c"])
  }

  func testTheErrnosALocalFilesystemGives() async throws {
    store.put("file", data: bytes("f"))
    store.put("other", data: bytes("o"))
    store.put("dir/x", data: bytes("x"))
    store.put("empty/", data: [])
    await XCTAssertErrno(.isDirectory) { try await self.rename("file", "dir") }
    await XCTAssertErrno(.isDirectory) { try await self.rename("file", "empty") }
    await XCTAssertErrno(.notDirectory) { try await self.rename("dir", "file") }
    await XCTAssertErrno(Errno(ENOTEMPTY)) { try await self.rename("empty", "dir") }
    await XCTAssertErrno(.invalid) { try await self.rename("dir", "dir/inside") }
    await XCTAssertErrno(.noEntry) {
      try await self.fs.rename(parent: 1, name: "nothing", newParent: 1, newName: "x", flags: [])
    }
    await XCTAssertErrno(.nameTooLong) {
      try await self.fs.rename(
        parent: 1, name: "file", newParent: 1, newName: String(repeating: "n", count: 256), flags: [])
    }
    await XCTAssertErrno(.invalid) {
      try await self.fs.rename(parent: 1, name: "file", newParent: 1, newName: "..", flags: [])
    }
    XCTAssertEqual(store.calls(.move) + store.calls(.copy) + store.calls(.delete), [])
    // Onto itself: nothing to do.
    try await rename("file", "file")
    XCTAssertEqual(store.names, ["dir/x", "empty/", "file", "other"])
  }

  func testASourceChangedMeanwhileIsNotRenamed() async throws {
    for supportsMove in [true, false] {
      store.supportsMove = supportsMove
      fs = makeFileSystem(store)
      store.put("a", data: bytes("mine"))
      _ = try await fs.inode(at: "a")
      store.beforeNext(supportsMove ? .move : .copy) { $0.put("a", data: bytes("theirs")) }
      await XCTAssertErrno(.stale) { try await self.rename("a", "b") }
      XCTAssertEqual(store.names, ["a"], "supportsMove \(supportsMove)")
      XCTAssertEqual(store.data("a"), bytes("theirs"))
      store.delete("a")
    }
  }

  func testADestinationThatAppearedMeanwhileIsNotOverwritten() async throws {
    for (supportsMove, flags) in [
      (true, RenameFlags()), (false, []), (true, .noReplace), (false, .noReplace),
    ] {
      store.supportsMove = supportsMove
      fs = makeFileSystem(store)
      store.put("a", data: bytes("mine"))
      store.beforeNext(supportsMove ? .move : .copy) { $0.put("b", data: bytes("theirs")) }
      await XCTAssertErrno(flags.isEmpty ? .stale : .exists) { try await self.rename("a", "b", flags: flags) }
      XCTAssertEqual(store.data("b"), bytes("theirs"))
      XCTAssertEqual(store.data("a"), bytes("mine"))
      store.delete("b")
    }
  }

  func testASourceRewrittenAfterItsCopyStays() async throws {
    store.supportsMove = false
    store.put("a", data: bytes("mine"))
    store.beforeNext(.delete) { $0.put("a", data: bytes("theirs, written after the copy")) }
    try await rename("a", "b")
    XCTAssertEqual(store.data("b"), bytes("mine"))
    XCTAssertEqual(store.data("a"), bytes("theirs, written after the copy"))
  }

  func testAFailedDeleteAfterTheCopyIsEIOAndBothNamesHoldIt() async throws {
    store.supportsMove = false
    store.put("a", data: bytes("mine"))
    store.injectFaults([.unavailable("gone away")], for: .delete)
    await XCTAssertErrno(.io) { try await self.rename("a", "b") }
    XCTAssertEqual(store.data("a"), bytes("mine"))
    XCTAssertEqual(store.data("b"), bytes("mine"))
  }

  func testAReplacedFileHeldByTheKernelIsDetached() async throws {
    store.put("new", data: bytes("new bytes"))
    store.put("old", data: bytes("old"))
    let newInode = try await fs.inode(at: "new")
    let oldInode = try await fs.inode(at: "old")
    try await rename("new", "old")
    await XCTAssertEqualAsync(try await fs.inode(at: "old"), newInode)
    await XCTAssertEqualAsync(try await fs.getattr(inode: oldInode).0.size, 3, "an open handle's fstat")
    await XCTAssertEqualAsync(try await fs.getattr(inode: newInode).0.size, 9)
  }

  // MARK: Atomic save

  func testAnAtomicSaveKeepsTheReplacedFilesMetadata() async throws {
    store.put(
      "doc.txt", data: bytes("old text"), contentType: "text/markdown", cacheControl: "no-cache",
      contentDisposition: "inline", contentEncoding: "identity", contentLanguage: "en",
      custom: ["firebaseStorageDownloadTokens": "token-1", "owner": "ann"])
    // An editor's temp file: written without metadata, but with one key set explicitly.
    store.put(".doc.txt.swp", data: bytes("new text"), custom: ["owner": "bob"])
    try await rename(".doc.txt.swp", "doc.txt")
    let saved = try XCTUnwrap(store.object("doc.txt"))
    XCTAssertEqual(store.data("doc.txt"), bytes("new text"))
    XCTAssertEqual(saved.contentType, "text/markdown")
    XCTAssertEqual(saved.cacheControl, "no-cache")
    XCTAssertEqual(saved.contentDisposition, "inline")
    XCTAssertEqual(saved.contentEncoding, "identity")
    XCTAssertEqual(saved.contentLanguage, "en")
    XCTAssertEqual(saved.custom, ["firebaseStorageDownloadTokens": "token-1", "owner": "bob"])
    XCTAssertEqual(store.names, ["doc.txt"])
    // A move cannot set metadata: a copy with the merged attributes, then the delete.
    XCTAssertEqual(store.calls(.move), [])
    XCTAssertEqual(store.calls(.copy).count, 1)
  }

  func testAnAtomicSaveWhoseMetadataNeedsNoMergeMoves() async throws {
    store.put("doc", data: bytes("old"), contentType: "text/plain")
    store.put("tmp", data: bytes("new"), contentType: "text/plain")
    try await rename("tmp", "doc")
    XCTAssertEqual(store.calls(.copy), [])
    XCTAssertEqual(store.calls(.move).count, 1)
  }
}

/// Renames and unlinks of files written through the mount; the atomic save: what bucketfs
/// inferred for the temp file never wins, what the user set always does.
final class NamespaceWrittenFileTests: XCTestCase {
  var store: InMemoryObjectStore!
  var fs: BucketFileSystem!
  var stages: String!

  override func setUp() async throws {
    store = InMemoryObjectStore(bucket: "demo")
    stages = makeStageDirectory()
    fs = makeWritingFileSystem(store, stageDirectory: stages, mimeTypes: nil)
    store.put(
      "doc.md", data: bytes("old"), contentType: "text/markdown",
      custom: ["firebaseStorageDownloadTokens": "t"])
  }

  override func tearDown() async throws {
    try? FileManager.default.removeItem(atPath: stages)
  }

  private func writeTemp(_ name: String, _ text: String) async throws {
    let (inode, handle) = try await fs.createFile(name)
    try await fs.writeText(inode, handle, at: 0, text)
    try await fs.close(inode, handle)
  }

  func testAnInferredContentTypeNeverWins() async throws {
    try await writeTemp("doc.md.tmp", "new")
    XCTAssertEqual(store.object("doc.md.tmp")?.contentType, "application/octet-stream")
    try await fs.rename(parent: 1, name: "doc.md.tmp", newParent: 1, newName: "doc.md", flags: [])
    XCTAssertEqual(store.data("doc.md"), bytes("new"))
    XCTAssertEqual(store.object("doc.md")?.contentType, "text/markdown")
    XCTAssertEqual(store.object("doc.md")?.custom["firebaseStorageDownloadTokens"], "t")
  }

  /// A file's mtime does not move when it is stored or renamed (vim refuses
  /// to save over a file whose mtime changed since it read it).
  func testStatShowsOneMtimeWhileStagedAfterCloseAndAfterRenames() async throws {
    let (inode, handle) = try await fs.createFile("draft.txt")
    try await fs.writeText(inode, handle, at: 0, "first")
    let staged = try await fs.getattr(inode: inode).0.modificationTime
    try await fs.close(inode, handle)
    await XCTAssertEqualAsync(try await fs.getattr(inode: inode).0.modificationTime, staged)
    try await fs.rename(parent: 1, name: "draft.txt", newParent: 1, newName: "final.txt", flags: [])
    await XCTAssertEqualAsync(try await fs.getattr(inode: inode).0.modificationTime, staged)
    try await fs.rename(parent: 1, name: "final.txt", newParent: 1, newName: "doc.md", flags: [])
    await XCTAssertEqualAsync(try await fs.getattr(inode: inode).0.modificationTime, staged)
    let fresh = makeWritingFileSystem(store, stageDirectory: stages, mimeTypes: nil)
    await XCTAssertEqualAsync(
      try await fresh.getattr(inode: fresh.inode(at: "doc.md")).0.modificationTime, staged)
  }

  func testAnAtomicSaveShowsTheNewBytesMtimeNotTheReplacedOne() async throws {
    store.put("old.txt", data: bytes("old"), custom: ["goog-reserved-file-mtime": "1000000000"])
    try await writeTemp("old.txt.tmp", "new")
    let written = try await fs.getattr(inode: fs.inode(at: "old.txt.tmp")).0.modificationTime
    try await fs.rename(parent: 1, name: "old.txt.tmp", newParent: 1, newName: "old.txt", flags: [])
    XCTAssertNotEqual(store.object("old.txt")?.custom["goog-reserved-file-mtime"], "1000000000")
    await XCTAssertEqualAsync(
      try await fs.getattr(inode: fs.inode(at: "old.txt")).0.modificationTime, written)
  }

  func testAContentTypeSetAfterCloseWins() async throws {
    try await writeTemp("doc.md.tmp", "new")
    let temp = try await fs.inode(at: "doc.md.tmp")
    try await fs.setxattr(inode: temp, name: "user.contentType", value: bytes("text/x-chosen"), flags: [])
    try await fs.rename(parent: 1, name: "doc.md.tmp", newParent: 1, newName: "doc.md", flags: [])
    XCTAssertEqual(store.object("doc.md")?.contentType, "text/x-chosen")
  }

  func testAnOpenDirtyFileIsUploadedThenRenamedAndItsHandleFollows() async throws {
    let (inode, handle) = try await fs.createFile("draft.txt")
    try await fs.writeText(inode, handle, at: 0, "first")
    XCTAssertNil(store.object("draft.txt"), "not closed yet")
    try await fs.rename(parent: 1, name: "draft.txt", newParent: 1, newName: "final.txt", flags: [])
    XCTAssertEqual(store.names, ["doc.md", "final.txt"])
    XCTAssertEqual(store.data("final.txt"), bytes("first"))
    // The handle now uploads to the new name, replacing only the generation the rename made.
    try await fs.writeText(inode, handle, at: 5, " and more")
    try await fs.close(inode, handle)
    XCTAssertEqual(store.data("final.txt"), bytes("first and more"))
    XCTAssertEqual(store.names, ["doc.md", "final.txt"])
  }

  func testAFileOpenForReadingKeepsReadingAfterARename() async throws {
    store.put("x.txt", data: bytes("kept bytes"))
    let (inode, handle) = try await fs.openFile("x.txt", flags: O_RDONLY)
    try await fs.rename(parent: 1, name: "x.txt", newParent: 1, newName: "y.txt", flags: [])
    await XCTAssertEqualAsync(try await fs.readAll(inode, handle), bytes("kept bytes"))
    try await fs.close(inode, handle)
  }

  func testAFileUnlinkedWhileOpenIsNeverUploaded() async throws {
    store.put("gone.txt", data: bytes("old"))
    let (inode, handle) = try await fs.openFile("gone.txt", flags: O_WRONLY)
    try await fs.writeText(inode, handle, at: 0, "new")
    try await fs.unlink(parent: 1, name: "gone.txt")
    try await fs.close(inode, handle)
    XCTAssertEqual(store.names, ["doc.md"])
  }

  func testANewFileUnlinkedBeforeItsFirstCloseIsNeverStored() async throws {
    // tmpfile(3), Python's TemporaryFile: create, unlink, write, close.
    store.resetCalls()
    let (inode, handle) = try await fs.createFile("scratch.tmp")
    try await fs.unlink(parent: 1, name: "scratch.tmp")
    try await fs.writeText(inode, handle, at: 0, "scratch")
    await XCTAssertEqualAsync(try await fs.readAll(inode, handle), bytes("scratch"))
    try await fs.close(inode, handle)
    XCTAssertEqual(store.names, ["doc.md"])
    XCTAssertEqual(store.calls(.upload) + store.calls(.delete), [])
    await XCTAssertEqualAsync(try await fs.lookup(parent: 1, name: "scratch.tmp").attributes, nil)
  }

  func testATempFileRenamedTwiceStaysInferred() async throws {
    try await writeTemp("a.tmp", "new")
    try await fs.rename(parent: 1, name: "a.tmp", newParent: 1, newName: "b.tmp", flags: [])
    try await fs.rename(parent: 1, name: "b.tmp", newParent: 1, newName: "doc.md", flags: [])
    XCTAssertEqual(store.object("doc.md")?.contentType, "text/markdown")
    XCTAssertEqual(store.names, ["doc.md"])
  }
}

/// The atomic-save rule, property by property (docs/SEMANTICS.md#tree).
final class NamespaceAtomicSaveRuleTests: XCTestCase {
  func testTheRuleTable() {
    typealias A = ObjectAttributes
    let rows: [(String, source: A, inferred: Set<XattrName>, replaced: A, expected: A)] = [
      (
        "temp file without metadata keeps everything", A(), [],
        A(fields: [.contentType: "text/x"], custom: ["k": "v"]),
        A(fields: [.contentType: "text/x"], custom: ["k": "v"])
      ),
      (
        "an inferred contentType never wins", A(fields: [.contentType: "application/octet-stream"]),
        [.writable(.contentType)], A(fields: [.contentType: "text/markdown"]),
        A(fields: [.contentType: "text/markdown"])
      ),
      (
        "an inferred value fills a gap", A(fields: [.contentType: "text/plain"]), [.writable(.contentType)],
        A(),
        A(fields: [.contentType: "text/plain"])
      ),
      (
        "an explicit value wins", A(fields: [.cacheControl: "no-store"]), [],
        A(fields: [.cacheControl: "max-age=60"]),
        A(fields: [.cacheControl: "no-store"])
      ),
      (
        "a generated download token never wins", A(custom: ["firebaseStorageDownloadTokens": "new"]),
        [.custom("firebaseStorageDownloadTokens")], A(custom: ["firebaseStorageDownloadTokens": "shared"]),
        A(custom: ["firebaseStorageDownloadTokens": "shared"])
      ),
      (
        "the replaced file's mtime is never carried", A(), [],
        A(custom: ["goog-reserved-file-mtime": "1000000000", "k": "v"]), A(custom: ["k": "v"])
      ),
      (
        "the source's mtime wins", A(custom: ["goog-reserved-file-mtime": "2000000000"]), [],
        A(custom: ["goog-reserved-file-mtime": "1000000000"]),
        A(custom: ["goog-reserved-file-mtime": "2000000000"])
      ),
      (
        "custom keys merge key by key", A(custom: ["a": "1", "b": "2"]), [],
        A(custom: ["b": "old", "c": "3"]),
        A(custom: ["a": "1", "b": "2", "c": "3"])
      ),
      (
        "an existing object's own metadata wins",
        A(fields: [.contentType: "image/png", .contentLanguage: "de"]), [],
        A(fields: [.contentType: "image/jpeg", .contentDisposition: "inline"]),
        A(fields: [.contentType: "image/png", .contentLanguage: "de", .contentDisposition: "inline"])
      ),
      (
        "inferred and explicit together", A(fields: [.contentType: "text/plain", .contentEncoding: "gzip"]),
        [.writable(.contentType)], A(fields: [.contentType: "text/csv", .contentEncoding: "identity"]),
        A(fields: [.contentType: "text/csv", .contentEncoding: "gzip"])
      ),
    ]
    for row in rows {
      XCTAssertEqual(
        AtomicSave.attributes(source: row.source, inferred: row.inferred, replaced: row.replaced),
        row.expected,
        row.0)
    }
  }
}

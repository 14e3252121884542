import FUSE
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// A file being written is a file: listed with its directory from create
/// until its upload, and keeping the directory non-empty (docs/SEMANTICS.md#writes-in-flight).
final class InFlightTests: XCTestCase {
  var store: InMemoryObjectStore!
  var fs: BucketFileSystem!

  override func setUp() async throws {
    store = InMemoryObjectStore(bucket: "demo")
    store.put("docs/readme.txt", data: bytes("hello world"), contentType: "text/plain")
    store.put("docs/z.txt", data: bytes("z"), contentType: "text/plain")
    fs = makeWritingFileSystem(store, stageDirectory: makeStageDirectory())
  }

  func testAFileInFlightIsListedOnceWithItsStagedSize() async throws {
    let (a, ah) = try await fs.createFile("docs/a.txt")
    try await fs.writeText(a, ah, at: 0, "xyz")
    let (b, bh) = try await fs.createFile("docs/sub.txt")
    let docs = try await fs.inode(at: "docs")
    for perCall in [1, 2, 50] {
      for plus in [true, false] {
        let listed = try await fs.entries(of: docs, perCall: perCall, plus: plus)
        XCTAssertEqual(
          listed.map(\.name), ["readme.txt", "z.txt", "a.txt", "sub.txt"], "perCall \(perCall) plus \(plus)")
        XCTAssertEqual(listed.first { $0.name == "a.txt" }?.entry.attributes?.size, 3)
      }
    }
    try await fs.close(a, ah)
    try await fs.close(b, bh)
    await XCTAssertEqualAsync(try await fs.names(of: docs), ["a.txt", "readme.txt", "sub.txt", "z.txt"])
  }

  func testAFileInFlightKeepsItsDirectoryNonEmpty() async throws {
    _ = try await fs.mkdir(parent: InodeTable.rootInode, name: "empty", mode: 0o755)
    let (f, fh) = try await fs.createFile("empty/draft.txt")
    await XCTAssertErrno(Errno(ENOTEMPTY)) {
      try await self.fs.rmdir(parent: InodeTable.rootInode, name: "empty")
    }
    XCTAssertNotNil(store.object("empty/"), "nothing was deleted")
    // Unlinked, it is gone from the directory at once.
    try await fs.unlink(parent: try await fs.inode(at: "empty"), name: "draft.txt")
    await XCTAssertEqualAsync(try await fs.names(of: try await fs.inode(at: "empty")), [])
    try await fs.close(f, fh)
    try await fs.rmdir(parent: InodeTable.rootInode, name: "empty")
  }

  func testARenamedDirectoryCarriesItsFilesInFlight() async throws {
    _ = try await fs.mkdir(parent: InodeTable.rootInode, name: "d", mode: 0o755)
    let (f, fh) = try await fs.createFile("d/f.txt")
    try await fs.writeText(f, fh, at: 0, "kept")
    try await fs.rename(
      parent: InodeTable.rootInode, name: "d", newParent: InodeTable.rootInode, newName: "e", flags: [])
    XCTAssertEqual(text(store.data("e/f.txt")), "kept", "stored before the move, then moved")
    XCTAssertNil(store.object("d/f.txt"))
    try await fs.close(f, fh)
  }
}

import FUSE
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// mknod(2) of a regular file, as `tar --xattrs` makes files: an empty object
/// stored at once with its precondition, then set and written like any file.
final class MknodTests: XCTestCase {
  func testMknodStoresAnEmptyFileWhereNothingIs() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("docs/taken.txt", data: bytes("x"), contentType: "text/plain")
    let fs = makeWritingFileSystem(store, stageDirectory: makeStageDirectory())
    let docs = try await fs.inode(at: "docs")
    store.resetCalls()
    let entry = try await fs.mknod(parent: docs, name: "new.txt", mode: UInt32(S_IFREG) | 0o644, device: 0)
    XCTAssertEqual(entry.attributes?.size, 0)
    XCTAssertEqual(store.calls(.upload), [.upload("docs/new.txt", ifGenerationMatch: 0)])
    XCTAssertEqual(store.object("docs/new.txt")?.contentType, "text/plain")
    await XCTAssertErrno(.exists) {
      _ = try await fs.mknod(parent: docs, name: "taken.txt", mode: UInt32(S_IFREG) | 0o644, device: 0)
    }
    await XCTAssertErrno(.invalid) {
      _ = try await fs.mknod(parent: docs, name: "a/b", mode: UInt32(S_IFREG), device: 0)
    }
    // Then as tar goes on: an xattr, and the bytes, with the generation mknod stored.
    let inode = entry.attributes!.inode
    try await fs.setxattr(inode: inode, name: "user.custom.k", value: bytes("v"), flags: [])
    let handle = try await fs.open(inode: inode, flags: O_WRONLY).handle
    try await fs.writeText(inode, handle, at: 0, "content")
    try await fs.close(inode, handle)
    XCTAssertEqual(text(store.data("docs/new.txt")), "content")
    XCTAssertEqual(store.object("docs/new.txt")?.custom["k"], "v")
  }
}

import FUSE
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// One table holds every open handle (HandleTable.swift): each kind is found
/// by the operations meant for it and refused by the others, and release
/// takes a handle out once.
final class HandleTableTests: XCTestCase {
  let store = InMemoryObjectStore(bucket: "demo")
  var fs: BucketFileSystem!

  override func setUp() {
    store.put("f", data: Array("object bytes".utf8))
    store.put("d/x", data: [1])
    fs = makeWritingFileSystem(store)
  }

  func testASecondWriterOfAStageNotLoadedYetReadsTheObject() async throws {
    // The first writer stages the file over the object without its bytes;
    // the second shares that stage and must read the same bytes through it.
    let (inode, first) = try await fs.openFile("f", flags: O_RDWR)
    let second = try await fs.open(inode: inode, flags: O_RDWR).handle
    XCTAssertFalse(try XCTUnwrap(fs.writer(second)).holdsBytes)
    await XCTAssertEqualAsync(text(try await fs.readAll(inode, second)), "object bytes")
    try await fs.writeText(inode, first, at: 0, "OBJECT")
    await XCTAssertEqualAsync(text(try await fs.readAll(inode, second)), "OBJECT bytes")
    try await fs.close(inode, second)
    try await fs.close(inode, first)
    XCTAssertEqual(text(store.data("f")), "OBJECT bytes")
  }

  func testEachKindOfHandleIsRefusedByTheOperationsOfTheOthers() async throws {
    let (inode, reader) = try await fs.openFile("f", flags: O_RDONLY)
    let directory = try await fs.inode(at: "d")
    let listing = try await fs.opendir(inode: directory).handle
    // Writes to a read handle or a directory handle.
    for handle in [reader, listing] {
      let inline = [UInt8]("x".utf8).withUnsafeBytes {
        fs.writeInline(inode: inode, handle: handle, offset: 0, data: $0)
      }
      guard case .failure(let errno)? = inline else {
        return XCTFail("an inline write to handle \(handle) was taken")
      }
      XCTAssertEqual(errno, .badHandle)
      await XCTAssertErrno(.badHandle) {
        _ = try await self.fs.write(inode: inode, handle: handle, offset: 0, data: [1])
      }
    }
    // Reads of a directory handle, and readdir of a file handle.
    XCTAssertNil(fs.readInline(inode: inode, handle: listing, offset: 0, size: 4))
    await XCTAssertErrno(.badHandle) {
      _ = try await self.fs.read(inode: inode, handle: listing, offset: 0, size: 4)
    }
    await XCTAssertErrno(.badHandle) {
      try await self.fs.readdir(inode: directory, handle: reader, offset: 0, into: CollectingBuffer())
    }
    fs.release(inode: inode, handle: reader)
    fs.releasedir(inode: directory, handle: listing)
    XCTAssertEqual(fs.handles.count(), 0)
  }

  func testReleaseTakesAHandleOutOnce() async throws {
    let (inode, writer) = try await fs.openFile("f", flags: O_RDWR)
    let other = try await fs.open(inode: inode, flags: O_RDWR).handle
    try await fs.writeText(inode, writer, at: 0, "changed")
    try await fs.flush(inode: inode, handle: writer)
    fs.release(inode: inode, handle: writer)
    // A second release of the same number (a confused caller) lets go of nothing more:
    // the other writer keeps the stage.
    fs.release(inode: inode, handle: writer)
    XCTAssertNotNil(fs.stagedInodes.file(inode: inode), "the other writer still holds the stage")
    await XCTAssertErrno(.badHandle) {
      _ = try await self.fs.read(inode: inode, handle: writer, offset: 0, size: 4)
    }
    await XCTAssertEqualAsync(text(try await fs.readAll(inode, other)), "changedbytes")
    try await fs.close(inode, other)
    XCTAssertNil(fs.stagedInodes.file(inode: inode))
    XCTAssertEqual(fs.stagedInodes.count, 0)
    XCTAssertEqual(fs.handles.count(), 0)
  }
}

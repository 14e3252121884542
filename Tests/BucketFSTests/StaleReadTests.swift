import FUSE
import NIOCore
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// An object replaced elsewhere: the open handle fails (never mixes
/// versions), the next open reads the new version within the TTL.
final class StaleReadTests: XCTestCase {
  func read(_ fs: BucketFileSystem, _ inode: UInt64, _ handle: UInt64) async throws -> String {
    String(
      decoding: try await fs.read(inode: inode, handle: handle, offset: 0, size: 1 << 16).array, as: UTF8.self
    )
  }

  func testAReplacedObjectIsReadAnewByTheNextOpen() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("f", data: bytes("old contents\n"))
    let fs = makeFileSystem(store)  // the clock stands still: metadata stays fresh
    let inode = try await fs.inode(at: "f")
    let first = try await fs.open(inode: inode, flags: O_RDONLY).handle
    store.put("f", data: bytes("new, longer contents\n"))

    await XCTAssertErrno(.stale) { _ = try await self.read(fs, inode, first) }
    let second = try await fs.open(inode: inode, flags: O_RDONLY)
    XCTAssertFalse(second.keepCache, "the kernel's pages of the old version are not kept")
    await XCTAssertEqualAsync(try await read(fs, inode, second.handle), "new, longer contents\n")
    let (attributes, _) = try await fs.getattr(inode: inode)
    XCTAssertEqual(attributes.size, 21)

    // The handle opened on the old version never shows the new bytes.
    await XCTAssertErrno(.stale) { _ = try await self.read(fs, inode, first) }
    fs.release(inode: inode, handle: first)
    fs.release(inode: inode, handle: second.handle)
    let settled = await eventually { fs.readService.staleReads.isIdle }
    XCTAssertTrue(settled, "refreshes end")
  }

  /// The next open of the inode is ESTALE (the kernel then looks the name
  /// up again, StaleOpenTests), and that lookup finds the name absent.
  func testADeletedObjectIsStaleToTheNextOpenAndAbsentToALookup() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("f", data: bytes("x"))
    let fs = makeFileSystem(store)
    let inode = try await fs.inode(at: "f")
    let handle = try await fs.open(inode: inode, flags: O_RDONLY).handle
    store.delete("f")
    await XCTAssertErrno(.stale) { _ = try await self.read(fs, inode, handle) }
    await XCTAssertErrno(.stale) { _ = try await fs.open(inode: inode, flags: O_RDONLY) }
    await XCTAssertNilAsync(try await fs.lookup(parent: 1, name: "f").attributes)
  }
}

import FUSE
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

/// A complete listing answers "absent" no longer than the negative TTL.
final class ListedAbsenceTests: XCTestCase {
  func testAnotherClientsNewObjectIsFoundWithinTheNegativeTTLAfterAListing() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("d/f1", data: [1])
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    let directory = try await fs.inode(at: "d")
    let handle = try await fs.opendir(inode: directory).handle
    let all = CollectingBuffer()
    try await fs.readdir(inode: directory, handle: handle, offset: 0, into: all)
    fs.releasedir(inode: directory, handle: handle)
    XCTAssertEqual(all.entries.map(\.name), [".", "..", "f1"])

    store.put("d/new", data: [1, 2])  // another client
    clock.advance(6)  // past the 5 s negative TTL, well within the 60 s metadata TTL
    let found = try await fs.lookup(parent: directory, name: "new")
    XCTAssertEqual(found.attributes?.size, 2, "still reported absent")
  }
}

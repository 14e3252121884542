import FUSE
import StorageFake
import XCTest

@testable import BucketFS

/// A pass's first readdirplus gives its files without nodes (the kernel
/// asks for attributes there whether or not anyone will stat the names), and
/// the lookup a stat of one then makes is answered from that page.
final class UnheldEntryTests: XCTestCase {
  private func directory(files: Int) -> InMemoryObjectStore {
    let store = InMemoryObjectStore(bucket: "demo")
    for i in 0..<files { store.put(String(format: "d/f%04d", i), data: Array(repeating: 7, count: i)) }
    store.put("d/sub/x", data: [1])
    return store
  }

  func testTheFirstCallHoldsNoFileAndAStatOfOneNeedsNoRequest() async throws {
    let store = directory(files: 10)
    let fs = makeFileSystem(store)
    let d = try await fs.inode(at: "d")
    let held = fs.nodes.count
    let handle = try await fs.opendir(inode: d).handle
    defer { fs.releasedir(inode: d, handle: handle) }

    let first = CollectingBuffer(plus: true, capacity: 50)
    try await fs.readdir(inode: d, handle: handle, offset: 0, into: first)
    XCTAssertEqual(
      first.entries.map(\.name), [".", ".."] + (0..<10).map { String(format: "f%04d", $0) } + ["sub"])
    XCTAssertEqual(first.unheld, (0..<10).map { String(format: "f%04d", $0) }, "files go without nodes")
    XCTAssertEqual(fs.nodes.count, held + 1, "only the subdirectory is held")
    XCTAssertNil(fs.nodes.held("d/f0003"))

    store.resetCalls()
    let listed = first.entries.first { $0.name == "f0003" }!.entry.attributes!
    let looked = try await fs.lookup(parent: d, name: "f0003")
    XCTAssertEqual(looked.attributes?.inode, listed.inode, "the number readdir showed")
    XCTAssertEqual(looked.attributes?.size, 3)
    XCTAssertEqual(store.calls, [], "answered from the page readdir gave")
    XCTAssertNotNil(fs.nodes.held("d/f0003"))
    let (attributes, _) = try await fs.getattr(inode: listed.inode)
    XCTAssertEqual(attributes.size, 3)
    XCTAssertEqual(store.calls, [])
  }

  func testLaterReaddirplusCallsHoldWhatTheyGive() async throws {
    let fs = makeFileSystem(directory(files: 10))
    let d = try await fs.inode(at: "d")
    let handle = try await fs.opendir(inode: d).handle
    defer { fs.releasedir(inode: d, handle: handle) }
    let first = CollectingBuffer(plus: true, capacity: 4)
    try await fs.readdir(inode: d, handle: handle, offset: 0, into: first)
    XCTAssertEqual(first.unheld, ["f0000", "f0001"])
    // The kernel makes a later call readdirplus after a lookup in the directory.
    let next = CollectingBuffer(plus: true, capacity: 4)
    try await fs.readdir(inode: d, handle: handle, offset: first.entries.last!.nextOffset, into: next)
    XCTAssertEqual(next.entries.map(\.name), ["f0002", "f0003", "f0004", "f0005"])
    XCTAssertEqual(next.unheld, [])
    XCTAssertNotNil(fs.nodes.held("d/f0004"))
    XCTAssertNil(fs.nodes.held("d/f0001"))
  }

  func testAChangeOrTheTTLEndsWhatThePageSays() async throws {
    let store = directory(files: 4)
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    let d = try await fs.inode(at: "d")
    let handle = try await fs.opendir(inode: d).handle
    let buffer = CollectingBuffer(plus: true, capacity: 50)
    try await fs.readdir(inode: d, handle: handle, offset: 0, into: buffer)
    fs.releasedir(inode: d, handle: handle)
    XCTAssertEqual(buffer.unheld.count, 4)

    // Deleted through the mount: never shown again from the page.
    try await fs.unlink(parent: d, name: "f0001")
    let gone = try await fs.lookup(parent: d, name: "f0001")
    XCTAssertNil(gone.attributes)

    // Deleted elsewhere: the page answers while younger than the metadata TTL, as any listing does.
    XCTAssertTrue(store.delete("d/f0002"))
    clock.advance(Configuration().metadataTTL + 1)
    let old = try await fs.lookup(parent: d, name: "f0002")
    XCTAssertNil(old.attributes, "a page older than the TTL asks the bucket")
  }

  func testTheEntriesKeptForLookupsAreBounded() async throws {
    // Two first calls: one page of 990 files, then 100 more elsewhere.
    let store = directory(files: 990)
    for i in 0..<100 { store.put(String(format: "e/f%04d", i), data: [1]) }
    XCTAssertLessThan(990, DirectoryCache.unheldCapacity)
    XCTAssertLessThan(DirectoryCache.unheldCapacity, 1090)
    let fs = makeFileSystem(store)
    for (name, files) in [("d", 990), ("e", 100)] {
      let inode = try await fs.inode(at: name)
      let handle = try await fs.opendir(inode: inode).handle
      let buffer = CollectingBuffer(plus: true, capacity: 2000)
      try await fs.readdir(inode: inode, handle: handle, offset: 0, into: buffer)
      fs.releasedir(inode: inode, handle: handle)
      XCTAssertEqual(buffer.unheld.count, files)
    }

    store.resetCalls()
    _ = try await fs.inode(at: "e/f0099")
    _ = try await fs.inode(at: "d/f0989")
    XCTAssertEqual(store.calls, [], "the newest are kept")
    let oldest = try await fs.lookup(parent: try await fs.inode(at: "d"), name: "f0000")
    XCTAssertEqual(oldest.attributes?.size, 0)
    XCTAssertFalse(store.calls.isEmpty, "the oldest were dropped: looked up in the bucket")
  }
}

import FUSE
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

/// A lookup of a directory asks for its subtree flat, one page: a subtree that
/// ends within it is listed whole, and the walk, the lookups and the xattrs
/// under it need no further request (docs/SEMANTICS.md#walks).
final class SmallTreeTests: XCTestCase {
  /// `dir/` holding 3 × 4 directories of 5 files (60 files in 16 directories),
  /// each file with a custom key.
  static func seedSmallTree(_ store: InMemoryObjectStore) {
    for t in 0..<3 {
      for m in 0..<4 {
        for f in 0..<5 {
          store.put("dir/d\(t)/m\(m)/f\(f)", data: bytes("\(t)\(m)\(f)"), custom: ["owner": "o\(t)\(m)\(f)"])
        }
      }
    }
  }

  func testAWalkOfASmallTreeCostsTheLookupsFlatPageOnly() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    Self.seedSmallTree(store)
    let fs = makeFileSystem(store)
    let dir = try await fs.inode(at: "dir")
    // The lookup: one flat list from `dir` (the object, had there been one) through its subtree.
    XCTAssertEqual(store.calls, [.list(prefix: "dir", pageToken: nil)])
    XCTAssertEqual(store.flatLists, ["dir"])
    store.resetCalls()
    let tree = try await fs.walk(from: dir, key: "dir/")
    XCTAssertEqual(tree.count, 1 + 3 + 12)
    XCTAssertEqual(tree["dir/d2/m3/"], ["f0", "f1", "f2", "f3", "f4"])
    // stat and getfattr -d of every file: full metadata came with the page.
    for t in 0..<3 {
      let file = try await fs.inode(at: "dir/d\(t)/m1/f2")
      _ = try await fs.getattr(inode: file)
      let owner = try await fs.getxattr(inode: file, name: "user.custom.owner")
      XCTAssertEqual(String(decoding: owner, as: UTF8.self), "o\(t)12")
    }
    // The directory's own opendir followed its lookup at once: it took the lookup's page too.
    XCTAssertEqual(store.calls, [], "the walk, its lookups and the xattrs asked for nothing more")
  }

  func testLookupsUnderAListedTreeAreAnsweredFromItBothWays() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    Self.seedSmallTree(store)
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    _ = try await fs.inode(at: "dir")
    store.resetCalls()
    // Lookups without any opendir (`stat dir/d1/m2/f3`), and names the listing lacks.
    await XCTAssertEqualAsync(try await fs.kind(at: "dir/d1/m2/f3"), .file)
    await XCTAssertEqualAsync(try await fs.kind(at: "dir/d1/m2"), .directory)
    await XCTAssertNilAsync(try await fs.kind(at: "dir/d1/m2/missing"))
    await XCTAssertNilAsync(try await fs.kind(at: "dir/nothing"))
    XCTAssertEqual(store.calls, [])
    // Past the negative TTL (5 s) a missing name is asked for again; a listed one is
    // still answered (the listing is trusted for 10 s).
    clock.advance(6)
    await XCTAssertEqualAsync(try await fs.kind(at: "dir/d2/m0/f1"), .file)
    XCTAssertEqual(store.calls, [])
    await XCTAssertNilAsync(try await fs.kind(at: "dir/d2/m0/late"))
    XCTAssertEqual(store.calls, [.list(prefix: "dir/d2/m0/late", pageToken: nil)])
  }

  func testADirectoryOpenedOnItsOwnListsItself() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    Self.seedSmallTree(store)
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    let dir = try await fs.inode(at: "dir")
    // `ls dir` more than a moment after its lookup: no descent, so it lists, as
    // any `ls` does (another client's change is never hidden from it).
    store.delete("dir/d2/m0/f0")
    store.put("dir/new", data: [])
    clock.advance(fs.directoryCache.followWindow)
    store.resetCalls()
    await XCTAssertEqualAsync(try await fs.names(of: dir), ["d0", "d1", "d2", "new"])
    XCTAssertEqual(store.calls, [.list(prefix: "dir/", pageToken: nil)])
    XCTAssertEqual(store.flatLists, [])
  }

  func testADirectoryOpenedRightAfterItsLookupTakesItsPageOnce() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    Self.seedSmallTree(store)
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    let dir = try await fs.inode(at: "dir")
    clock.advance(fs.directoryCache.followWindow / 2)
    store.resetCalls()
    // `find dir`, `ls dir`: the opendir follows the lookup at once and lists nothing.
    await XCTAssertEqualAsync(try await fs.names(of: dir), ["d0", "d1", "d2"])
    XCTAssertEqual(store.calls, [])
    // The page made a complete listing: a name it lacks is absent without a request.
    await XCTAssertNilAsync(try await fs.kind(at: "dir/missing"))
    XCTAssertEqual(store.calls, [])
    // The page is taken once: the next opendir (no lookup before it) lists.
    await XCTAssertEqualAsync(try await fs.names(of: dir), ["d0", "d1", "d2"])
    XCTAssertEqual(store.calls, [.list(prefix: "dir/", pageToken: nil)])
  }

  func testAChangeThroughTheMountBeforeTheOpendirMakesItList() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    Self.seedSmallTree(store)
    let fs = makeWritingFileSystem(store)
    let dir = try await fs.inode(at: "dir")
    _ = try await fs.mkdir(parent: dir, name: "made", mode: 0o755)
    store.resetCalls()
    await XCTAssertEqualAsync(try await fs.names(of: dir), ["d0", "d1", "d2", "made"])
    XCTAssertEqual(store.calls, [.list(prefix: "dir/", pageToken: nil)])
  }

  func testAListingOlderThanItsFreshnessIsNotUsed() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    Self.seedSmallTree(store)
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    let dir = try await fs.inode(at: "dir")
    store.put("dir/d0/m0/new", data: [])  // another client, unseen by the listing
    clock.advance(11)
    store.resetCalls()
    await XCTAssertEqualAsync(try await fs.kind(at: "dir/d0/m0/new"), .file)
    await XCTAssertEqualAsync(try await fs.names(of: dir), ["d0", "d1", "d2"])
    XCTAssertTrue(store.calls.contains(.list(prefix: "dir/", pageToken: nil)), "listed again: \(store.calls)")
  }

  func testASubtreeOverAPageFallsBackToItsOwnListings() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    for i in 0..<25 { store.put(String(format: "big/f%02d", i), data: []) }
    store.put("big/sub/x", data: [])
    let fs = makeFileSystem(store, pageSize: 10)
    let big = try await fs.inode(at: "big")
    // A lookup under it is not answered from a listing: one list call from the name.
    store.resetCalls()
    _ = try await fs.lookup(parent: big, name: "g")
    XCTAssertEqual(store.calls, [.list(prefix: "big/g", pageToken: nil)])
    // 26 entries, 10 a page: its own three delimiter pages, as without the probe.
    store.resetCalls()
    await XCTAssertEqualAsync(try await fs.names(of: big).count, 26)
    XCTAssertEqual(store.calls.count, 3, "\(store.calls)")
    XCTAssertEqual(store.flatLists, [])
  }

  func testASubtreeOverAPageKeepsTheDirectoriesItsPageEnded() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    for i in 0..<4 { store.put("big/a/f\(i)", data: []) }
    for i in 0..<20 { store.put(String(format: "big/b/f%02d", i), data: []) }
    let fs = makeFileSystem(store, pageSize: 10)
    let big = try await fs.inode(at: "big")
    // A walk: big lists itself (its subtree was over the page), then descends into a.
    let handle = try await fs.opendir(inode: big).handle
    await XCTAssertEqualAsync(try await fs.names(of: big, handle: handle, from: 0), [".", "..", "a", "b"])
    store.resetCalls()
    let a = try await fs.inode(at: "big/a")
    await XCTAssertEqualAsync(try await fs.names(of: a), ["f0", "f1", "f2", "f3"])
    fs.releasedir(inode: big, handle: handle)
    XCTAssertEqual(store.calls, [], "the descent into a took the listing the lookup's page ended")
  }

  func testADirectoryFoundLargeIsProbedWithOneEntryAfterwards() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    for i in 0..<25 { store.put(String(format: "big/f%02d", i), data: []) }
    let fs = makeFileSystem(store, pageSize: 10)
    _ = try await fs.lookup(parent: InodeTable.rootInode, name: "big")
    XCTAssertEqual(store.flatLists, ["big"])
    store.resetCalls()
    // The kernel forgot the name; the next lookup no longer pays for a page.
    fs.nodes.deleted("big/")
    _ = try await fs.lookup(parent: InodeTable.rootInode, name: "big")
    XCTAssertEqual(store.flatLists, [], "\(store.calls)")
    XCTAssertEqual(store.calls, [.list(prefix: "big", pageToken: nil)], "one list by delimiter")
  }

  func testAChangeWhileTheProbeIsUnderWayKeepsNothing() async throws {
    let base = InMemoryObjectStore(bucket: "b")
    Self.seedSmallTree(base)
    let store = HeldAnswerStore(base)
    let fs = makeFileSystem(store)
    store.hold(.list)
    let lookup = Task { try await fs.lookup(parent: InodeTable.rootInode, name: "dir") }
    let held = await eventually { store.taken(.list) == 1 }
    XCTAssertTrue(held)
    // Through the mount: the listing answered before this change must not be kept.
    base.put("dir/d0/m0/new", data: [])
    fs.directoryCache.invalidate(.stored("dir/d0/m0/new"))
    store.release(.list)
    let entry = try await lookup.value
    let dir = try XCTUnwrap(entry.attributes?.inode)
    base.resetCalls()
    await XCTAssertEqualAsync(try await fs.kind(at: "dir/d0/m0/new"), .file)
    _ = try await fs.names(of: dir)
    XCTAssertGreaterThan(base.calls(.list).count, 0, "listed again: \(base.calls)")
  }

  func testAWriteThroughTheMountDropsTheListingItCouldMakeWrong() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    Self.seedSmallTree(store)
    let fs = makeWritingFileSystem(store)
    _ = try await fs.inode(at: "dir")
    let m0 = try await fs.inode(at: "dir/d0/m0")
    let (entry, opened) = try await fs.create(
      parent: m0, name: "made", mode: 0o644, flags: O_WRONLY | O_CREAT)
    let inode = try XCTUnwrap(entry.attributes?.inode)
    _ = try await fs.write(inode: inode, handle: opened.handle, offset: 0, data: bytes("x"))
    try await fs.flush(inode: inode, handle: opened.handle)
    fs.release(inode: inode, handle: opened.handle)
    await XCTAssertEqualAsync(try await fs.names(of: m0), ["f0", "f1", "f2", "f3", "f4", "made"])
  }
}

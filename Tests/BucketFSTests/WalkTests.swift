import FUSE
import ObjectStore
import StorageFake
import Synchronization
import XCTest

@testable import BucketFS

/// Tree walks list subtrees with flat pages; single directories keep their
/// own delimiter listings.
final class WalkTests: XCTestCase {
  /// `top` directories of `middle` directories of `files` files each.
  static func seedTree(
    _ store: InMemoryObjectStore, top: Int, middle: Int, files: Int, under root: String = ""
  ) {
    for t in 0..<top {
      for m in 0..<middle {
        for f in 0..<files {
          store.put("\(root)d\(t)/m\(m)/f\(f)", data: bytes("\(t)\(m)\(f)"))
        }
      }
    }
  }

  func testAWalkCostsOneFlatCallPerSubtreeNotOnePerDirectory() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    Self.seedTree(store, top: 3, middle: 4, files: 5)
    let fs = makeFileSystem(store)
    let tree = try await fs.walk()
    XCTAssertEqual(tree.count, 1 + 3 + 12)
    XCTAssertEqual(tree["d1/m2/"], ["f0", "f1", "f2", "f3", "f4"])
    // The root by delimiter, then each top directory's subtree in one flat call.
    XCTAssertEqual(store.calls.count, 4, "\(store.calls)")
    XCTAssertEqual(
      Set(store.calls.map(\.description)),
      ["list(, token: nil)", "list(d0/, token: nil)", "list(d1/, token: nil)", "list(d2/, token: nil)"])
    XCTAssertEqual(Set(store.flatLists), ["d0/", "d1/", "d2/"], "\(store.flatLists)")
    // Readdirplus gave every entry its metadata: stat and xattrs need no request.
    let file = try await fs.inode(at: "d2/m3/f4")
    _ = try await fs.getattr(inode: file)
    XCTAssertEqual(store.calls.count, 4)
  }

  func testAWalkOfSubtreesLargerThanAPageCostsAboutItsPages() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    // 4 × 6 × 10 = 240 files in 28 directories, 10 objects a page: 24 flat pages.
    Self.seedTree(store, top: 4, middle: 6, files: 10)
    let fs = makeFileSystem(store, pageSize: 10)
    let reference = try await Self.delimiterWalk(store, pageSize: 10)
    store.resetCalls()
    let tree = try await fs.walk()
    XCTAssertEqual(tree, reference)
    let calls = store.calls.count
    // Per directory it is 28 listings (+ 24 more pages): 52. Flat pages cost
    // the 24 pages, plus the root, the top directories' own listings (their
    // subtrees are over the pages a descent fetches) and partial pages of
    // directories cut by a page end (measured: 33).
    XCTAssertLessThanOrEqual(calls, 36, "\(store.calls)")
    XCTAssertGreaterThanOrEqual(store.flatLists.count, 20)
    XCTAssertEqual(store.calls(.metadata).count, 0)
  }

  func testAWalkThatKeepsTheParentOpenIsAWalkToo() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    Self.seedTree(store, top: 3, middle: 4, files: 5)
    let fs = makeFileSystem(store)
    _ = try await fs.walk(keepingParentsOpen: true)
    XCTAssertEqual(store.calls.count, 4, "\(store.calls)")
  }

  func testLsOfOneDirectoryCostsItsOwnPagesOnly() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    for i in 0..<95 { store.put(String(format: "big/f%03d", i), data: []) }
    Self.seedTree(store, top: 2, middle: 2, files: 2, under: "big/")
    let fs = makeFileSystem(store, pageSize: 10)
    let big = try await fs.inode(at: "big")
    store.resetCalls()
    let names = try await fs.names(of: big)
    XCTAssertEqual(names.count, 97)
    // 97 entries, 10 to a page: 10 delimiter pages, nothing flat.
    XCTAssertEqual(store.calls.count, 10)
    XCTAssertEqual(store.flatLists, [])

    // `ls -f | head -1`: one call.
    store.resetCalls()
    let handle = try await fs.opendir(inode: big).handle
    let buffer = CollectingBuffer(capacity: 3)
    try await fs.readdir(inode: big, handle: handle, offset: 0, into: buffer)
    fs.releasedir(inode: big, handle: handle)
    XCTAssertEqual(store.calls, [.list(prefix: "big/", pageToken: nil)])
  }

  func testLsOfAChildAfterItsParentCostsOneCallWhenItsSubtreeFitsAPage() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    Self.seedTree(store, top: 2, middle: 2, files: 2)
    let fs = makeFileSystem(store)
    _ = try await fs.names(of: InodeTable.rootInode)
    store.resetCalls()
    let d0 = try await fs.inode(at: "d0")
    await XCTAssertEqualAsync(try await fs.names(of: d0), ["m0", "m1"])
    XCTAssertEqual(store.calls, [.list(prefix: "d0/", pageToken: nil)])
  }

  func testAWalkThatStopsEarlyFetchesABoundedPartOfAHugeSubtree() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    // 5 top directories of 2,000 objects each, 20 objects a page: 500 pages.
    Self.seedTree(store, top: 5, middle: 20, files: 100)
    let fs = makeFileSystem(store, pageSize: 20)
    _ = try await fs.names(of: InodeTable.rootInode)
    let d0 = try await fs.inode(at: "d0")
    let handle = try await fs.opendir(inode: d0).handle
    let buffer = CollectingBuffer(capacity: 3)
    try await fs.readdir(inode: d0, handle: handle, offset: 0, into: buffer)
    fs.releasedir(inode: d0, handle: handle)
    // Look-ahead under way settles; then nothing more is asked for.
    let settled = await eventually { fs.directories.walks.fetchesUnderWay == 0 }
    XCTAssertTrue(settled)
    // The root, one flat page of d0, its own first page, one look-ahead page for d1 and d2.
    XCTAssertLessThanOrEqual(store.calls.count, 5, "\(store.calls)")
    XCTAssertLessThanOrEqual(fs.directoryCache.heldEntries, fs.directoryCache.capacity)
  }

  func testHeldListingsStayWithinAFewPagesWhateverTheSubtreeSize() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    Self.seedTree(store, top: 6, middle: 30, files: 20)  // 3,600 files
    let fs = makeFileSystem(store, pageSize: 50)
    var peak = 0
    let tree = try await fs.walk(onOpen: { peak = max(peak, fs.directoryCache.heldEntries) })
    XCTAssertEqual(tree.count, 1 + 6 + 180)
    XCTAssertGreaterThan(peak, 0)
    XCTAssertLessThanOrEqual(peak, fs.directoryCache.capacity)
    XCTAssertEqual(fs.directoryCache.capacity, 4 * 50)
  }

  func testAWalkThatSpendsLongInEachChildStaysAWalk() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    Self.seedTree(store, top: 4, middle: 1, files: 1)
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    _ = try await fs.names(of: InodeTable.rootInode)
    for t in 0..<4 {
      let inode = try await fs.inode(at: "d\(t)")
      _ = try await fs.names(of: inode)
      clock.advance(4)  // copying the child's files takes a while
    }
    // Every top directory was a descent (8 s after the root was read): flat listings only.
    XCTAssertEqual(Set(store.flatLists), ["d0/", "d1/", "d2/", "d3/"], "\(store.calls)")
  }

  func testSubdirectoryNamesKeptForLookAheadAreBounded() {
    let clock = ManualClock()
    let cache = DirectoryCache(
      pageSize: 10, freshness: 60, kernelListings: KernelListings(ttl: 0, clock: clock.read),
      clock: clock.read,
      onConflict: { _ in })
    for d in 0..<100 {
      cache.readdirGave("d\(d)/", files: [], subdirectories: (0..<30).map { "d\(d)/s\($0)/" })
      XCTAssertLessThanOrEqual(cache.subdirectoryKeysHeld, 8 * 10 + 20)
    }
    XCTAssertGreaterThan(cache.subdirectoryKeysHeld, 0)
  }

  func testInvalidatedListingsAreListedAgain() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    Self.seedTree(store, top: 3, middle: 1, files: 2)
    let fs = makeFileSystem(store)
    _ = try await fs.names(of: InodeTable.rootInode)
    let d0 = try await fs.inode(at: "d0")
    let d1 = try await fs.inode(at: "d1")
    await XCTAssertEqualAsync(try await fs.names(of: d0), ["m0"])  // a descent: d0/ and look-ahead d1/, d2/
    let settled = await eventually { fs.directories.walks.fetchesUnderWay == 0 }
    XCTAssertTrue(settled)
    // Through the mount (the write layer calls the entry point), d1/m0/f0 goes and d1/new comes.
    store.delete("d1/m0/f0")
    store.put("d1/new", data: [])
    fs.directoryCache.invalidate(.removed("d1/m0/f0"))
    fs.directoryCache.invalidate(.stored("d1/new"))
    await XCTAssertEqualAsync(try await fs.names(of: d1), ["m0", "new"])
    let m0 = try await fs.inode(at: "d1/m0")
    await XCTAssertEqualAsync(try await fs.names(of: m0), ["f1"])
  }

  // MARK: - Helpers

  /// Every directory's names, as the reference per-directory listings show them.
  static func delimiterWalk(_ store: InMemoryObjectStore, pageSize: Int) async throws -> [String: [String]] {
    try await TreeListingTests.delimiterTree(store, root: "", pageSize: pageSize).mapValues { $0.map(\.name) }
  }
}

extension BucketFileSystem {
  /// Walks the tree as `find` does: a directory is read whole, closed, then
  /// its subdirectories are walked in order; or, as `nftw` does, with the
  /// parent still open. Returns each directory's names by key (`key` is
  /// the starting directory's).
  func walk(
    from inode: UInt64 = InodeTable.rootInode, key: String = "", keepingParentsOpen: Bool = false,
    onOpen: () -> Void = {}
  ) async throws -> [String: [String]] {
    var result: [String: [String]] = [:]
    try await walk(inode: inode, key: key, keepOpen: keepingParentsOpen, onOpen: onOpen, into: &result)
    return result
  }

  private func walk(
    inode: UInt64, key: String, keepOpen: Bool, onOpen: () -> Void, into result: inout [String: [String]]
  ) async throws {
    let handle = try await opendir(inode: inode).handle
    onOpen()
    let names = try await self.names(of: inode, handle: handle, from: 0).filter { $0 != "." && $0 != ".." }
    if !keepOpen { releasedir(inode: inode, handle: handle) }
    result[key] = names
    for name in names {
      let entry = try await lookup(parent: inode, name: name)
      guard let attributes = entry.attributes, attributes.kind == .directory else { continue }
      try await walk(
        inode: attributes.inode, key: key + name + "/", keepOpen: keepOpen, onOpen: onOpen, into: &result)
    }
    if keepOpen { releasedir(inode: inode, handle: handle) }
  }
}

import FUSE
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

/// `--list-cache-ttl`: the kernel keeps a directory's readdir results for the
/// TTL (FOPEN_CACHE_DIR, then FOPEN_KEEP_CACHE); this mount's own changes end
/// it (docs/SEMANTICS.md#consistency-list-cache).
final class KernelListingTests: XCTestCase {
  func makeCachingFileSystem(_ store: InMemoryObjectStore, ttl: Double, clock: ManualClock)
    -> BucketFileSystem
  {
    var configuration = Configuration()
    configuration.stageDirectory = makeStageDirectory()
    configuration.listCacheTTL = ttl
    return BucketFileSystem(
      store: store, configuration: configuration, logger: quietLogger, clock: clock.read, onMounted: {},
      stageFiles: LocalStageFiles())
  }

  func testOffByDefault() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    store.put("d/f", data: [])
    let fs = makeFileSystem(store)
    let d = try await fs.inode(at: "d")
    for _ in 0..<2 {
      let opened = try await fs.opendir(inode: d)
      XCTAssertFalse(opened.cacheDirectory)
      XCTAssertFalse(opened.keepCache)
      fs.releasedir(inode: d, handle: opened.handle)
    }
  }

  func testTheKernelKeepsAListingForTheTTL() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    for i in 0..<3 { store.put("d/s\(i)/f", data: []) }
    let clock = ManualClock()
    let fs = makeCachingFileSystem(store, ttl: 30, clock: clock)
    let d = try await fs.inode(at: "d")
    clock.advance(2)  // past the moment a lookup's page serves its opendir
    // The first opendir fills the kernel's cache: it lists.
    let first = try await fs.opendir(inode: d)
    XCTAssertTrue(first.cacheDirectory)
    XCTAssertFalse(first.keepCache)
    store.resetCalls()
    _ = try await fs.names(of: d, handle: first.handle, from: 0)
    XCTAssertEqual(store.calls, [.list(prefix: "d/", pageToken: nil)])
    // Within the TTL the kernel answers; an opendir that is a walk's descent fetches nothing.
    store.resetCalls()
    clock.advance(29)
    let s0 = try await fs.inode(at: "d/s0")
    let descent = try await fs.opendir(inode: s0)
    XCTAssertTrue(descent.cacheDirectory)
    XCTAssertFalse(descent.keepCache, "s0 was never filled")
    let again = try await fs.opendir(inode: d)
    XCTAssertTrue(again.cacheDirectory)
    XCTAssertTrue(again.keepCache)
    fs.releasedir(inode: s0, handle: descent.handle)
    fs.releasedir(inode: d, handle: again.handle)
    fs.releasedir(inode: d, handle: first.handle)
    // Past the TTL: filled again.
    clock.advance(2)
    let late = try await fs.opendir(inode: d)
    XCTAssertFalse(late.keepCache)
    fs.releasedir(inode: d, handle: late.handle)
  }

  func testAKeptOpenFetchesNothingAndStillListsIfAsked() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    for i in 0..<3 { store.put("d/s\(i)/f", data: []) }
    let clock = ManualClock()
    let fs = makeCachingFileSystem(store, ttl: 30, clock: clock)
    let d = try await fs.inode(at: "d")
    clock.advance(2)
    _ = try await fs.names(of: d)
    let s1 = try await fs.inode(at: "d/s1")
    _ = try await fs.names(of: s1)
    // A walk again: d is read, then s1 is opened (a descent) while the kernel keeps both.
    store.resetCalls()
    let kept = try await fs.opendir(inode: d)
    XCTAssertTrue(kept.keepCache)
    let child = try await fs.opendir(inode: s1)
    XCTAssertTrue(child.keepCache)
    XCTAssertEqual(store.calls, [], "no walk fetch for a listing the kernel keeps")
    // The kernel dropped its pages meanwhile (memory pressure): the handle lists.
    await XCTAssertEqualAsync(try await fs.names(of: s1, handle: child.handle, from: 0), [".", "..", "f"])
    XCTAssertEqual(store.calls, [.list(prefix: "d/s1/", pageToken: nil)])
    fs.releasedir(inode: s1, handle: child.handle)
    fs.releasedir(inode: d, handle: kept.handle)
  }

  func testAChangeThroughTheMountEndsTheTTLOfEveryDirectoryOnItsPath() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    store.put("d/s/f", data: [])
    store.put("e/f", data: [])
    let clock = ManualClock()
    let fs = makeCachingFileSystem(store, ttl: 30, clock: clock)
    let d = try await fs.inode(at: "d")
    let s = try await fs.inode(at: "d/s")
    let e = try await fs.inode(at: "e")
    clock.advance(2)
    for inode in [d, s, e] { _ = try await fs.names(of: inode) }
    // A file stored in d/s/new/: d/s (a new directory in it) and d (whose
    // subtree changed) are filled again; e is not.
    let (entry, opened) = try await fs.create(
      parent: try await fs.mkdir(parent: s, name: "new", mode: 0o755).attributes!.inode, name: "g",
      mode: 0o644, flags: O_WRONLY | O_CREAT)
    let inode = try XCTUnwrap(entry.attributes?.inode)
    try await fs.flush(inode: inode, handle: opened.handle)
    fs.release(inode: inode, handle: opened.handle)
    for (directory, kept) in [(d, false), (s, false), (e, true)] {
      let result = try await fs.opendir(inode: directory)
      XCTAssertEqual(result.keepCache, kept, "inode \(directory)")
      fs.releasedir(inode: directory, handle: result.handle)
    }
  }

  func testDirectoriesHoldingAKey() {
    XCTAssertEqual(KernelListings.directories(holding: "a/b/c"), ["a/b/", "a/", ""])
    XCTAssertEqual(KernelListings.directories(holding: "a/b/"), ["a/", ""])
    XCTAssertEqual(KernelListings.directories(holding: "f"), [""])
  }
}

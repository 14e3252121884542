import FUSE
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

/// What a request created is undone when its reply fails; caches stay
/// bounded; a retried PATCH is not mistaken for someone else's change.
final class EdgeTests: XCTestCase {
  func lookups(_ fs: BucketFileSystem, _ inode: UInt64) -> UInt64? {
    (try? fs.nodes.node(inode))?.lookups
  }

  func testAFailedLookupReplyIsForgotten() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("f", data: [1])
    let fs = makeFileSystem(store)
    let inode = try await fs.inode(at: "f")
    _ = try await fs.lookup(parent: 1, name: "f")
    XCTAssertEqual(lookups(fs, inode), 2)
    fs.replyFailed(.lookup(inode: inode))
    XCTAssertEqual(lookups(fs, inode), 1)
    fs.replyFailed(.lookup(inode: inode))
    XCTAssertNil(lookups(fs, inode))
    await XCTAssertErrno(.stale) { _ = try await fs.getattr(inode: inode) }
    fs.replyFailed(.lookup(inode: 0))  // a negative entry: nothing to undo
    XCTAssertEqual(fs.nodes.count, 1)
  }

  func testAFailedOpenReplyReleasesTheHandle() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("f", data: [1, 2, 3])
    let fs = makeFileSystem(store)
    let inode = try await fs.inode(at: "f")
    let kept = try await fs.open(inode: inode, flags: O_RDONLY).handle
    let lost = try await fs.open(inode: inode, flags: O_RDONLY).handle
    fs.replyFailed(.open(inode: inode, handle: lost))
    await XCTAssertErrno(.badHandle) { _ = try await fs.read(inode: inode, handle: lost, offset: 0, size: 3) }
    await XCTAssertEqualAsync(
      try await fs.read(inode: inode, handle: kept, offset: 0, size: 3).flatMap { $0.readableBytesView },
      [1, 2, 3])
    XCTAssertEqual(fs.handles.count(), 1)
    XCTAssertEqual(lookups(fs, inode), 1)
  }

  func testAFailedOpendirReplyReleasesTheHandle() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("d/f", data: [1])
    let fs = makeFileSystem(store)
    let directory = try await fs.inode(at: "d")
    let handle = try await fs.opendir(inode: directory).handle
    fs.replyFailed(.opendir(inode: directory, handle: handle))
    XCTAssertEqual(fs.handles.count(), 0)
    await XCTAssertErrno(.badHandle) {
      try await fs.readdir(inode: directory, handle: handle, offset: 0, into: CollectingBuffer())
    }
  }

  func testAFailedCreateReplyForgetsAndReleases() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("f", data: [1])
    let fs = makeFileSystem(store)
    // What a create leaves: one lookup count and an open handle.
    let inode = try await fs.inode(at: "f")
    let handle = try await fs.open(inode: inode, flags: O_RDONLY).handle
    fs.replyFailed(.create(inode: inode, handle: handle))
    XCTAssertNil(lookups(fs, inode))
    XCTAssertEqual(fs.handles.count(), 0)
  }

  func testMetadataCachePlacesStayBoundedUnderForgetAndLookupCycles() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("f", data: [1])
    store.put("g", data: [2])
    let fs = makeFileSystem(store)
    for _ in 0..<20_000 {
      let inode = try await fs.inode(at: "f")
      fs.forget(inode: inode, count: 1)
    }
    _ = try await fs.inode(at: "g")
    let (places, entries, capacity) = fs.known.metadataCache.usage
    XCTAssertEqual(entries, 1)
    XCTAssertLessThanOrEqual(places, 2 * capacity + 1024)
    XCTAssertLessThanOrEqual(
      places, 2 * entries + 1024, "stale places are bounded by the live, not the capacity")

    // A small cache still evicts oldest first after compaction.
    let cache = MetadataCache(capacity: 2)
    func metadata(_ name: String) -> ObjectMetadata {
      ObjectMetadata(
        bucket: "b", name: name, size: 0, generation: 1, metageneration: 1, timeCreated: "", updated: "")
    }
    for _ in 0..<5000 {
      cache.insert(metadata("x"))
      cache.remove("x")
    }
    XCTAssertLessThanOrEqual(cache.usage.places, 2 * 2 + 1024)
    for name in ["a", "b", "c"] { cache.insert(metadata(name)) }
    XCTAssertNil(cache["a"])
    XCTAssertNotNil(cache["b"])
    XCTAssertNotNil(cache["c"])
  }

  /// The service's metageneration may be Int64.max: the one after it is
  /// none, not a trap.
  func testALostPatchAnswerCheckSurvivesTheLargestMetageneration() {
    let proposed = ObjectMetadata(
      bucket: "b", name: "f", size: 1, generation: 7, metageneration: .max, timeCreated: "", updated: "")
    var current = proposed
    current.metageneration = .min
    XCTAssertFalse(ExtendedAttributes.isResult(current, of: proposed))
    current.metageneration = .max
    XCTAssertFalse(ExtendedAttributes.isResult(current, of: proposed))
  }

  func testAPatchRetriedAfterALostAnswerIsNotAConflict() async throws {
    let base = InMemoryObjectStore(bucket: "demo")
    base.put("f", data: [1], custom: ["old": "x"])
    let store = HeldAnswerStore(base)
    let fs = makeFileSystem(store)
    let inode = try await fs.inode(at: "f")

    // Create: the first attempt applied it, its retry got 412.
    store.losePatchAnswers()
    try await fs.setxattr(inode: inode, name: "user.custom.new", value: bytes("1"), flags: .create)
    XCTAssertEqual(base.object("f")?.custom["new"], "1")
    // Remove likewise.
    store.losePatchAnswers()
    try await fs.removexattr(inode: inode, name: "user.custom.old")
    XCTAssertNil(base.object("f")?.custom["old"])
    // Replace with a lost answer, then a real conflict still counts.
    store.losePatchAnswers()
    try await fs.setxattr(inode: inode, name: "user.custom.new", value: bytes("2"), flags: .replace)
    XCTAssertEqual(base.object("f")?.custom["new"], "2")
    await XCTAssertErrno(.exists) {
      try await fs.setxattr(inode: inode, name: "user.custom.new", value: bytes("3"), flags: .create)
    }
    XCTAssertEqual(base.object("f")?.metageneration, 4)
  }
}

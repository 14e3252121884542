import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

/// The directory cache: complete name sets (docs/SEMANTICS.md#writes-lookups),
/// kept listings, and the one way changes reach both.
final class DirectoryCacheTests: XCTestCase {
  let clock = ManualClock()

  func makeCache(pageSize: Int = 1000) -> DirectoryCache {
    DirectoryCache(
      pageSize: pageSize, freshness: 60, kernelListings: KernelListings(ttl: 0, clock: clock.read),
      clock: clock.read, onConflict: { _ in })
  }

  /// A readdir pass over `names` of `directory`, answered at the clock's time.
  func pass(_ cache: DirectoryCache, _ directory: String, _ names: [String], handle: UInt64 = 1) {
    cache.listedWhole(directory, names: Set(names.map { ObjectKey($0) }), at: clock.read())
  }

  func testANameIsKnownAbsentOnlyFromAFreshRecord() {
    let cache = makeCache()
    pass(cache, "a/", ["x"])
    let now = clock.read()
    XCTAssertTrue(cache.knownAbsent(directory: "a/", name: "y", now: now + 10, ttl: 60))
    XCTAssertFalse(cache.knownAbsent(directory: "a/", name: "x", now: now + 10, ttl: 60))
    XCTAssertFalse(cache.knownAbsent(directory: "a/", name: "y", now: now + 61, ttl: 60), "expired")
    XCTAssertFalse(cache.knownAbsent(directory: "b/", name: "y", now: now + 10, ttl: 60), "never listed")
  }

  func testAStoredKeyJoinsItsDirectoryAndEveryAncestor() {
    let cache = makeCache()
    pass(cache, "", [])
    pass(cache, "a/", [])
    pass(cache, "a/moved/", [])
    let now = clock.read()
    cache.invalidate(.stored("a/moved/deep/file.txt"))
    XCTAssertFalse(cache.knownAbsent(directory: "", name: "a", now: now, ttl: 60))
    XCTAssertFalse(cache.knownAbsent(directory: "a/", name: "moved", now: now, ttl: 60))
    XCTAssertFalse(cache.knownAbsent(directory: "a/moved/", name: "deep", now: now, ttl: 60))
    cache.invalidate(.stored("a/dir/"))
    XCTAssertFalse(cache.knownAbsent(directory: "a/", name: "dir", now: now, ttl: 60))
    XCTAssertTrue(cache.knownAbsent(directory: "a/", name: "other", now: now, ttl: 60))
    cache.invalidate(.createdInFlight("a/new", inode: 9))
    XCTAssertFalse(cache.knownAbsent(directory: "a/", name: "new", now: now, ttl: 60))
  }

  /// A file in flight is in its directory, and keeps every directory above
  /// it non-empty, until it is stored, unlinked or released unstored.
  func testAFileInFlightBelongsToItsDirectoryUntilItEnds() {
    let cache = makeCache()
    cache.invalidate(.createdInFlight("a/b/new", inode: 9))
    cache.invalidate(.createdInFlight("a/b/old", inode: 8))
    XCTAssertEqual(cache.filesInFlight(in: "a/b/").map(\.name), ["new", "old"])
    XCTAssertEqual(cache.filesInFlight(in: "a/"), [], "only its own directory lists it")
    for directory in ["a/b/", "a/", ""] { XCTAssertTrue(cache.holdsInFlight(under: directory), directory) }
    XCTAssertFalse(cache.holdsInFlight(under: "a/c/"))
    XCTAssertTrue(cache.isInFlight("a/b/new", inode: 9))
    XCTAssertFalse(cache.isInFlight("a/b/new", inode: 7), "another inode of the name")
    cache.invalidate(.endedInFlight("a/b/new", inode: 7))
    XCTAssertTrue(cache.isInFlight("a/b/new"), "an end of another inode changes nothing")
    cache.invalidate(.endedInFlight("a/b/new", inode: 9))
    cache.invalidate(.stored("a/b/old/"))
    XCTAssertTrue(cache.isInFlight("a/b/old"), "a placeholder of the name is no store of the file")
    cache.invalidate(.stored("a/b/old"))
    XCTAssertFalse(cache.isInFlight("a/b/old"))
    for directory in ["a/b/", "a/", ""] { XCTAssertFalse(cache.holdsInFlight(under: directory), directory) }
    XCTAssertEqual(cache.records, 0, "records that hold nothing go")
  }

  func testACreatedDirectoryIsACompleteEmptyListing() {
    let cache = makeCache()
    let now = clock.read()
    cache.invalidate(.createdDirectory("a/made/", since: now))
    XCTAssertTrue(cache.knownAbsent(directory: "a/made/", name: "x", now: now + 1, ttl: 60))
  }

  func testADeletedFileLeavesItsDirectoryAndAPlaceholderChangesNothing() {
    let cache = makeCache()
    pass(cache, "a/", ["x", "y"])
    let now = clock.read()
    cache.invalidate(.removed("a/x"))
    XCTAssertTrue(cache.knownAbsent(directory: "a/", name: "x", now: now, ttl: 60))
    cache.invalidate(.removed("a/y/"))
    XCTAssertFalse(
      cache.knownAbsent(directory: "a/", name: "y", now: now, ttl: 60), "a directory may live on")
    cache.invalidate(.removed("b/z"))
    XCTAssertFalse(cache.knownAbsent(directory: "b/", name: "z", now: now, ttl: 60), "never listed")
    cache.invalidate(.touched("a/y"))
    XCTAssertFalse(cache.knownAbsent(directory: "a/", name: "y", now: now, ttl: 60), "a touch changes no set")
  }

  func testAPassRecordsOnlyWhenItReachesTheEndAndIsAsOldAsItsOldestPage() throws {
    let cache = makeCache()
    let start = clock.read()
    var pass = ReaddirPass(startedAt: start)
    XCTAssertNil(pass.note([("one", start - 10)], complete: false), "not finished")
    let whole = try XCTUnwrap(pass.note([], complete: true))
    XCTAssertEqual(whole.names, [ObjectKey("one")])
    XCTAssertNil(pass.note([], complete: true), "given once")
    cache.listedWhole("d/", names: whole.names, at: whole.at)
    XCTAssertTrue(cache.knownAbsent(directory: "d/", name: "two", now: start + 49, ttl: 60))
    XCTAssertFalse(
      cache.knownAbsent(directory: "d/", name: "two", now: start + 51, ttl: 60), "from its oldest page")
    var elsewhere = ReaddirPass()
    XCTAssertNil(elsewhere.note([("x", start)], complete: true), "a pass from no first entry records nothing")
    var huge = ReaddirPass(startedAt: start)
    let names = (0...DirectoryCache.maxNames).map { ("n\($0)", start) }
    XCTAssertNil(huge.note(names, complete: true), "too large to record")
  }

  func testRecordsAreBounded() {
    let cache = makeCache()
    for i in 0...DirectoryCache.completeCapacity { pass(cache, "d\(i)/", [], handle: UInt64(i)) }
    let now = clock.read()
    XCTAssertFalse(cache.knownAbsent(directory: "d0/", name: "x", now: now, ttl: 60), "the oldest went")
    XCTAssertTrue(cache.knownAbsent(directory: "d1/", name: "x", now: now, ttl: 60))
    pass(cache, "huge/", (0...DirectoryCache.maxNames).map { "n\($0)" })
    XCTAssertFalse(cache.knownAbsent(directory: "huge/", name: "x", now: now, ttl: 60), "too large to keep")
  }

  func testCompleteSetsAreBoundedByTheirNamesTogether() {
    let cache = makeCache()
    let perDirectory = DirectoryCache.maxNames
    let fit = DirectoryCache.maxCompleteNames / perDirectory
    for i in 0...fit { pass(cache, "d\(i)/", (0..<perDirectory).map { "n\($0)" }) }
    let now = clock.read()
    XCTAssertFalse(cache.knownAbsent(directory: "d0/", name: "x", now: now, ttl: 60), "the oldest went")
    for i in 1...fit {
      XCTAssertTrue(cache.knownAbsent(directory: "d\(i)/", name: "x", now: now, ttl: 60), "d\(i)/ kept")
    }
    // A name stored here joins a kept set and counts: one more set pushes the oldest out.
    cache.invalidate(.stored("d1/extra"))
    pass(cache, "last/", (0..<(DirectoryCache.maxCompleteNames - fit * perDirectory)).map { "n\($0)" })
    XCTAssertFalse(cache.knownAbsent(directory: "d1/", name: "x", now: now, ttl: 60), "past the bound")
    XCTAssertTrue(cache.knownAbsent(directory: "d2/", name: "x", now: now, ttl: 60))
    XCTAssertTrue(cache.knownAbsent(directory: "last/", name: "x", now: now, ttl: 60))
  }

  func testAChangeDropsTheKeptListingsOfItsAncestorsAndUnderItOnly() {
    let cache = makeCache()
    let entry = ListedEntry(name: "f", kind: .file, key: "a/b/f", metadata: nil, answeredAt: clock.read())
    let listings: [TreeListing.Listing] = [("a/b/", [entry]), ("a/", []), ("c/", []), ("a/b/deep/", [])]
    cache.keep(listings, epoch: cache.epoch)
    XCTAssertEqual(cache.heldEntries, 1)
    guard case .listed? = cache.known("f", in: "a/b/") else { return XCTFail("kept") }
    cache.invalidate(.touched("a/b/g"))
    XCTAssertNil(cache.known("f", in: "a/b/"))
    XCTAssertNil(cache.known("x", in: "a/"))
    guard case .absent? = cache.known("x", in: "c/") else { return XCTFail("c/ is not on the way") }
    guard case .absent? = cache.known("x", in: "a/b/deep/") else { return XCTFail("not under a/b/g") }
    XCTAssertEqual(cache.heldEntries, 0)
    let stale = cache.epoch - 1
    cache.keep([("z/", [])], epoch: stale)
    XCTAssertNil(cache.known("x", in: "z/"), "a fill started before a change keeps nothing")
    XCTAssertNotNil(cache.take("c/"))
    XCTAssertNil(cache.take("c/"), "given once")
  }

  func testAKeptListingStandsOnlyWhileFresh() {
    let cache = makeCache()
    cache.keep([("a/", [])], epoch: cache.epoch)
    clock.advance(cache.freshness)
    XCTAssertNil(cache.known("x", in: "a/"))
    XCTAssertNil(cache.take("a/"))
  }

  /// The store is the one place writes reach the cache: a write that
  /// succeeds changes the sets, one that fails (a 412: another client's
  /// change) drops the kept listings that show its name and changes no set.
  func testTheStoreTellsEveryWriteWhateverItsOutcome() async throws {
    let cache = makeCache()
    let base = InMemoryObjectStore(bucket: "b")
    let x = base.put("a/x", data: [1])
    _ = base.put("a/y", data: [2])
    let store = ListingAwareStore(inner: base, directoryCache: cache, clock: clock.read)
    pass(cache, "a/", ["x", "y"])
    cache.keep([("a/", [])], epoch: cache.epoch)
    do {
      try await store.delete("a/y", ifGenerationMatch: 999)
      XCTFail("a wrong generation must fail")
    } catch StorageError.preconditionFailed {}
    XCTAssertNil(cache.known("y", in: "a/"), "the kept listing went")
    let now = clock.read()
    XCTAssertFalse(
      cache.knownAbsent(directory: "a/", name: "y", now: now, ttl: 60), "a failed delete removes nothing")
    try await store.delete("a/x", ifGenerationMatch: x.generation)
    XCTAssertTrue(cache.knownAbsent(directory: "a/", name: "x", now: now, ttl: 60))
    _ = try await store.upload(
      "a/z", from: BytesSource([3]), attributes: ObjectAttributes(), ifGenerationMatch: 0)
    XCTAssertFalse(cache.knownAbsent(directory: "a/", name: "z", now: now, ttl: 60))
    _ = try await store.upload(
      "a/d/", from: BytesSource([]), attributes: ObjectAttributes(), ifGenerationMatch: 0)
    XCTAssertFalse(cache.knownAbsent(directory: "a/", name: "d", now: now, ttl: 60))
    XCTAssertTrue(cache.knownAbsent(directory: "a/d/", name: "any", now: now, ttl: 60), "created empty")
  }
}

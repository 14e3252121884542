import XCTest

@testable import BucketFS

/// The record of directories listed fresh and complete (docs/SEMANTICS.md#writes#writes-lookups).
final class CompleteListingTests: XCTestCase {
  func testANameIsKnownAbsentOnlyFromAFreshRecord() {
    var listings = CompleteListings()
    listings.record(directory: "a/", names: ["x"], at: 100)
    XCTAssertTrue(listings.knownAbsent(directory: "a/", name: "y", now: 110, ttl: 60))
    XCTAssertFalse(listings.knownAbsent(directory: "a/", name: "x", now: 110, ttl: 60))
    XCTAssertFalse(listings.knownAbsent(directory: "a/", name: "y", now: 161, ttl: 60), "expired")
    XCTAssertFalse(listings.knownAbsent(directory: "b/", name: "y", now: 110, ttl: 60), "never listed")
  }

  func testAStoredKeyJoinsItsDirectoryAndEveryAncestor() {
    var listings = CompleteListings()
    listings.record(directory: "", names: [], at: 100)
    listings.record(directory: "a/", names: [], at: 100)
    listings.record(directory: "a/moved/", names: [], at: 100)
    listings.add(key: "a/moved/deep/file.txt")
    XCTAssertFalse(listings.knownAbsent(directory: "", name: "a", now: 100, ttl: 60))
    XCTAssertFalse(listings.knownAbsent(directory: "a/", name: "moved", now: 100, ttl: 60))
    XCTAssertFalse(listings.knownAbsent(directory: "a/moved/", name: "deep", now: 100, ttl: 60))
    listings.add(key: "a/dir/")
    XCTAssertFalse(listings.knownAbsent(directory: "a/", name: "dir", now: 100, ttl: 60))
    XCTAssertTrue(listings.knownAbsent(directory: "a/", name: "other", now: 100, ttl: 60))
  }

  func testADeletedFileLeavesItsDirectoryAndAPlaceholderChangesNothing() {
    var listings = CompleteListings()
    listings.record(directory: "a/", names: ["x", "y"], at: 100)
    listings.remove(key: "a/x")
    XCTAssertTrue(listings.knownAbsent(directory: "a/", name: "x", now: 100, ttl: 60))
    listings.remove(key: "a/y/")
    XCTAssertFalse(
      listings.knownAbsent(directory: "a/", name: "y", now: 100, ttl: 60), "a directory may live on")
    listings.remove(key: "b/z")
    XCTAssertFalse(listings.knownAbsent(directory: "b/", name: "z", now: 100, ttl: 60), "never listed")
  }

  func testAPassRecordsOnlyWhenItReachesTheEndAndIsAsOldAsItsOldestPage() {
    var listings = CompleteListings()
    listings.startPass(handle: 7, directory: "d/", at: 200)
    listings.note(handle: 7, name: "one", answeredAt: 190)
    XCTAssertFalse(listings.knownAbsent(directory: "d/", name: "two", now: 200, ttl: 60), "not finished")
    listings.finishPass(handle: 7)
    XCTAssertTrue(listings.knownAbsent(directory: "d/", name: "two", now: 249, ttl: 60))
    XCTAssertFalse(listings.knownAbsent(directory: "d/", name: "two", now: 251, ttl: 60), "from 190, not 200")
    listings.startPass(handle: 8, directory: "e/", at: 200)
    listings.dropPass(handle: 8)
    listings.finishPass(handle: 8)
    XCTAssertFalse(listings.knownAbsent(directory: "e/", name: "x", now: 200, ttl: 60))
  }

  func testRecordsAreBounded() {
    var listings = CompleteListings()
    for i in 0...CompleteListings.capacity { listings.record(directory: "d\(i)/", names: [], at: 0) }
    XCTAssertFalse(listings.knownAbsent(directory: "d0/", name: "x", now: 0, ttl: 60), "the oldest went")
    XCTAssertTrue(listings.knownAbsent(directory: "d1/", name: "x", now: 0, ttl: 60))
    listings.record(directory: "huge/", names: Set((0...CompleteListings.maxNames).map { "n\($0)" }), at: 0)
    XCTAssertFalse(listings.knownAbsent(directory: "huge/", name: "x", now: 0, ttl: 60), "too large to keep")
  }
}

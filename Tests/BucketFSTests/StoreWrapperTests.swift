import ObjectStore
import StorageFake
import Synchronization
import XCTest

@testable import BucketFS

/// The wrappers built on ForwardingObjectStore: the filesystem's own store
/// forwards every requirement it does not change, and the doubles' changes
/// reach the overloads callers use.
final class StoreWrapperTests: XCTestCase {
  final class Handed: Sendable {
    let token = Mutex<String?>(nil)
  }

  func testTheListingAwareStoreForwardsEveryRequirement() async throws {
    let recorder = RecordingStore(InMemoryObjectStore(bucket: "b"))
    let clock = ManualClock()
    let cache = DirectoryCache(
      pageSize: 1000, freshness: 1, kernelListings: KernelListings(ttl: 0, clock: clock.read),
      clock: clock.read, onConflict: { _ in })
    let store = ListingAwareStore(inner: recorder, directoryCache: cache, clock: clock.read)
    let seen = try await recorder.callEveryRequirement(of: store)
    XCTAssertEqual(seen, .unchanged)
    XCTAssertEqual(recorder.calls, RecordingStore.Requirement.allCases, "each once, overloads apart")
    XCTAssertEqual(recorder.base.readsIntoSpares, 1, "the spare reached the inner store")
  }

  func testAHeldListHoldsTheTokenHandingListToo() async throws {
    let base = InMemoryObjectStore(bucket: "b")
    base.put("d/a", data: [1])
    base.put("d/b", data: [2])
    let store = HeldAnswerStore(base)
    store.hold(.list)
    let handed = Handed()
    let listing = Task {
      try await store.list(
        ListRequest(
          prefix: "d/", delimiter: "/", pageSize: 1,
          onNextPageToken: { token in handed.token.withLock { $0 = token } }
        ))
    }
    let held = await eventually { store.taken(.list) == 1 }
    XCTAssertTrue(held, "the list with a token taker went through the hold")
    XCTAssertNil(handed.token.withLock { $0 }, "no token before the release")
    store.release(.list)
    let page = try await listing.value
    XCTAssertNotNil(page.nextPageToken)
    XCTAssertEqual(handed.token.withLock { $0 }, page.nextPageToken)
  }
}

import FUSE
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

/// A lookup the mount cannot answer from what it holds is one list call from
/// `name` up to `name0`: the object `name`, the names that go on with a byte
/// below `/` (`name-x`, `name.txt`), then the subtree `name/…`
/// (docs/SEMANTICS.md#listing-lookup).
final class OneListLookupTests: XCTestCase {
  func testAFileIsOneListCallAndItsMetadataComesWithIt() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    store.put("d/report", data: bytes("12345"), custom: ["owner": "me"])
    store.put("d/report.bak", data: [])
    store.put("d/report0", data: [])
    store.put("d/reportz", data: [])
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    let d = try await fs.inode(at: "d")
    clock.advance(11)  // past the listing d's lookup kept, which would answer
    store.resetCalls()
    let entry = try await fs.lookup(parent: d, name: "report")
    let attributes = try XCTUnwrap(entry.attributes)
    XCTAssertEqual(attributes.kind, .file)
    XCTAssertEqual(attributes.size, 5)
    let owner = try await fs.getxattr(inode: attributes.inode, name: "user.custom.owner")
    XCTAssertEqual(String(decoding: owner, as: UTF8.self), "me")
    XCTAssertEqual(
      store.calls, [.list(prefix: "d/report", pageToken: nil)], "no GET: the page showed the object")
  }

  func testANameNeitherObjectNorPrefixIsAbsentAfterOneCall() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    store.put("d/x", data: [])
    store.put("d/nothing-here", data: [])
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    let d = try await fs.inode(at: "d")
    clock.advance(11)  // past the listing d's lookup kept, which would answer
    store.resetCalls()
    let entry = try await fs.lookup(parent: d, name: "nothing")
    XCTAssertNil(entry.attributes)
    XCTAssertEqual(store.calls, [.list(prefix: "d/nothing", pageToken: nil)])
  }

  func testADirectoryWinsOverTheObjectOfItsNameInOnePage() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    store.put("photos", data: bytes("file"))
    store.put("photos-old/a", data: [])
    store.put("photos/2024.jpg", data: [])
    let fs = makeFileSystem(store)
    await XCTAssertEqualAsync(try await fs.kind(at: "photos"), .directory)
    XCTAssertEqual(store.calls, [.list(prefix: "photos", pageToken: nil)])
    // The subtree ended within the page: it is kept; `photos-old/a` is not in it.
    store.resetCalls()
    let photos = try await fs.inode(at: "photos")
    await XCTAssertEqualAsync(try await fs.names(of: photos), ["2024.jpg"])
    XCTAssertEqual(store.calls, [])
  }

  func testOtherNamesFillingThePageAskTheNameApartThenRemembered() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    // `src-old/…` sorts between `src` and `src/`, and fills a page of 10.
    for i in 0..<12 { store.put(String(format: "src-old/f%02d", i), data: []) }
    store.put("src/main.c", data: [])
    let fs = makeFileSystem(store, pageSize: 10)
    await XCTAssertEqualAsync(try await fs.kind(at: "src"), .directory)
    XCTAssertEqual(store.calls.first, .list(prefix: "src", pageToken: nil))
    XCTAssertEqual(
      Set(store.calls.dropFirst().map(\.description)), ["metadata(src)", "list(src/, token: nil)"],
      "then the object and the subtree apart, as before")
    // The next lookup of the name goes apart at once.
    store.resetCalls()
    fs.nodes.deleted("src/")
    await XCTAssertEqualAsync(try await fs.kind(at: "src"), .directory)
    XCTAssertEqual(Set(store.calls.map(\.description)), ["metadata(src)", "list(src/, token: nil)"])
  }

  func testAFileAmongManyLongerNamesIsStillOneCall() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    // `a1…`, `a2…` sort after `a/` and after the end offset: they cost nothing.
    store.put("a", data: bytes("x"))
    for i in 0..<30 { store.put("a\(i)", data: []) }
    let fs = makeFileSystem(store, pageSize: 10)
    await XCTAssertEqualAsync(try await fs.kind(at: "a"), .file)
    XCTAssertEqual(store.calls, [.list(prefix: "a", pageToken: nil)])
  }

  func testALargeDirectoryIsLookedUpByDelimiterInOneCall() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    store.put("big", data: bytes("shadowed"))
    for i in 0..<25 { store.put(String(format: "big/f%02d", i), data: []) }
    store.put("big.txt", data: [])
    let fs = makeFileSystem(store, pageSize: 10)
    await XCTAssertEqualAsync(try await fs.kind(at: "big"), .directory)
    fs.nodes.deleted("big/")
    store.resetCalls()
    await XCTAssertEqualAsync(try await fs.kind(at: "big"), .directory)
    await XCTAssertEqualAsync(try await fs.kind(at: "big.txt"), .file)
    XCTAssertEqual(
      store.calls, [.list(prefix: "big", pageToken: nil), .list(prefix: "big.txt", pageToken: nil)])
    XCTAssertEqual(store.flatLists, ["big.txt"], "the large one by delimiter")
  }
}

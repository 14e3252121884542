import ObjectStore
import StorageFake
import XCTest

/// `includeTrailingDelimiter=true` (objects.list): an object whose name past
/// the prefix ends in its only delimiter, a directory's placeholder, is
/// returned in `items` as well as in `prefixes`; the two take one place of
/// the page's `maxResults`, so they never fall on different pages.
final class TrailingDelimiterTests: XCTestCase {
  private func seeded() -> InMemoryObjectStore {
    let store = InMemoryObjectStore(bucket: "bkt")
    for name in ["d/", "d/a", "d/b/", "d/b/1", "d/c/x", "d/e/", "d/f", "d/g//", "d/g//y"] {
      store.put(name, data: Array(name.utf8))
    }
    return store
  }

  func testPlaceholdersOfSubdirectoriesAreItemsToo() async throws {
    let store = seeded()
    let page = try await store.list(
      ListRequest(
        prefix: "d/", delimiter: "/", includeTrailingDelimiter: true, pageSize: 100))
    // d/ is the listed prefix's own placeholder (an item either way); d/g// ends in two delimiters.
    XCTAssertEqual(page.items.map(\.name), ["d/", "d/a", "d/b/", "d/e/", "d/f"])
    XCTAssertEqual(page.prefixes, ["d/b/", "d/c/", "d/e/", "d/g/"])
    XCTAssertEqual(page.items.first { $0.name == "d/e/" }?.size, 4, "the placeholder's own metadata")

    let without = try await store.list(ListRequest(prefix: "d/", delimiter: "/", pageSize: 100))
    XCTAssertEqual(without.items.map(\.name), ["d/", "d/a", "d/f"])
    XCTAssertEqual(without.prefixes, page.prefixes)

    // Without a delimiter every object is an item anyway.
    let flat = try await store.list(
      ListRequest(
        prefix: "d/b/", includeTrailingDelimiter: true, pageSize: 100))
    XCTAssertEqual(flat.items.map(\.name), ["d/b/", "d/b/1"])
  }

  func testAPlaceholderSharesItsPrefixsPlaceOnThePage() async throws {
    let store = seeded()
    var pages: [ListPage] = []
    var token: String?
    repeat {
      let page = try await store.list(
        ListRequest(
          prefix: "d/", delimiter: "/", includeTrailingDelimiter: true, pageSize: 2, pageToken: token))
      pages.append(page)
      token = page.nextPageToken
    } while token != nil && pages.count < 20
    XCTAssertEqual(
      pages.map { $0.items.map(\.name) + $0.prefixes.map { "P:" + $0 } },
      [["d/", "d/a"], ["d/b/", "P:d/b/", "P:d/c/"], ["d/e/", "d/f", "P:d/e/"], ["P:d/g/"]])
    XCTAssertEqual(store.calls(.list).count, 4, "7 entries of the listing, 2 a page")
  }

  func testTheServerHonoursTheParameter() async throws {
    let server = FakeStorageServer(bucket: "bkt")
    for name in ["d/", "d/a", "d/b/", "d/b/1", "d/c/x"] { server.store.put(name, data: [1]) }
    try await server.start()
    do {
      let base = server.endpoint + "/storage/v1/b/bkt/o?prefix=d%2F&delimiter=%2F"
      let with = try await curl(base + "&includeTrailingDelimiter=true")
      XCTAssertEqual(with.status, 200, with.text)
      XCTAssertEqual(
        (with.json["items"] as? [[String: Any]])?.map { $0["name"] as? String }, ["d/", "d/a", "d/b/"])
      XCTAssertEqual(with.json["prefixes"] as? [String], ["d/b/", "d/c/"])
      let without = try await curl(base + "&includeTrailingDelimiter=false")
      XCTAssertEqual(without.status, 200, without.text)
      XCTAssertEqual(
        (without.json["items"] as? [[String: Any]])?.map { $0["name"] as? String }, ["d/", "d/a"])
      XCTAssertEqual(without.json["prefixes"] as? [String], ["d/b/", "d/c/"])
      let bad = try await curl(base + "&includeTrailingDelimiter=yes")
      XCTAssertEqual(bad.status, 400, bad.text)
    } catch {
      try await server.stop()
      throw error
    }
    try await server.stop()
  }
}

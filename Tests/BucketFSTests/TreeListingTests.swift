import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

/// Listings derived from flat pages equal the delimiter listings, over
/// generated trees with odd names.
final class TreeListingTests: XCTestCase {
  func testFlatPagesGiveTheSameDirectoriesAsDelimiterListings() async throws {
    var random = SplitMix64.forTest(seed: 14)
    for round in 0..<60 {
      let store = InMemoryObjectStore(bucket: "b")
      for name in Self.generatedNames(count: Int.random(in: 1...80, using: &random), using: &random) {
        store.put(name, data: [])
      }
      let pageSize = Int.random(in: 1...7, using: &random)
      let expected = try await Self.delimiterTree(store, root: "", pageSize: pageSize)
      let derived = try await Self.flatTree(store, root: "", pageSize: Int.random(in: 1...9, using: &random))
      XCTAssertEqual(Self.sorted(derived), Self.sorted(expected), "round \(round), names \(store.names)")
      // A subtree's flat listing gives the same listings for that subtree.
      for root in expected.keys.sorted(by: Names.precedes) where !root.isEmpty && Bool.random(using: &random)
      {
        let subtree = expected.filter { $0.key.utf8.starts(with: root.utf8) }
        let flat = try await Self.flatTree(store, root: root, pageSize: pageSize)
        XCTAssertEqual(Self.sorted(flat), Self.sorted(subtree), "round \(round), subtree \(root)")
      }
    }
  }

  func testConflictsArePassedOnAndPlaceholdersAreNotEntries() {
    var warned: [String] = []
    var tree = TreeListing(root: "", onConflict: { warned.append($0) })
    var done: [TreeListing.Listing] = []
    for name in ["a", "a!", "a/", "a/b", "c/", "c/./x", "d//e"] {
      done += tree.add(Self.object(name), answeredAt: 0)
    }
    done += tree.finish()
    let listings = Dictionary(uniqueKeysWithValues: done.map { ($0.key, $0.entries.map(\.name)) })
    XCTAssertEqual(listings, ["": ["a!", "a", "c", "d"], "a/": ["b"], "c/": [], "d/": []])
    XCTAssertEqual(warned, ["a"])
    XCTAssertEqual(tree.held, 0)
  }

  // MARK: - Helpers

  static let components = [
    "a", "b", "a b", "a!", "a.txt", "é", "日本", "z", "-", ".", "..", "", String(repeating: "x", count: 256),
    String(repeating: "y", count: 255),
  ]

  /// Names of 1 to 4 components from a small pool, so that files and
  /// directories of the same name, placeholders and invalid components meet.
  static func generatedNames(count: Int, using random: inout SplitMix64) -> Set<String> {
    var names = Set<String>()
    for _ in 0..<count {
      let depth = Int.random(in: 1...4, using: &random)
      var parts = (0..<depth).map { _ in components.randomElement(using: &random)! }
      if Int.random(in: 0..<5, using: &random) == 0 { parts.append("") }  // a placeholder `dir/`
      let name = parts.joined(separator: "/")
      if !name.isEmpty { names.insert(name) }
    }
    return names
  }

  struct Row: Equatable, CustomStringConvertible {
    let name: String
    let kind: Node.Kind
    let key: String
    var description: String { "\(name)\(kind == .directory ? "/" : "")" }
  }

  /// Every directory reachable from `root` by delimiter listings (what
  /// ``DirectoryStream`` shows), with its entries.
  static func delimiterTree(_ store: InMemoryObjectStore, root: String, pageSize: Int) async throws
    -> [String:
    [Row]]
  {
    var result: [String: [Row]] = [:]
    var pending = [root]
    while let key = pending.popLast() {
      let stream = DirectoryStream(
        prefix: key, context: makeContext(store, clock: { 0 }), pageSize: pageSize)
      var rows: [Row] = []
      while true {
        let batch = try await stream.entries(from: rows.count)
        if batch.isEmpty { break }
        rows += batch.map { Row(name: $0.name, kind: $0.kind, key: $0.key) }
      }
      result[key] = rows
      pending += rows.filter { $0.kind == .directory }.map(\.key)
    }
    return result
  }

  /// The same from the flat listing of `root`, page by page.
  static func flatTree(_ store: InMemoryObjectStore, root: String, pageSize: Int) async throws -> [String:
    [Row]]
  {
    var tree = TreeListing(root: root)
    var result: [String: [Row]] = [:]
    var token: String?
    repeat {
      let page = try await store.list(ListRequest(prefix: root, pageSize: pageSize, pageToken: token))
      var done: [TreeListing.Listing] = []
      for item in page.items { done += tree.add(item, answeredAt: 0) }
      token = page.nextPageToken
      if token == nil { done += tree.finish() }
      for (key, entries) in done {
        XCTAssertNil(result[key], "\(key) completed twice")
        result[key] = entries.map { Row(name: $0.name, kind: $0.kind, key: $0.key) }
      }
    } while token != nil
    return result
  }

  /// Contents, not order: a delimiter listing shows a file that a directory
  /// of the same name may shadow after the next page's entries (it waits for
  /// that page), a flat one in byte order.
  static func sorted(_ tree: [String: [Row]]) -> [String: [Row]] {
    tree.mapValues { $0.sorted { Names.precedes($0.key, $1.key) } }
  }

  static func object(_ name: String) -> ObjectMetadata {
    ObjectMetadata(
      bucket: "b", name: name, size: 0, generation: 1, metageneration: 1, timeCreated: "", updated: "")
  }
}

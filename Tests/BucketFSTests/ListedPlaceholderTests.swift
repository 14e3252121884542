import FUSE
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

/// A directory listing asks with includeTrailingDelimiter, so each
/// subdirectory's placeholder comes with its prefix: `ls -l` shows stored
/// modes with no request per subdirectory (docs/SEMANTICS.md#attributes-modes).
final class ListedPlaceholderTests: XCTestCase {
  private let mode = "goog-reserved-posix-mode"

  func testColdReaddirplusShowsEverySubdirectorysModeWithNoGet() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    // 10 entries, 3 a page: 4 list calls. Each page ends with a file or is the last.
    store.put("top/a1/x", data: bytes("x"))
    store.put("top/a2/", data: [], custom: [mode: "700"])
    store.put("top/b", data: bytes("x"))
    store.put("top/c1/x", data: bytes("x"))
    store.put("top/c2/", data: [], custom: [mode: "750", "goog-reserved-posix-uid": "42"])
    store.put("top/c2/x", data: bytes("x"))
    store.put("top/d", data: bytes("x"))
    store.put("top/e1/x", data: bytes("x"))
    store.put("top/e2/", data: [])
    store.put("top/f", data: bytes("x"))
    store.put("top/g1/x", data: bytes("x"))
    let clock = ManualClock()
    let fs = makeFileSystem(store, pageSize: 3, clock: clock)
    let top = try await fs.inode(at: "top")
    // Past the second in which top's opendir would take its lookup's flat page.
    clock.advance(fs.directoryCache.followWindow)
    store.resetCalls()

    let listed = try await fs.entries(of: top)
    XCTAssertEqual(listed.map(\.name), ["a1", "a2", "b", "c1", "c2", "d", "e1", "e2", "f", "g1"])
    XCTAssertEqual(store.calls(.list).count, 4, "⌈10 / 3⌉")
    let expected: [String: (UInt32, UInt32)] = [
      "a1": (0o755, 1234), "a2": (0o700, 1234), "c1": (0o755, 1234), "c2": (0o750, 42),
      "e1": (0o755, 1234), "e2": (0o755, 1234), "g1": (0o755, 1234),
    ]
    for (name, entry) in listed where expected[name] != nil {
      let attributes = try XCTUnwrap(entry.attributes, name)
      XCTAssertEqual(attributes.kind, .directory, name)
      XCTAssertEqual(attributes.permissions, expected[name]?.0, name)
      XCTAssertEqual(attributes.uid, expected[name]?.1, name)
      XCTAssertGreaterThan(entry.attributeTimeout, 0, "\(name): known from the listing, the kernel keeps it")
      // What ls -l's stat then sees, with no request.
      let (stat, _) = try await fs.getattr(inode: attributes.inode)
      XCTAssertEqual(stat.permissions, expected[name]?.0, name)
      XCTAssertEqual(stat.uid, expected[name]?.1, name)
    }
    XCTAssertEqual(store.calls(.metadata), [], "no GET of any placeholder")
    XCTAssertEqual(store.calls(.list).count, 4)
  }

  /// The service puts a placeholder on the page of its prefix, but nothing
  /// documents it: a page that ends with a prefix and not its placeholder
  /// leaves the directory to its first stat (one GET), never to the defaults.
  func testAPageEndingWithAPrefixAloneLeavesItToStat() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("top/a/x", data: bytes("x"))
    store.put("top/b", data: bytes("x"))
    store.put("top/c/", data: [], custom: [mode: "711"])
    store.put("top/d", data: bytes("x"))
    store.put("top/e/", data: [], custom: [mode: "701"])
    let clock = ManualClock()
    let fs = makeFileSystem(store, pageSize: 1, clock: clock)
    let top = try await fs.inode(at: "top")
    // Past the second in which top's opendir would take its lookup's flat page.
    clock.advance(fs.directoryCache.followWindow)
    store.resetCalls()

    let listed = try await fs.entries(of: top)
    XCTAssertEqual(listed.map(\.name), ["a", "b", "c", "d", "e"])
    XCTAssertEqual(store.calls(.list).count, 5)
    let a = try XCTUnwrap(listed.first { $0.name == "a" }?.entry)
    XCTAssertEqual(a.attributeTimeout, 0, "not known: the kernel asks at stat")
    // A placeholder with its prefix, on a page of one entry: known.
    let c = try XCTUnwrap(listed.first { $0.name == "c" }?.entry)
    XCTAssertEqual(c.attributes?.permissions, 0o711)
    XCTAssertGreaterThan(c.attributeTimeout, 0)
    let e = try XCTUnwrap(listed.first { $0.name == "e" }?.entry)
    XCTAssertEqual(e.attributes?.permissions, 0o701)

    let (stat, _) = try await fs.getattr(inode: try XCTUnwrap(a.attributes?.inode))
    XCTAssertEqual(stat.permissions, 0o755)
    XCTAssertEqual(store.calls(.metadata), [.metadata("top/a/")])
  }

  func testAPlaceholderIsNeverAFileAndAChmodShowsInTheNextListing() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("top/s/", data: [], custom: [mode: "700"])
    let fs = makeWritingFileSystem(store)
    let top = try await fs.inode(at: "top")
    let first = try await fs.entries(of: top)
    XCTAssertEqual(first.map(\.name), ["s"])
    XCTAssertEqual(first.first?.entry.attributes?.kind, .directory)
    let s = try XCTUnwrap(first.first?.entry.attributes?.inode)
    _ = try await fs.setattr(inode: s, handle: nil, changes: AttributeChanges(mode: 0o750))
    XCTAssertEqual(store.object("top/s/")?.custom[mode], "750")
    let again = try await fs.entries(of: top)
    XCTAssertEqual(again.first?.entry.attributes?.permissions, 0o750)
  }

  func testABurstOfLookupsTakesSubdirectoryModesFromItsSharedPage() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    for i in 0..<30 { store.put(String(format: "d/f%02d", i), data: []) }
    store.put("d/s1/", data: [], custom: [mode: "700"])
    store.put("d/s1/x", data: [])
    store.put("d/s2/x", data: [])
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    let dir = try await fs.inode(at: "d")
    clock.advance(11)  // past the listing of d/ its lookup kept
    store.resetCalls()
    store.latency = .milliseconds(50)
    let names = (0..<30).map { String(format: "f%02d", $0) } + ["s1", "s2"]
    let answers = try await withThrowingTaskGroup(of: (String, Entry).self) { group in
      for name in names {
        group.addTask {
          let entry = try await fs.lookup(parent: dir, name: name)
          return (name, entry)
        }
      }
      return try await group.reduce(into: [String: Entry]()) { $0[$1.0] = $1.1 }
    }
    XCTAssertEqual(
      store.calls(.list).count, NameLookup.burstSize, "two lookups on their own, the rest share one")
    let gets = store.calls(.metadata).count
    for (name, permissions) in [("s1", UInt32(0o700)), ("s2", UInt32(0o755))] {
      let entry = try XCTUnwrap(answers[name])
      XCTAssertEqual(entry.attributes?.permissions, permissions, name)
      XCTAssertGreaterThan(entry.attributeTimeout, 0, name)
      let (stat, _) = try await fs.getattr(inode: try XCTUnwrap(entry.attributes?.inode))
      XCTAssertEqual(stat.permissions, permissions, name)
    }
    XCTAssertEqual(store.calls(.metadata).count, gets, "no GET of a placeholder")
  }
}

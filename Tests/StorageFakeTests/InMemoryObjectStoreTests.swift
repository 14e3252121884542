import ObjectStore
import XCTest

@testable import StorageFake

/// One entry of a listing, to compare the merged order of items and prefixes.
enum Entry: Equatable, CustomStringConvertible {
  case item(String)
  case prefix(String)

  var description: String {
    switch self {
    case .item(let name): "item \(name)"
    case .prefix(let name): "prefix \(name)"
    }
  }
}

/// A page's entries in service order: items and prefixes merged by byte order.
func entries(_ page: ListPage) -> [Entry] {
  let all = page.items.map { Entry.item($0.name) } + page.prefixes.map { Entry.prefix($0) }
  return all.sorted { a, b in
    func key(_ e: Entry) -> [UInt8] {
      switch e {
      case .item(let n), .prefix(let n): Array(n.utf8)
      }
    }
    return key(a).lexicographicallyPrecedes(key(b))
  }
}

/// Every page of a listing.
func allPages(
  _ store: InMemoryObjectStore, prefix: String, delimiter: String? = "/", pageSize: Int
) async throws -> [ListPage] {
  var pages: [ListPage] = []
  var token: String?
  repeat {
    let page = try await store.list(
      ListRequest(
        prefix: prefix, delimiter: delimiter, pageSize: pageSize, pageToken: token))
    pages.append(page)
    token = page.nextPageToken
  } while token != nil && pages.count < 10_000
  return pages
}

func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

final class ChecksumTests: XCTestCase {
  func testMD5KnownValues() {
    XCTAssertEqual(Checksum.md5Base64([]), "1B2M2Y8AsgTpgAmY7PhCfg==")
    XCTAssertEqual(
      Checksum.md5Base64(bytes("The quick brown fox jumps over the lazy dog")), "nhB9nTcrtoJr2B01QqQZ1g==")
    // Lengths around the padding boundaries, checked against Python's hashlib.
    let expected = [
      55: "aRLuZf/y2fnOJQjN34vNoA==", 56: "Uf3RrNpyQF39+gP8uFiW1w==", 63: "SKYpUiGQLo4JOPdzpxhecg==",
      64: "stP1a8GX/ZhdWWUHm15xSA==", 65: "i9cFOAHHaEIPr4FvrbqXHA==", 1000: "ok8ePvZpUOEyfyEOOZe6LA==",
    ]
    for (length, digest) in expected {
      let data = (0..<length).map { UInt8($0 % 251) }
      XCTAssertEqual(Checksum.md5Base64(data), digest, "length \(length)")
    }
  }

  func testCRC32C() {
    XCTAssertEqual(Checksum.crc32c(bytes("123456789")), 0xe306_9283)
    XCTAssertEqual(Checksum.crc32cBase64(bytes("123456789")), "4waSgw==")
    XCTAssertEqual(Checksum.crc32cBase64([]), "AAAAAA==")
  }

  func testBase64RoundTrip() {
    for length in 0..<10 {
      let data = (0..<length).map { UInt8(truncatingIfNeeded: $0 * 37 + 200) }
      XCTAssertEqual(Base64.decode(Base64.encode(data)), data)
    }
    XCTAssertNil(Base64.decode("abc"))
    XCTAssertNil(Base64.decode("a=bc"))
    XCTAssertNil(Base64.decode("ab!c"))
  }

  func testTimestamps() {
    XCTAssertEqual(Timestamp.rfc3339(millis: 0), "1970-01-01T00:00:00.000Z")
    XCTAssertEqual(Timestamp.rfc3339(millis: 951_782_400_123), "2000-02-29T00:00:00.123Z")
    XCTAssertEqual(Timestamp.rfc3339(millis: -1), "1969-12-31T23:59:59.999Z")
    XCTAssertEqual(Timestamp.rfc3339(millis: 1_735_689_599_999), "2024-12-31T23:59:59.999Z")
  }
}

final class InMemoryObjectStoreTests: XCTestCase {
  // MARK: Seeding

  func testPutFillsServiceFields() throws {
    let store = InMemoryObjectStore(bucket: "bkt")
    let first = store.put("a.txt", data: bytes("hello"), contentType: "text/plain", custom: ["k": "v"])
    XCTAssertEqual(first.bucket, "bkt")
    XCTAssertEqual(first.size, 5)
    XCTAssertEqual(first.metageneration, 1)
    XCTAssertEqual(first.timeCreated, first.updated)
    XCTAssertNotNil(
      first.timeCreated.range(
        of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"#, options: .regularExpression))
    XCTAssertEqual(first.md5Hash, Checksum.md5Base64(bytes("hello")))
    XCTAssertEqual(first.crc32c, Checksum.crc32cBase64(bytes("hello")))
    XCTAssertEqual(first.storageClass, "STANDARD")
    XCTAssertEqual(first.contentType, "text/plain")
    XCTAssertNil(first.cacheControl)
    XCTAssertEqual(first.custom, ["k": "v"])
    XCTAssertNotNil(first.etag)

    let second = store.put("a.txt", data: bytes("bye"))
    XCTAssertGreaterThan(second.generation, first.generation)
    XCTAssertEqual(second.metageneration, 1)
    XCTAssertNotEqual(second.etag, first.etag)
    XCTAssertEqual(store.data("a.txt"), bytes("bye"))
    XCTAssertEqual(store.object("a.txt"), second)
    XCTAssertTrue(store.delete("a.txt"))
    XCTAssertFalse(store.delete("a.txt"))
    XCTAssertNil(store.object("a.txt"))
  }

  // MARK: Listing

  /// A directory mixing items, sub-prefixes and its own placeholder.
  func seededDirectory() -> InMemoryObjectStore {
    let store = InMemoryObjectStore(bucket: "bkt")
    // Seeded out of order on purpose.
    for name in ["d/e", "c", "d/b/2", "d/", "d/d/x", "d/a", "e/z", "d/b/1", "d/c", "d/f/", "d"] {
      store.put(name, data: bytes(name))
    }
    return store
  }

  func testPagingCountsItemsAndPrefixesTogether() async throws {
    let store = seededDirectory()
    let pages = try await allPages(store, prefix: "d/", pageSize: 2)
    XCTAssertEqual(
      pages.map(entries),
      [
        [.item("d/"), .item("d/a")],
        [.prefix("d/b/"), .item("d/c")],
        [.prefix("d/d/"), .item("d/e")],
        [.prefix("d/f/")],
      ])
    XCTAssertEqual(pages.map { $0.items.count + $0.prefixes.count }, [2, 2, 2, 1])
    XCTAssertEqual(pages.map { $0.nextPageToken == nil }, [false, false, false, true])
    XCTAssertEqual(store.calls(.list).count, 4)

    // Page size 3: the boundary falls elsewhere, same sequence.
    let threes = try await allPages(store, prefix: "d/", pageSize: 3)
    XCTAssertEqual(threes.map { entries($0).count }, [3, 3, 1])
    XCTAssertEqual(threes.flatMap(entries), pages.flatMap(entries))
  }

  func testSinglePageAndRoot() async throws {
    let store = seededDirectory()
    let page = try await store.list(ListRequest(prefix: "d/", delimiter: "/", pageSize: 1000))
    XCTAssertEqual(page.items.map(\.name), ["d/", "d/a", "d/c", "d/e"])
    XCTAssertEqual(page.prefixes, ["d/b/", "d/d/", "d/f/"])
    XCTAssertNil(page.nextPageToken)

    let root = try await store.list(ListRequest(prefix: "", delimiter: "/", pageSize: 1000))
    XCTAssertEqual(root.items.map(\.name), ["c", "d"])
    XCTAssertEqual(root.prefixes, ["d/", "e/"])

    let flat = try await store.list(ListRequest(prefix: "d/b", pageSize: 1000))
    XCTAssertEqual(flat.items.map(\.name), ["d/b/1", "d/b/2"])
    XCTAssertEqual(flat.prefixes, [])

    let emptyDelimiter = try await store.list(ListRequest(prefix: "d/b", delimiter: "", pageSize: 1000))
    XCTAssertEqual(emptyDelimiter.items.map(\.name), ["d/b/1", "d/b/2"])

    let none = try await store.list(ListRequest(prefix: "zz/", delimiter: "/", pageSize: 10))
    XCTAssertEqual(none, ListPage(items: [], prefixes: [], nextPageToken: nil))
  }

  func testPlaceholderIsAnItemUnderItsOwnPrefix() async throws {
    let store = InMemoryObjectStore(bucket: "bkt")
    store.put("dir/", data: [])
    let page = try await store.list(ListRequest(prefix: "dir/", delimiter: "/", pageSize: 10))
    XCTAssertEqual(page.items.map(\.name), ["dir/"])
    XCTAssertEqual(page.prefixes, [])
    let root = try await store.list(ListRequest(prefix: "", delimiter: "/", pageSize: 10))
    XCTAssertEqual(root.items.map(\.name), [])
    XCTAssertEqual(root.prefixes, ["dir/"])
  }

  func testDoubleSlashBecomesItsOwnPrefix() async throws {
    let store = InMemoryObjectStore(bucket: "bkt")
    // The SDK example of docs/SEMANTICS.md#names-tree.
    for name in ["correctPrefix/happyItem", "wrongPrefix//sadItem", "lonelyItem/", "a//b", "a/c"] {
      store.put(name, data: [1])
    }
    let a = try await store.list(ListRequest(prefix: "a/", delimiter: "/", pageSize: 10))
    XCTAssertEqual(a.prefixes, ["a//"])
    XCTAssertEqual(a.items.map(\.name), ["a/c"])

    let root = try await store.list(ListRequest(prefix: "", delimiter: "/", pageSize: 10))
    XCTAssertEqual(root.prefixes, ["a/", "correctPrefix/", "lonelyItem/", "wrongPrefix/"])
    XCTAssertEqual(root.items, [])
    let wrong = try await store.list(ListRequest(prefix: "wrongPrefix/", delimiter: "/", pageSize: 10))
    XCTAssertEqual(wrong.prefixes, ["wrongPrefix//"])
    XCTAssertEqual(wrong.items, [])
    let lonely = try await store.list(ListRequest(prefix: "lonelyItem/", delimiter: "/", pageSize: 10))
    XCTAssertEqual(lonely.items.map(\.name), ["lonelyItem/"])
  }

  func testByteOrderAndDistinctUnicodeForms() async throws {
    let store = InMemoryObjectStore(bucket: "bkt")
    let composed = "\u{e9}"  // é, C3 A9
    let decomposed = "e\u{301}"  // e + combining acute, 65 CC 81: equal as Swift Strings
    for name in ["z", composed, "a", "~", decomposed, "B", "a b", "a%2F"] {
      store.put(name, data: bytes(name))
    }
    XCTAssertEqual(store.names.count, 8)
    XCTAssertEqual(
      store.names.map { Array($0.utf8) },
      [
        "B", "a", "a b", "a%2F", decomposed, "z", "~", composed,
      ].map { Array($0.utf8) })
    XCTAssertEqual(store.data(composed), bytes(composed))
    XCTAssertEqual(store.data(decomposed), bytes(decomposed))
    let page = try await store.list(ListRequest(prefix: "", delimiter: "/", pageSize: 1000))
    XCTAssertEqual(page.items.map { Array($0.name.utf8) }, store.names.map { Array($0.utf8) })
  }

  func testPageSizeIsClamped() async throws {
    let store = InMemoryObjectStore(bucket: "bkt")
    for i in 0..<1500 { store.put("f/\(i)", data: []) }
    let big = try await store.list(ListRequest(prefix: "f/", delimiter: "/", pageSize: 5000))
    XCTAssertEqual(big.items.count, 1000)
    XCTAssertNotNil(big.nextPageToken)
    let rest = try await store.list(
      ListRequest(
        prefix: "f/", delimiter: "/", pageSize: 5000, pageToken: big.nextPageToken))
    XCTAssertEqual(rest.items.count, 500)
    XCTAssertNil(rest.nextPageToken)
    let zero = try await store.list(ListRequest(prefix: "f/", delimiter: "/", pageSize: 0))
    XCTAssertEqual(zero.items.count, 1)
  }

  func testTokenSurvivesChangesBetweenPages() async throws {
    let store = InMemoryObjectStore(bucket: "bkt")
    for name in ["a", "b", "c/1", "d", "e"] { store.put(name, data: []) }
    let first = try await store.list(ListRequest(prefix: "", delimiter: "/", pageSize: 2))
    XCTAssertEqual(entries(first), [.item("a"), .item("b")])
    // The last returned item disappears, one appears before it, one after it.
    store.delete("b")
    store.put("a0", data: [])
    store.put("bb", data: [])
    let second = try await store.list(
      ListRequest(prefix: "", delimiter: "/", pageSize: 2, pageToken: first.nextPageToken))
    XCTAssertEqual(entries(second), [.item("bb"), .prefix("c/")])
    // A name added under the prefix just returned is not returned again.
    store.put("c/2", data: [])
    let third = try await store.list(
      ListRequest(prefix: "", delimiter: "/", pageSize: 2, pageToken: second.nextPageToken))
    XCTAssertEqual(entries(third), [.item("d"), .item("e")])
    XCTAssertNil(third.nextPageToken)
  }

  func testBadPageTokenIsBadRequest() async {
    let store = InMemoryObjectStore(bucket: "bkt")
    do {
      _ = try await store.list(
        ListRequest(prefix: "", delimiter: "/", pageSize: 10, pageToken: "not a token!"))
      XCTFail("expected badRequest")
    } catch let error as StorageError {
      guard case .badRequest = error else { return XCTFail("got \(error)") }
    } catch { XCTFail("got \(error)") }
  }

  func testListOfAMillionNamesIsCheap() async throws {
    let store = InMemoryObjectStore(bucket: "bkt")
    for i in stride(from: 199_999, through: 0, by: -1) { store.put("big/\(i)", data: []) }
    let clock = ContinuousClock()
    let start = clock.now
    let page = try await store.list(ListRequest(prefix: "big/", delimiter: "/", pageSize: 1000))
    let second = try await store.list(
      ListRequest(
        prefix: "big/", delimiter: "/", pageSize: 1000, pageToken: page.nextPageToken))
    XCTAssertEqual(page.items.first?.name, "big/0")
    XCTAssertEqual(page.items.count + second.items.count, 2000)
    XCTAssertLessThan(clock.now - start, .seconds(10))
  }

  // MARK: Metadata and reads

  func testMetadataAndNotFound() async throws {
    let store = InMemoryObjectStore(bucket: "bkt")
    let put = store.put("x", data: [1, 2, 3])
    let meta = try await store.metadata(of: "x")
    XCTAssertEqual(meta, put)
    await assertThrows(StorageError.notFound) { _ = try await store.metadata(of: "y") }
    XCTAssertEqual(store.calls, [.metadata("x"), .metadata("y")])
    store.resetCalls()
    XCTAssertEqual(store.calls, [])
  }

  func testRangeReads() async throws {
    let store = InMemoryObjectStore(bucket: "bkt")
    let meta = store.put("f", data: bytes("0123456789"))
    let g = meta.generation
    var read = try await store.read("f", generation: g, range: 2..<5, reusing: nil).array
    XCTAssertEqual(read, bytes("234"))
    read = try await store.read("f", generation: g, range: 8..<100, reusing: nil).array
    XCTAssertEqual(read, bytes("89"))
    read = try await store.read("f", generation: g, range: 0..<Int64.max, reusing: nil).array
    XCTAssertEqual(read, bytes("0123456789"))
    read = try await store.read("f", generation: g, range: 9..<10, reusing: nil).array
    XCTAssertEqual(read, bytes("9"))
    await assertThrows(StorageError.badRequest("416 range not satisfiable")) {
      _ = try await store.read("f", generation: g, range: 10..<12, reusing: nil)
    }
    await assertThrows(StorageError.notFound) {
      _ = try await store.read("f", generation: g + 1, range: 0..<1, reusing: nil)
    }
    await assertThrows(StorageError.notFound) {
      _ = try await store.read("nope", generation: g, range: 0..<1, reusing: nil)
    }

    // Replaced: the old generation is gone.
    let replaced = store.put("f", data: bytes("abc"))
    await assertThrows(StorageError.notFound) {
      _ = try await store.read("f", generation: g, range: 0..<1, reusing: nil)
    }
    read = try await store.read("f", generation: replaced.generation, range: 1..<3, reusing: nil).array
    XCTAssertEqual(read, bytes("bc"))

    // An empty object reads as empty whatever the range.
    let empty = store.put("empty", data: [])
    read = try await store.read("empty", generation: empty.generation, range: 0..<10, reusing: nil).array
    XCTAssertEqual(read, [])
    XCTAssertEqual(store.calls(.read).first, .read("f", 2..<5))
  }

  // MARK: Patch

  func testPatchRemovesWithNilAndKeepsTheRest() async throws {
    let store = InMemoryObjectStore(bucket: "bkt")
    let before = store.put(
      "o", data: bytes("data"), contentType: "text/plain", cacheControl: "no-cache",
      custom: ["k1": "v1", "k2": "v2"])
    let patch = MetadataPatch(
      fields: [.contentType: nil, .contentLanguage: "fr"], custom: ["k1": nil, "k3": "v3"])
    let after = try await store.patch("o", patch, ifMetagenerationMatch: nil)
    XCTAssertNil(after.contentType)
    XCTAssertEqual(after.contentLanguage, "fr")
    XCTAssertEqual(after.cacheControl, "no-cache")
    XCTAssertEqual(after.custom, ["k2": "v2", "k3": "v3"])
    XCTAssertEqual(after.metageneration, 2)
    XCTAssertEqual(after.generation, before.generation)
    XCTAssertEqual(after.timeCreated, before.timeCreated)
    XCTAssertEqual(after.size, before.size)
    XCTAssertEqual(after.md5Hash, before.md5Hash)
    XCTAssertEqual(after.crc32c, before.crc32c)
    XCTAssertNotEqual(after.etag, before.etag)
    XCTAssertGreaterThan(after.updated, before.updated)
    XCTAssertEqual(store.object("o"), after)
    XCTAssertEqual(store.calls, [.patch("o")])
  }

  func testUpdatedMovesForwardWithinOneMillisecond() throws {
    let store = InMemoryObjectStore(bucket: "bkt")
    var last = store.put("o", data: [])
    for i in 0..<20 {
      let next = try store.applyPatch("o", MetadataPatch(custom: ["n": "\(i)"]))
      XCTAssertGreaterThan(next.updated, last.updated)
      XCTAssertEqual(next.metageneration, last.metageneration + 1)
      last = next
    }
    XCTAssertEqual(last.metageneration, 21)
  }

  func testMetagenerationPrecondition() async throws {
    let store = InMemoryObjectStore(bucket: "bkt")
    store.put("o", data: [])
    let patch = MetadataPatch(fields: [.contentType: "a/b"])
    let second = try await store.patch("o", patch, ifMetagenerationMatch: 1)
    XCTAssertEqual(second.metageneration, 2)
    await assertThrows(StorageError.preconditionFailed) {
      _ = try await store.patch("o", MetadataPatch(fields: [.contentType: "c/d"]), ifMetagenerationMatch: 1)
    }
    XCTAssertEqual(store.object("o")?.contentType, "a/b")
    XCTAssertEqual(store.object("o")?.metageneration, 2)
    let third = try await store.patch("o", patch, ifMetagenerationMatch: 2)
    XCTAssertEqual(third.metageneration, 3)
    await assertThrows(StorageError.notFound) {
      _ = try await store.patch("missing", patch, ifMetagenerationMatch: nil)
    }
  }

  func testConcurrentChangeBeforePatch() async throws {
    let store = InMemoryObjectStore(bucket: "bkt")
    store.put("o", data: [], custom: ["k": "mine"])
    store.beforeNextPatch { store in
      _ = try? store.applyPatch("o", MetadataPatch(custom: ["k": "theirs"]))
    }
    await assertThrows(StorageError.preconditionFailed) {
      _ = try await store.patch("o", MetadataPatch(custom: ["k": "new"]), ifMetagenerationMatch: 1)
    }
    XCTAssertEqual(store.object("o")?.custom["k"], "theirs")
    XCTAssertEqual(store.object("o")?.metageneration, 2)
    // The hook ran once: the retry against the new metageneration succeeds.
    let retried = try await store.patch("o", MetadataPatch(custom: ["k": "new"]), ifMetagenerationMatch: 2)
    XCTAssertEqual(retried.custom["k"], "new")
    XCTAssertEqual(retried.metageneration, 3)
  }

  func testCustomMetadataLimits() async throws {
    let store = InMemoryObjectStore(bucket: "bkt")
    store.put("o", data: [])
    let atLimit = String(repeating: "v", count: 4096)
    _ = try await store.patch("o", MetadataPatch(custom: ["a": atLimit]), ifMetagenerationMatch: nil)
    do {
      _ = try await store.patch("o", MetadataPatch(custom: ["b": atLimit + "v"]), ifMetagenerationMatch: nil)
      XCTFail("a 4097-byte value must be refused")
    } catch StorageError.tooLarge(let message) {
      XCTAssertTrue(message.contains("4096"), message)
    }
    // Multi-byte characters count in bytes: 2049 × "é" is 4098 bytes.
    await assertThrowsTooLarge {
      _ = try await store.patch(
        "o", MetadataPatch(custom: ["b": String(repeating: "\u{e9}", count: 2049)]),
        ifMetagenerationMatch: nil)
    }
    // Total: "a" + 4096 + "b" + 4094 = 8192 exactly is fine; one more byte is not.
    let exact = try await store.patch(
      "o", MetadataPatch(custom: ["b": String(repeating: "w", count: 4094)]), ifMetagenerationMatch: nil)
    XCTAssertEqual(exact.metageneration, 3)
    await assertThrowsTooLarge {
      _ = try await store.patch("o", MetadataPatch(custom: ["c": ""]), ifMetagenerationMatch: nil)
    }
    XCTAssertEqual(store.object("o")?.metageneration, 3)
    XCTAssertEqual(store.object("o")?.custom.count, 2)
    // Removing keys brings it back under.
    let removed = try await store.patch(
      "o", MetadataPatch(custom: ["a": nil, "c": "x"]), ifMetagenerationMatch: 3)
    XCTAssertEqual(Set(removed.custom.keys), ["b", "c"])
  }

  // MARK: Hooks

  func testFaultQueueIsConsumedInOrderPerKind() async throws {
    let store = InMemoryObjectStore(bucket: "bkt")
    store.put("o", data: [1])
    store.injectFaults([.unavailable("503 one"), .accessDenied("403 two")], for: .metadata)
    store.injectFaults([.unavailable("list")], for: .list)
    await assertThrows(StorageError.unavailable("503 one")) { _ = try await store.metadata(of: "o") }
    // Other kinds have their own queue.
    let read = try await store.read(
      "o", generation: store.object("o")!.generation, range: 0..<1, reusing: nil
    ).array
    XCTAssertEqual(read, [1])
    await assertThrows(StorageError.accessDenied("403 two")) { _ = try await store.metadata(of: "o") }
    let meta = try await store.metadata(of: "o")
    XCTAssertEqual(meta.name, "o")
    XCTAssertEqual(store.pendingFaults(for: .list), 1)
    await assertThrows(StorageError.unavailable("list")) {
      _ = try await store.list(ListRequest(prefix: "", delimiter: "/", pageSize: 1))
    }
    _ = try await store.list(ListRequest(prefix: "", delimiter: "/", pageSize: 1))
    XCTAssertEqual(store.calls(.metadata).count, 3)
    XCTAssertEqual(
      store.calls(.list), [.list(prefix: "", pageToken: nil), .list(prefix: "", pageToken: nil)])
  }

  func testLatencyAndCancellation() async throws {
    let store = InMemoryObjectStore(bucket: "bkt")
    store.put("o", data: [])
    store.latency = .milliseconds(100)
    let clock = ContinuousClock()
    let start = clock.now
    _ = try await store.metadata(of: "o")
    XCTAssertGreaterThanOrEqual(clock.now - start, .milliseconds(100))

    store.latency = .seconds(30)
    let task = Task { try await store.metadata(of: "o") }
    try await Task.sleep(for: .milliseconds(50))
    let cancelledAt = clock.now
    task.cancel()
    do {
      _ = try await task.value
      XCTFail("expected cancellation")
    } catch {
      XCTAssertEqual(error as? StorageError, .cancelled)
    }
    XCTAssertLessThan(clock.now - cancelledAt, .seconds(5))
  }
}

func assertThrows(
  _ expected: StorageError, file: StaticString = #filePath, line: UInt = #line,
  _ body: () async throws -> Void
) async {
  do {
    try await body()
    XCTFail("expected \(expected)", file: file, line: line)
  } catch {
    XCTAssertEqual(error as? StorageError, expected, file: file, line: line)
  }
}

func assertThrowsTooLarge(file: StaticString = #filePath, line: UInt = #line, _ body: () async throws -> Void)
  async
{
  do {
    try await body()
    XCTFail("expected tooLarge", file: file, line: line)
  } catch StorageError.tooLarge {
  } catch {
    XCTFail("expected tooLarge, got \(error)", file: file, line: line)
  }
}

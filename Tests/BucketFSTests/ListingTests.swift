import FUSE
import ObjectStore
import StorageFake
import Synchronization
import XCTest

@testable import BucketFS

/// docs/SEMANTICS.md#names and #listing against the exact in-process model of the service.
final class ListingTests: XCTestCase {
  func testTheSeedsListingExample() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("correctPrefix/happyItem", data: bytes("happy"))
    store.put("wrongPrefix//sadItem", data: bytes("sad"))
    store.put("lonelyItem/", data: [])
    let fs = makeFileSystem(store)

    let root = try await fs.entries(of: 1)
    XCTAssertEqual(root.map(\.name), ["correctPrefix", "lonelyItem", "wrongPrefix"])
    XCTAssertTrue(root.allSatisfy { $0.entry.attributes?.kind == .directory })
    await XCTAssertEqualAsync(try await fs.names(of: try await fs.inode(at: "correctPrefix")), ["happyItem"])
    await XCTAssertEqualAsync(try await fs.kind(at: "correctPrefix/happyItem"), .file)
    await XCTAssertEqualAsync(try await fs.names(of: try await fs.inode(at: "wrongPrefix")), [])
    await XCTAssertEqualAsync(try await fs.names(of: try await fs.inode(at: "lonelyItem")), [])
    await XCTAssertEqualAsync(try await fs.kind(at: "lonelyItem"), .directory)
    // The invalid name can't be looked up either.
    await XCTAssertNilAsync(try await fs.kind(at: "wrongPrefix/sadItem"))
  }

  func testPagingWithATinyPageSizeListsEverythingOnceAndFetchesLazily() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    var expected: [String] = []
    for i in 0..<23 {
      store.put(String(format: "dir/file%02d", i), data: Array(repeating: 1, count: i))
      expected.append(String(format: "file%02d", i))
    }
    for i in 0..<4 {
      store.put("dir/sub\(i)/x", data: [])
      expected.append("sub\(i)")
    }
    let fs = makeFileSystem(store, pageSize: 3)
    let dir = try await fs.inode(at: "dir")
    store.resetCalls()

    let entries = try await fs.entries(of: dir, perCall: 4)
    XCTAssertEqual(entries.map(\.name).sorted(), expected.sorted())
    XCTAssertEqual(Set(entries.map(\.name)).count, entries.count, "no duplicates")
    XCTAssertEqual(store.calls(.list).count, 9, "ceil(27 / 3) list calls")
    XCTAssertEqual(store.calls.count, 9, "no per-object requests")
    for entry in entries where entry.name.hasPrefix("file") {
      XCTAssertEqual(entry.entry.attributes?.size, UInt64(Int(entry.name.dropFirst(4))!))
    }

    // The first readdir only needs the first page.
    store.resetCalls()
    let handle = try await fs.opendir(inode: dir).handle
    let first = CollectingBuffer(capacity: 3)
    try await fs.readdir(inode: dir, handle: handle, offset: 0, into: first)
    XCTAssertEqual(first.entries.map(\.name), [".", "..", "file00"])
    XCTAssertEqual(store.calls(.list).count, 1)

    // A rewind to offset 0 lists again from the start.
    let again = CollectingBuffer(capacity: 3)
    try await fs.readdir(inode: dir, handle: handle, offset: 0, into: again)
    XCTAssertEqual(again.entries.map(\.name), [".", "..", "file00"])
    XCTAssertEqual(store.calls(.list).count, 2)
    XCTAssertEqual(store.calls(.list).last, .list(prefix: "dir/", pageToken: nil))
    fs.releasedir(inode: dir, handle: handle)
  }

  func testAReaderPastTheFirstPageGetsTheNextPageFetchedAhead() async throws {
    try await checkPagingAhead(tokenLead: nil)
  }

  /// The client hands over a page's token before it has decoded the page: the
  /// next page is on its way while the reader still waits for this one.
  func testTheNextPageIsAskedForWhileTheCurrentOneIsDecoded() async throws {
    try await checkPagingAhead(tokenLead: .milliseconds(400))
  }

  private func checkPagingAhead(tokenLead: Duration?) async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    for i in 0..<10 { store.put(String(format: "dir/f%02d", i), data: []) }
    store.tokenLead = tokenLead
    let fs = makeFileSystem(store, pageSize: 3)
    let dir = try await fs.inode(at: "dir")
    let handle = try await fs.opendir(inode: dir).handle
    defer { fs.releasedir(inode: dir, handle: handle) }
    store.resetCalls()

    // The first page, as far as it can be shown (f02 waits: a directory
    // f02/ could still come), and no more although the buffer has room.
    let first = CollectingBuffer(capacity: 10)
    try await fs.readdir(inode: dir, handle: handle, offset: 0, into: first)
    XCTAssertEqual(first.entries.map(\.name), [".", "..", "f00", "f01"])
    // No page is asked for early from the first page (no token observer, no
    // prefetch): the second is fetched when the reader gets there, below.
    XCTAssertEqual(store.calls(.list).count, 1, "the first page alone is fetched on demand")

    // Into the second page: the third is requested before anyone asks for it.
    let second = CollectingBuffer(capacity: 1)
    try await fs.readdir(inode: dir, handle: handle, offset: first.entries.last!.nextOffset, into: second)
    XCTAssertEqual(second.entries.map(\.name), ["f02"])
    if tokenLead == nil {
      _ = await eventually { store.calls(.list).count >= 3 }
    }
    // With a lead, page 2 came back 400 ms after its token: page 3 was asked for in between.
    XCTAssertEqual(store.calls(.list).count, 3)

    // The rest, in order, with no call beyond ceil(10 / 3).
    let rest = try await fs.names(of: dir, handle: handle, from: second.entries.last!.nextOffset)
    XCTAssertEqual(["f02"] + rest, (2..<10).map { String(format: "f%02d", $0) })
    XCTAssertEqual(store.calls(.list).count, 4)
  }

  /// A page that fails after its token went out: the page asked for early
  /// must not stand in for it; the retry lists it again, nothing is skipped.
  func testAPageThatFailsAfterItsTokenIsNotSkipped() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    for i in 0..<10 { store.put(String(format: "dir/f%02d", i), data: []) }
    store.tokenLead = .milliseconds(100)
    let fs = makeFileSystem(store, pageSize: 3)
    let dir = try await fs.inode(at: "dir")
    let handle = try await fs.opendir(inode: dir).handle
    defer { fs.releasedir(inode: dir, handle: handle) }

    let first = CollectingBuffer(capacity: 10)
    try await fs.readdir(inode: dir, handle: handle, offset: 0, into: first)
    let after = first.entries.last!.nextOffset
    store.injectDecodeFaults([.invalidResponse("unparseable page 2")])
    let failed = CollectingBuffer(capacity: 10)
    await XCTAssertErrno(.io) {
      try await fs.readdir(inode: dir, handle: handle, offset: after, into: failed)
    }
    let names = try await first.entries.map(\.name) + fs.names(of: dir, handle: handle, from: after)
    XCTAssertEqual(names, [".", ".."] + (0..<10).map { String(format: "f%02d", $0) })
  }

  func testAFailedPrefetchIsRetriedWhenTheReaderGetsThere() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    for i in 0..<9 { store.put(String(format: "dir/f%02d", i), data: []) }
    let faulty = ListFaultStore(store)
    let fs = makeFileSystem(faulty, pageSize: 3)
    let dir = try await fs.inode(at: "dir")
    let handle = try await fs.opendir(inode: dir).handle
    defer { fs.releasedir(inode: dir, handle: handle) }
    store.resetCalls()
    let first = CollectingBuffer(capacity: 10)
    try await fs.readdir(inode: dir, handle: handle, offset: 0, into: first)
    XCTAssertEqual(first.entries.map(\.name), [".", "..", "f00", "f01"])
    // Page 2 arrives; the prefetch of page 3 meets a fault.
    faulty.failList(call: 2)
    let second = CollectingBuffer(capacity: 10)
    try await fs.readdir(inode: dir, handle: handle, offset: first.entries.last!.nextOffset, into: second)
    XCTAssertEqual(second.entries.map(\.name), ["f02", "f03", "f04"])
    let prefetchFailed = await eventually {
      store.calls(.list).count == 3 && store.pendingFaults(for: .list) == 0
    }
    XCTAssertTrue(prefetchFailed, "the prefetch met its fault")

    let after = second.entries.last!.nextOffset
    let failed = CollectingBuffer(capacity: 10)
    await XCTAssertErrno(.io) {
      try await fs.readdir(inode: dir, handle: handle, offset: after, into: failed)
    }
    let retry = CollectingBuffer(capacity: 10)
    try await fs.readdir(inode: dir, handle: handle, offset: after, into: retry)
    XCTAssertEqual(retry.entries.map(\.name), ["f05", "f06", "f07", "f08"])
    XCTAssertEqual(store.calls(.list).count, 4)
  }

  func testReaddirplusFillsTheCacheSoStatAndXattrsNeedNoRequest() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    for i in 0..<10 {
      store.put("d/f\(i)", data: [1, 2, 3], contentType: "text/plain", custom: ["i": "\(i)"])
    }
    let fs = makeFileSystem(store, pageSize: 4)
    let dir = try await fs.inode(at: "d")
    let entries = try await fs.entries(of: dir)
    store.resetCalls()
    for entry in entries {
      let inode = entry.entry.attributes!.inode
      _ = try await fs.lookup(parent: dir, name: entry.name)
      let (attributes, _) = try await fs.getattr(inode: inode)
      XCTAssertEqual(attributes.size, 3)
      let names = try await fs.listxattr(inode: inode)
      XCTAssertTrue(names.contains("user.custom.i"))
      for name in names { _ = try await fs.getxattr(inode: inode, name: name) }
      // The session answers these inline, with no task.
      XCTAssertEqual(try fs.listxattrInline(inode: inode)?.get(), names)
      XCTAssertEqual(
        try fs.getxattrInline(inode: inode, name: "user.custom.i")?.get(), Array(entry.name.dropFirst().utf8))
      XCTAssertEqual(fs.getxattrInline(inode: inode, name: "user.custom.none"), .failure(.noData))
      XCTAssertEqual(fs.getxattrInline(inode: inode, name: "security.selinux"), .failure(.notSupported))
    }
    XCTAssertEqual(store.calls, [], "the page is the cache")
  }

  func testXattrsOfStaleMetadataAreNotAnsweredInline() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("d/f", data: [1], contentType: "text/plain")
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    let inode = try await fs.inode(at: "d/f")
    XCTAssertEqual(
      try fs.getxattrInline(inode: inode, name: "user.contentType")?.get(), Array("text/plain".utf8))
    clock.advance(61)
    XCTAssertNil(fs.getxattrInline(inode: inode, name: "user.contentType"))
    XCTAssertNil(fs.listxattrInline(inode: inode))
    XCTAssertNil(
      fs.getxattrInline(inode: 987_654, name: "user.contentType"), "unknown inodes take the slow path")
    store.resetCalls()
    await XCTAssertEqualAsync(
      try await fs.getxattr(inode: inode, name: "user.contentType"), Array("text/plain".utf8))
    XCTAssertEqual(store.calls(.metadata).count, 1)
  }

  func testFileAndDirectoryOfTheSameNameShowTheDirectory() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("conflict", data: bytes("object"))
    store.put("conflict/inner", data: bytes("inner"))
    let fs = makeFileSystem(store)
    let root = try await fs.entries(of: 1)
    XCTAssertEqual(root.map(\.name), ["conflict"])
    XCTAssertEqual(root.first?.entry.attributes?.kind, .directory)
    await XCTAssertEqualAsync(try await fs.kind(at: "conflict"), .directory)
    await XCTAssertEqualAsync(try await fs.names(of: try await fs.inode(at: "conflict")), ["inner"])
    XCTAssertNotNil(store.object("conflict"), "the object stays untouched")
  }

  func testConflictAcrossAPageBoundary() async throws {
    // With one entry per page, `x` is on an earlier page than the prefix `x/`
    // (`x!a` sorts between them).
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("d/x", data: [])
    store.put("d/x!a", data: [])
    store.put("d/x/inner", data: [])
    store.put("d/y", data: [])
    for pageSize in [1, 2, 3, 1000] {
      let fs = makeFileSystem(store, pageSize: pageSize)
      let entries = try await fs.entries(of: try await fs.inode(at: "d"), perCall: 1)
      XCTAssertEqual(entries.map(\.name).sorted(), ["x", "x!a", "y"], "page size \(pageSize)")
      XCTAssertEqual(
        entries.first { $0.name == "x" }?.entry.attributes?.kind, .directory, "page size \(pageSize)")
    }
  }

  func testPlaceholderMakesAnEmptyDirectory() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("empty/", data: [])
    store.put("full/", data: [])
    store.put("full/a", data: [])
    let fs = makeFileSystem(store)
    await XCTAssertEqualAsync(try await fs.names(of: 1), ["empty", "full"])
    await XCTAssertEqualAsync(try await fs.kind(at: "empty"), .directory)
    await XCTAssertEqualAsync(try await fs.names(of: try await fs.inode(at: "empty")), [])
    await XCTAssertEqualAsync(try await fs.names(of: try await fs.inode(at: "full")), ["a"])
  }

  /// An offset no readdir gave (seekdir to anything) lists from that
  /// position, clamped: nothing past the end, however large.
  func testAGarbageReaddirOffsetListsNothingPastTheEnd() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    for i in 0..<5 { store.put("d/f\(i)", data: []) }
    let fs = makeFileSystem(store, pageSize: 2)
    let dir = try await fs.inode(at: "d")
    let handle = try await fs.opendir(inode: dir).handle
    defer { fs.releasedir(inode: dir, handle: handle) }
    for offset: UInt64 in [.max, .max - 2, UInt64(Int64.max) + 3, UInt64(Int64.max), 1 << 40, 8] {
      await XCTAssertEqualAsync(try await fs.names(of: dir, handle: handle, from: offset), [], "\(offset)")
    }
    await XCTAssertEqualAsync(try await fs.names(of: dir, handle: handle, from: 5), ["f3", "f4"])
    await XCTAssertEqualAsync(
      try await fs.names(of: dir, handle: handle, from: 0), [".", "..", "f0", "f1", "f2", "f3", "f4"])
  }

  func testInvalidComponentsAreLeftOut() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    let long = String(repeating: "L", count: 300)
    store.put("d/\(long)", data: [])
    store.put("d/\(long)/under", data: [])
    store.put("d/ok file", data: [])
    store.put("d/ünïcødé", data: [])
    store.put("d/./dot", data: [])
    store.put("d/../dotdot", data: [])
    let fs = makeFileSystem(store, pageSize: 2)
    await XCTAssertEqualAsync(
      try await fs.names(of: try await fs.inode(at: "d")).sorted(), ["ok file", "ünïcødé"])
    await XCTAssertErrno(.nameTooLong) {
      _ = try await fs.lookup(parent: try await fs.inode(at: "d"), name: long)
    }
  }

  func testSubtreeMountShowsOnlyNamesUnderIt() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("some/prefix/a", data: [])
    store.put("some/prefix/b/c", data: [])
    store.put("some/other", data: [])
    store.put("top", data: [])
    let fs = makeFileSystem(store, root: "some/prefix/")
    await XCTAssertEqualAsync(try await fs.names(of: 1), ["a", "b"])
    await XCTAssertEqualAsync(try await fs.kind(at: "b/c"), .file)
    await XCTAssertNilAsync(try await fs.kind(at: "top"))
    await XCTAssertNilAsync(try await fs.kind(at: "other"))
  }

  func testABurstOfLookupsInOneDirectorySharesOneListCall() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    for i in 0..<30 { store.put(String(format: "d/f%02d", i), data: Array(repeating: 1, count: i)) }
    store.put("d/sub/x", data: [])
    store.put("d/both", data: [9])
    store.put("d/both/y", data: [])
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    let dir = try await fs.inode(at: "d")
    clock.advance(11)  // past the listing of d/ its lookup kept (docs/SEMANTICS.md#walks-small-trees)
    store.resetCalls()
    store.latency = .milliseconds(50)
    let names = (0..<30).map { String(format: "f%02d", $0) } + ["sub", "both", "missing"]
    let answers = try await withThrowingTaskGroup(of: (String, Entry).self) { group in
      for name in names {
        group.addTask {
          let entry = try await fs.lookup(parent: dir, name: name)
          return (name, entry)
        }
      }
      return try await group.reduce(into: [String: Entry]()) { $0[$1.0] = $1.1 }
    }
    for i in 0..<30 {
      let attributes = answers[String(format: "f%02d", i)]?.attributes
      XCTAssertEqual(attributes?.kind, .file)
      XCTAssertEqual(attributes?.size, UInt64(i))
    }
    XCTAssertEqual(answers["sub"]?.attributes?.kind, .directory)
    XCTAssertEqual(answers["both"]?.attributes?.kind, .directory, "the directory wins")
    XCTAssertNil(answers["missing"]?.attributes)
    // Two lookups on their own (one list call from the name each), the rest on one list call.
    XCTAssertEqual(store.calls(.metadata).count, 0)
    XCTAssertEqual(store.calls(.list).count, Self.burstOwnLookups + 1)
  }

  static let burstOwnLookups = NameLookup.burstSize - 1

  func testLookupsBeyondTheFirstPageOfABurstAskForThemselves() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    for i in 0..<12 { store.put(String(format: "d/f%02d", i), data: []) }
    let fs = makeFileSystem(store, pageSize: 4)
    let dir = try await fs.inode(at: "d")
    store.latency = .milliseconds(30)
    let names = (0..<12).map { String(format: "f%02d", $0) } + ["a-missing", "z-missing"]
    let kinds = try await withThrowingTaskGroup(of: (String, FileAttributes.Kind?).self) { group in
      for name in names {
        group.addTask {
          let kind = try await fs.lookup(parent: dir, name: name).attributes?.kind
          return (name, kind)
        }
      }
      return try await group.reduce(into: [String: FileAttributes.Kind?]()) { $0[$1.0] = $1.1 }
    }
    for i in 0..<12 { XCTAssertEqual(kinds[String(format: "f%02d", i)], .file) }
    XCTAssertEqual(kinds["a-missing"], .some(nil))
    XCTAssertEqual(kinds["z-missing"], .some(nil))
  }

  func testLookupResolvesFileAndDirectoryTogetherAndCachesNegatives() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("file", data: [1])
    let fs = makeFileSystem(store)
    store.resetCalls()
    let missing = try await fs.lookup(parent: 1, name: "missing")
    XCTAssertNil(missing.attributes)
    XCTAssertEqual(missing.entryTimeout, 5, "the kernel remembers the miss for the negative TTL")
    XCTAssertEqual(store.calls, [.list(prefix: "missing", pageToken: nil)], "one list from the name")

    // A second lookup within the TTL needs no request; after it, one again.
    let clock = ManualClock()
    let cached = makeFileSystem(store, clock: clock)
    _ = try await cached.lookup(parent: 1, name: "file")
    store.resetCalls()
    _ = try await cached.lookup(parent: 1, name: "file")
    XCTAssertEqual(store.calls, [])
    clock.advance(61)
    _ = try await cached.lookup(parent: 1, name: "file")
    XCTAssertEqual(store.calls.count, 1)
  }

  func testAttributes() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("plain", data: Array(repeating: 7, count: 42))
    store.put("synced", data: [], custom: ["goog-reserved-file-mtime": "2020-01-02T03:04:05Z"])
    let fs = makeFileSystem(store)
    let plain = try await fs.lookup(parent: 1, name: "plain").attributes!
    let created = RFC3339.parse(store.object("plain")!.timeCreated)!
    XCTAssertEqual(plain.size, 42)
    XCTAssertEqual(plain.permissions, 0o644)
    XCTAssertEqual(plain.uid, 1234)
    XCTAssertEqual(plain.gid, 5678)
    XCTAssertEqual(plain.modificationTime, created)
    XCTAssertEqual(plain.accessTime, created)
    XCTAssertEqual(plain.changeTime, RFC3339.parse(store.object("plain")!.updated)!)
    let synced = try await fs.lookup(parent: 1, name: "synced").attributes!
    XCTAssertEqual(synced.modificationTime, RFC3339.parse("2020-01-02T03:04:05Z"))
    await XCTAssertEqualAsync(try await fs.getattr(inode: 1).0.permissions, 0o755)

    // The inode of a path is stable.
    let again = makeFileSystem(store)
    await XCTAssertEqualAsync(try await again.lookup(parent: 1, name: "plain").attributes?.inode, plain.inode)
  }

  func testInodeTableReusesSlotsAcrossChunks() {
    var table = InodeTable(rootKey: "", metadataCapacity: 10)
    var inodes: [String: UInt64] = [:]
    for i in 0..<3000 {
      let key = "d/f\(i)"
      inodes[key] = table.remember(key: key, kind: .directory, metadata: nil, at: 0)
    }
    XCTAssertEqual(table.count, 3001)
    for i in stride(from: 0, to: 3000, by: 2) { table.forget(inodes["d/f\(i)"]!, count: 1) }
    XCTAssertEqual(table.count, 1501)
    for i in 3000..<4000 {
      let key = "d/f\(i)"
      inodes[key] = table.remember(key: key, kind: .directory, metadata: nil, at: 0)
    }
    XCTAssertEqual(table.count, 2501)
    for (key, inode) in inodes {
      let index = Int(key.dropFirst(3))!
      if index < 3000 && index % 2 == 0 {
        XCTAssertNil(table.inode(of: key))
      } else {
        XCTAssertEqual(table.inode(of: key), inode)
        XCTAssertEqual(table[inode]?.key, key)
        XCTAssertEqual(table[inode]?.lookups, 1)
      }
    }
  }

  func testForgottenInodesAreDropped() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("f", data: [1])
    let fs = makeFileSystem(store)
    let inode = try await fs.inode(at: "f")
    _ = try await fs.getattr(inode: inode)
    fs.forget(inode: inode, count: 1)
    await XCTAssertErrno(.stale) { _ = try await fs.getattr(inode: inode) }
  }
}

/// Memory stays bounded: stat facts for every inode the kernel holds, full
/// metadata only for the most recent files.
final class MetadataCacheTests: XCTestCase {
  func testStatNeedsNoRequestBeyondTheCacheAndXattrsRefetchEvictedEntries() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    for i in 0..<30 {
      store.put(String(format: "d/f%02d", i), data: Array(repeating: 1, count: i), custom: ["i": "\(i)"])
    }
    var configuration = Configuration()
    configuration.metadataCacheEntries = 10
    let fs = BucketFileSystem(
      store: store, configuration: configuration, logger: quietLogger, clock: ManualClock().read)
    let entries = try await fs.entries(of: try await fs.inode(at: "d"))
    XCTAssertEqual(entries.count, 30)
    store.resetCalls()
    for entry in entries {
      let (attributes, _) = try await fs.getattr(inode: entry.entry.attributes!.inode)
      XCTAssertEqual(attributes.size, UInt64(Int(entry.name.dropFirst())!))
    }
    XCTAssertEqual(store.calls, [], "stat of every held inode is served without a request")

    // The last ten listed keep their metadata; the first were evicted and are fetched again.
    let last = entries.last!.entry.attributes!.inode
    await XCTAssertEqualAsync(
      String(decoding: try await fs.getxattr(inode: last, name: "user.custom.i"), as: UTF8.self), "29")
    XCTAssertEqual(store.calls, [])
    let first = entries.first!.entry.attributes!.inode
    await XCTAssertEqualAsync(
      String(decoding: try await fs.getxattr(inode: first, name: "user.custom.i"), as: UTF8.self), "0")
    XCTAssertEqual(store.calls, [.metadata("d/f00")])
  }

  func testCacheIsBoundedAndKeepsTheNewest() {
    let cache = MetadataCache(capacity: 3)
    func meta(_ name: String) -> ObjectMetadata {
      ObjectMetadata(
        bucket: "b", name: name, size: 0, generation: 1, metageneration: 1, timeCreated: "", updated: "")
    }
    for name in ["a", "b", "c", "d", "e"] { cache.insert(meta(name)) }
    XCTAssertEqual(cache.usage.entries, 3)
    XCTAssertNil(cache["a"])
    XCTAssertNil(cache["b"])
    XCTAssertNotNil(cache["e"])
    cache.insert(meta("e"))
    XCTAssertEqual(cache.usage.entries, 3)
    cache.remove("d")
    XCTAssertNil(cache["d"])
  }

  /// Entries with large custom metadata are bounded by their bytes, not their number.
  func testCacheIsBoundedByBytes() {
    func meta(_ name: String, value: Int) -> ObjectMetadata {
      ObjectMetadata(
        bucket: "b", name: name, size: 0, generation: 1, metageneration: 1, timeCreated: "", updated: "",
        custom: ["k": String(repeating: "v", count: value)])
    }
    let large = MetadataCache.bytes(meta("x", value: 8000))
    let small = MetadataCache.bytes(meta("x", value: 1))
    XCTAssertGreaterThan(large, 8000)
    XCTAssertGreaterThan(large, 10 * small)
    let cache = MetadataCache(capacity: 1000, maxBytes: 3 * large + large / 2)
    for name in ["a", "b", "c", "d", "e"] { cache.insert(meta(name, value: 8000)) }
    XCTAssertEqual(cache.usage.entries, 3)
    XCTAssertEqual(cache.heldBytes, 3 * large)
    XCTAssertNil(cache["b"])
    XCTAssertNotNil(cache["c"])
    // Smaller values in their place free room for more.
    for name in ["c", "d", "e"] { cache.insert(meta(name, value: 1)) }
    XCTAssertEqual(cache.heldBytes, 3 * small)
    for name in ["f", "g"] { cache.insert(meta(name, value: 8000)) }
    XCTAssertEqual(cache.usage.entries, 5)
    for name in ["c", "d", "e", "f", "g"] { cache.remove(name) }
    XCTAssertEqual(cache.heldBytes, 0)
    // One entry over the whole bound is still kept: the one just inserted.
    let tiny = MetadataCache(capacity: 10, maxBytes: 1)
    tiny.insert(meta("a", value: 10))
    tiny.insert(meta("b", value: 10))
    XCTAssertNil(tiny["a"])
    XCTAssertNotNil(tiny["b"])
  }
}

/// Forwards to the in-memory store; the `call`th list call after
/// ``failList(call:)`` meets a fault, whenever it comes.
final class ListFaultStore: ForwardingObjectStore, Sendable {
  let base: InMemoryObjectStore
  private let countdown = Mutex<Int?>(nil)
  init(_ base: InMemoryObjectStore) { self.base = base }
  var inner: any ObjectStore { base }

  func failList(call: Int) { countdown.withLock { $0 = call } }

  private func arrive() {
    let fail = countdown.withLock { left -> Bool in
      guard let count = left else { return false }
      left = count > 1 ? count - 1 : nil
      return count == 1
    }
    if fail { base.injectFaults([.unavailable("503 prefetch")], for: .list) }
  }

  func list(_ request: ListRequest) async throws -> ListPage {
    arrive()
    return try await base.list(request)
  }
}

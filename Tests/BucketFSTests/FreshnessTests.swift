import FUSE
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

/// Metadata never goes backwards, and is fresh from when the service answered.
final class FreshnessTests: XCTestCase {
  func text(_ answer: Result<[UInt8], Errno>?) -> String? {
    guard case .success(let value)? = answer else { return nil }
    return String(decoding: value, as: UTF8.self)
  }

  func testALateGetNeverUndoesAPatch() async throws {
    let base = InMemoryObjectStore(bucket: "demo")
    base.put("f", data: [1], custom: ["a": "1"])
    let store = HeldAnswerStore(base)
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    let inode = try await fs.inode(at: "f")
    clock.advance(61)  // stale: the next getxattr asks again

    store.hold(.metadata)
    let early = Task { try await fs.getxattr(inode: inode, name: "user.custom.a") }
    let taken = await eventually { store.taken(.metadata) == 1 }
    XCTAssertTrue(taken)
    try await fs.setxattr(inode: inode, name: "user.custom.a", value: bytes("2"), flags: [])
    XCTAssertEqual(text(fs.getxattrInline(inode: inode, name: "user.custom.a")), "2")
    store.release(.metadata)
    _ = try await early.value

    XCTAssertEqual(text(fs.getxattrInline(inode: inode, name: "user.custom.a")), "2")
    await XCTAssertEqualAsync(try await fs.getxattr(inode: inode, name: "user.custom.a"), bytes("2"))
    let (attributes, _) = try await fs.getattr(inode: inode)
    XCTAssertEqual(attributes.changeTime, RFC3339.parse(base.object("f")!.updated))
  }

  func testAnUnlinkUnhooksTheNodeALookupMadeDuringTheDelete() async throws {
    let base = InMemoryObjectStore(bucket: "demo")
    base.put("f", data: [1])
    let store = HeldAnswerStore(base)
    let fs = makeFileSystem(store)

    // The lookup's page shows "f" before the delete, and arrives during it.
    store.hold(.list)
    let lookup = Task { try await fs.inode(at: "f") }
    let listed = await eventually { store.taken(.list) == 1 }
    XCTAssertTrue(listed)
    store.hold(.delete)
    let unlink = Task { try await fs.unlink(parent: 1, name: "f") }
    let deleting = await eventually { store.taken(.delete) == 1 }
    XCTAssertTrue(deleting)
    store.release(.list)
    _ = try await lookup.value
    store.release(.delete)
    try await unlink.value

    XCTAssertNil(base.object("f"))
    await XCTAssertErrno(.noEntry) { _ = try await fs.inode(at: "f") }
    XCTAssertNil(fs.nodes.held("f"), "no node answers for the deleted name")
  }

  func testALateListPageNeverUndoesAPatch() async throws {
    let base = InMemoryObjectStore(bucket: "demo")
    base.put("f", data: [1], custom: ["a": "1"])
    let store = HeldAnswerStore(base)
    let fs = makeFileSystem(store)
    let inode = try await fs.inode(at: "f")

    store.hold(.list)
    let listing = Task { try await fs.entries(of: 1) }
    let taken = await eventually { store.taken(.list) == 1 }
    XCTAssertTrue(taken)
    try await fs.setxattr(inode: inode, name: "user.custom.a", value: bytes("2"), flags: [])
    store.release(.list)
    let entries = try await listing.value

    XCTAssertEqual(entries.map(\.name), ["f"])
    XCTAssertEqual(entries[0].entry.attributes?.inode, inode)
    XCTAssertEqual(entries[0].entry.attributes?.changeTime, RFC3339.parse(base.object("f")!.updated))
    XCTAssertEqual(text(fs.getxattrInline(inode: inode, name: "user.custom.a")), "2")
  }

  func testTheKernelKeepsCachedAnswersOnlyForWhatIsLeftOfTheTTL() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("f", data: [1])
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    let looked = try await fs.lookup(parent: 1, name: "f")
    XCTAssertEqual(looked.entryTimeout, 60)
    clock.advance(25)
    let inode = looked.attributes!.inode
    await XCTAssertEqualAsync(try await fs.getattr(inode: inode).timeout, 35)
    let again = try await fs.lookup(parent: 1, name: "f")
    XCTAssertEqual(again.entryTimeout, 35)
    XCTAssertEqual(again.attributeTimeout, 35)
  }

  func testAPausedReaderGetsEntriesFreshFromWhenTheirPageWasAnswered() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    for name in ["f1", "f2", "f3", "f4"] { store.put("d/" + name, data: [1]) }
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    let directory = try await fs.inode(at: "d")
    let handle = try await fs.opendir(inode: directory).handle
    defer { fs.releasedir(inode: directory, handle: handle) }
    let first = CollectingBuffer(capacity: 3)
    try await fs.readdir(inode: directory, handle: handle, offset: 0, into: first)
    XCTAssertEqual(first.entries.map(\.name), [".", "..", "f1"])

    // The reader pauses past the TTL; meanwhile f3 is replaced.
    clock.advance(61)
    store.put("d/f3", data: [1, 2, 3])
    let rest = CollectingBuffer()
    try await fs.readdir(inode: directory, handle: handle, offset: first.entries.last!.nextOffset, into: rest)
    XCTAssertEqual(rest.entries.map(\.name), ["f2", "f3", "f4"])
    // What the page said is already too old for the kernel to keep...
    XCTAssertEqual(rest.entries.map(\.entry.entryTimeout), [0, 0, 0])
    // ...and for us: stat asks again.
    let f3 = rest.entries[1].entry.attributes!.inode
    await XCTAssertEqualAsync(try await fs.getattr(inode: f3).0.size, 3)
  }

  func testABurstUnderSustainedLookupsListsAgainWithinTheNegativeTTL() async throws {
    let base = InMemoryObjectStore(bucket: "demo")
    for name in ["a", "b", "n1", "n2"] { base.put("d/" + name, data: [1]) }
    let store = HeldAnswerStore(base)
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    let directory = try await fs.inode(at: "d")
    // Past the listing of d/ its lookup kept (docs/SEMANTICS.md#walks-small-trees).
    clock.advance(11)

    // Two lookups that never end keep the burst alive; every later one joins it.
    store.hold(.list, calls: 2)
    let held = [
      Task { try await fs.lookup(parent: directory, name: "a") },
      Task { try await fs.lookup(parent: directory, name: "b") },
    ]
    // Each is one list call from its name (answered by the base before it is held).
    let taken = await eventually { store.taken(.list) == 2 }
    XCTAssertTrue(taken, "\(base.calls)")
    base.resetCalls()
    let n1 = try await fs.lookup(parent: directory, name: "n1")
    XCTAssertNotNil(n1.attributes)
    XCTAssertEqual(base.calls, [.list(prefix: "d/", pageToken: nil)])

    base.put("d/late", data: [1])
    clock.advance(2)  // within the negative TTL the page still answers
    let n2 = try await fs.lookup(parent: directory, name: "n2")
    XCTAssertNotNil(n2.attributes)
    XCTAssertEqual(base.calls(.list).count, 1)
    clock.advance(4)
    let lateEntry = try await fs.lookup(parent: directory, name: "late")
    XCTAssertNotNil(lateEntry.attributes)
    XCTAssertEqual(base.calls(.list).count, 2)

    store.release(.list)
    for task in held { _ = try await task.value }
  }
}

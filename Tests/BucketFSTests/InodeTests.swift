import FUSE
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

/// Inode numbers: a hash of the key, the same across mounts and after the
/// kernel forgets them; a collision never makes two keys share a node.
final class InodeTests: XCTestCase {
  func testAPathKeepsItsNumberAfterForgetAndAcrossMounts() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("a/one.txt", data: [1])
    store.put("a/two.txt", data: [2])
    let fs = makeFileSystem(store)
    let one = try await fs.inode(at: "a/one.txt")
    let directory = try await fs.inode(at: "a")
    XCTAssertEqual(one, InodeTable(rootKey: "", metadataCapacity: 1).hashedInode("a/one.txt"))
    XCTAssertLessThan(one, 1 << 63)

    // Forgotten by the kernel, then looked up again.
    fs.forget(inode: one, count: 1)
    await XCTAssertErrno(.stale) { _ = try await fs.getattr(inode: one) }
    await XCTAssertEqualAsync(try await fs.inode(at: "a/one.txt"), one)

    // Another mount, where the names are met in another order.
    let again = makeFileSystem(store)
    let two = try await again.inode(at: "a/two.txt")
    XCTAssertNotEqual(two, one)
    await XCTAssertEqualAsync(try await again.inode(at: "a/one.txt"), one)
    await XCTAssertEqualAsync(try await again.inode(at: "a"), directory)
  }

  func testPlainReaddirInodesAreTheLookupInodes() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("d/f", data: [1])
    store.put("d/sub/g", data: [2])
    store.put("d/h", data: [3])
    let fs = makeFileSystem(store)
    let directory = try await fs.inode(at: "d")
    // Before any lookup of the children, and after.
    let plain = try await fs.entries(of: directory, plus: false)
    XCTAssertEqual(plain.map(\.name), ["f", "h", "sub"])
    for (name, entry) in plain {
      await XCTAssertEqualAsync(try await fs.inode(at: "d/" + name), entry.attributes?.inode, name)
    }
    let again = try await fs.entries(of: directory, plus: false)
    XCTAssertEqual(again.map { $0.entry.attributes?.inode }, plain.map { $0.entry.attributes?.inode })
  }

  func testCollidingKeysGetTheirOwnNodes() {
    // Every key hashes alike: each live key past the first needs a number of its own.
    var table = InodeTable(rootKey: "", metadataCapacity: 10, hash: { _ in 42 })
    let a = table.remember(key: "a", kind: .file, metadata: nil, at: 0)
    let b = table.remember(key: "b", kind: .file, metadata: nil, at: 0)
    let c = table.remember(key: "c/", kind: .directory, metadata: nil, at: 0)
    XCTAssertEqual(a, 42)
    XCTAssertEqual(Set([a, b, c]).count, 3)
    XCTAssertGreaterThanOrEqual(b, 1 << 63)
    XCTAssertGreaterThanOrEqual(c, 1 << 63)
    for (key, inode) in [("a", a), ("b", b), ("c/", c)] {
      XCTAssertEqual(table[inode]?.key, key)
      XCTAssertEqual(table.inode(of: key), inode)
    }
    // A second lookup of each finds its own node.
    XCTAssertEqual(table.remember(key: "b", kind: .file, metadata: nil, at: 0), b)
    XCTAssertEqual(table[b]?.lookups, 2)
    XCTAssertEqual(table[a]?.lookups, 1)

    // The hash's holder goes: it is free for the next key, and b keeps its number while held.
    table.forget(a, count: 1)
    XCTAssertNil(table.inode(of: "a"))
    XCTAssertEqual(table.inode(of: "b"), b)
    let d = table.remember(key: "d", kind: .file, metadata: nil, at: 0)
    XCTAssertEqual(d, 42)
    XCTAssertEqual(table.inode(of: "b"), b)
    XCTAssertEqual(table[b]?.key, "b")

    // Forgotten and met again, a collided key gets a number no live key has.
    table.forget(b, count: 2)
    XCTAssertNil(table.inode(of: "b"))
    let b2 = table.remember(key: "b", kind: .file, metadata: nil, at: 0)
    XCTAssertFalse([c, d].contains(b2))
    XCTAssertEqual(table[b2]?.key, "b")
    XCTAssertEqual(table.count, 4)  // the root, b, c/, d
  }

  func testHashedInodesStayInTheLowerHalfAndAvoidTheRoot() {
    for forced: UInt64 in [0, 1, 1 << 63, (1 << 63) | 1, .max] {
      let table = InodeTable(rootKey: "", metadataCapacity: 1, hash: { _ in forced })
      let inode = table.hashedInode("x")
      XCTAssertLessThan(inode, 1 << 63)
      XCTAssertGreaterThanOrEqual(inode, 2)
    }
  }
}

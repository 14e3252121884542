import FUSE
import Foundation
import NIOCore
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

/// Names that differ only in Unicode normalization are two objects, as they
/// are to the service (docs/SEMANTICS.md#names-unicode): Swift's String `==`
/// and hashing would take NFC `café` and NFD `café` for one name.
final class UnicodeNameTests: XCTestCase {
  let nfc = "caf\u{e9}"
  let nfd = "cafe\u{301}"
  var store: InMemoryObjectStore!
  var fs: BucketFileSystem!

  override func setUp() async throws {
    store = InMemoryObjectStore(bucket: "demo")
    fs = makeWritingFileSystem(store)
    XCTAssertEqual(nfc, nfd, "Swift String equality is canonical equivalence")
    XCTAssertFalse(Names.same(nfc, nfd))
  }

  private func contents(_ path: String) async throws -> String {
    let inode = try await fs.inode(at: path)
    let handle = try await fs.open(inode: inode, flags: O_RDONLY).handle
    defer { fs.release(inode: inode, handle: handle) }
    let pieces = try await fs.read(inode: inode, handle: handle, offset: 0, size: 1 << 16)
    return pieces.map { String(buffer: $0) }.joined()
  }

  private func fullPath(_ path: String) async throws -> String {
    String(decoding: try await fs.getxattr(inode: fs.inode(at: path), name: "user.fullPath"), as: UTF8.self)
  }

  func testObjectKeyComparesBytes() {
    XCTAssertNotEqual(ObjectKey(nfc), ObjectKey(nfd))
    XCTAssertEqual(Set([ObjectKey(nfc), ObjectKey(nfd), ObjectKey(Substring(nfc))]).count, 2)
    XCTAssertEqual(ObjectKey(nfd) < ObjectKey(nfc), Names.precedes(nfd, nfc))
  }

  func testSideBySideTheyAreTwoEntriesAndTwoInodesWithTheirOwnBytesAndMetadata() async throws {
    store.put("d/" + nfc, data: bytes("composed"), custom: ["form": "NFC"])
    store.put("d/" + nfd, data: bytes("decomposed!"), custom: ["form": "NFD"])
    let listed = try await fs.entries(of: fs.inode(at: "d"))
    XCTAssertEqual(listed.map { Array($0.name.utf8) }, [Array(nfd.utf8), Array(nfc.utf8)], "byte order")
    let inodes = listed.compactMap { $0.entry.attributes?.inode }
    XCTAssertEqual(Set(inodes).count, 2)
    XCTAssertEqual(listed.compactMap { $0.entry.attributes?.size }, [11, 8])
    let a = try await fs.inode(at: "d/" + nfc)
    let b = try await fs.inode(at: "d/" + nfd)
    XCTAssertNotEqual(a, b)
    XCTAssertEqual(inodes, [b, a])
    await XCTAssertEqualAsync(try await contents("d/" + nfc), "composed")
    await XCTAssertEqualAsync(try await contents("d/" + nfd), "decomposed!")
    await XCTAssertEqualAsync(try await fs.getattr(inode: a).0.size, 8)
    await XCTAssertEqualAsync(try await fs.getattr(inode: b).0.size, 11)
    await XCTAssertEqualAsync(try await fullPath("d/" + nfc).utf8.elementsEqual(("d/" + nfc).utf8), true)
    await XCTAssertEqualAsync(try await fullPath("d/" + nfd).utf8.elementsEqual(("d/" + nfd).utf8), true)
    await XCTAssertEqualAsync(
      String(decoding: try await fs.getxattr(inode: a, name: "user.custom.form"), as: UTF8.self), "NFC")
    await XCTAssertEqualAsync(
      String(decoding: try await fs.getxattr(inode: b, name: "user.custom.form"), as: UTF8.self), "NFD")
  }

  func testLookupOfTheOtherFormIsNegative() async throws {
    store.put(nfc, data: bytes("composed"))
    store.put("d/" + nfd + "/x", data: bytes("x"))
    // Held and freshly cached (lookup, then a listing): neither answers for the NFD name.
    _ = try await fs.inode(at: nfc)
    _ = try await fs.names(of: 1)
    await XCTAssertNilAsync(try await fs.lookup(parent: 1, name: nfd).attributes)
    _ = try await fs.inode(at: "d/" + nfd)
    await XCTAssertNilAsync(try await fs.lookup(parent: fs.inode(at: "d"), name: nfc).attributes)
  }

  func testLookupBurstsAnswerEachFormFromTheSharedPage() async throws {
    store.put(nfc, data: bytes("composed"))
    for i in 0..<8 { store.put("f\(i)", data: bytes("\(i)")) }
    let names = [nfd, nfc] + (0..<8).map { "f\($0)" }
    let found = try await withThrowingTaskGroup(of: (String, UInt64?).self) { group in
      let fs = self.fs!
      for name in names {
        group.addTask {
          let inode = try await fs.lookup(parent: 1, name: name).attributes?.inode
          return (name, inode)
        }
      }
      return try await group.reduce(into: []) { $0.append($1) }
    }
    let (nfc, nfd) = (self.nfc, self.nfd)
    XCTAssertEqual(found.filter { Names.same($0.0, nfd) }.map(\.1), [nil])
    XCTAssertNotNil(found.first { Names.same($0.0, nfc) }?.1)
  }

  func testRenameNFDOverNFCReplacesOnlyTheNFCObject() async throws {
    store.put(nfc, data: bytes("a"))
    store.put(nfd, data: bytes("b"))
    try await fs.rename(parent: 1, name: nfd, newParent: 1, newName: nfc, flags: [])
    XCTAssertEqual(store.names.map { Array($0.utf8) }, [Array(nfc.utf8)])
    XCTAssertEqual(store.data(nfc), bytes("b"))
    XCTAssertNil(store.data(nfd))
    await XCTAssertEqualAsync(try await contents(nfc), "b")
    await XCTAssertNilAsync(try await fs.lookup(parent: 1, name: nfd).attributes)
  }

  func testRenameNFCToNFDMovesIt() async throws {
    store.put("s" + nfc, data: bytes("moved"))
    let inode = try await fs.inode(at: "s" + nfc)
    try await fs.rename(parent: 1, name: "s" + nfc, newParent: 1, newName: "s" + nfd, flags: [])
    XCTAssertEqual(store.names.map { Array($0.utf8) }, [Array(("s" + nfd).utf8)])
    XCTAssertEqual(store.data("s" + nfd), bytes("moved"))
    await XCTAssertEqualAsync(try await fs.inode(at: "s" + nfd), inode)
    await XCTAssertNilAsync(try await fs.lookup(parent: 1, name: "s" + nfc).attributes)
    await XCTAssertEqualAsync(try await fullPath("s" + nfd).utf8.elementsEqual(("s" + nfd).utf8), true)
  }

  func testUnlinkOfOneLeavesTheOther() async throws {
    store.put(nfc, data: bytes("composed"))
    store.put(nfd, data: bytes("decomposed"))
    let kept = try await fs.inode(at: nfd)
    _ = try await fs.inode(at: nfc)
    try await fs.unlink(parent: 1, name: nfc)
    XCTAssertNil(store.data(nfc))
    XCTAssertEqual(store.data(nfd), bytes("decomposed"))
    await XCTAssertNilAsync(try await fs.lookup(parent: 1, name: nfc).attributes)
    await XCTAssertEqualAsync(try await fs.inode(at: nfd), kept)
    await XCTAssertEqualAsync(try await contents(nfd), "decomposed")
  }

  func testMetadataCacheAndXattrsNeverCross() async throws {
    store.put(nfc, data: bytes("1"), custom: ["form": "NFC"])
    store.put(nfd, data: bytes("22"), custom: ["form": "NFD"])
    _ = try await fs.names(of: 1)
    let a = try await fs.inode(at: nfc)
    let b = try await fs.inode(at: nfd)
    try await fs.setxattr(inode: b, name: "user.custom.form", value: bytes("changed"), flags: [])
    await XCTAssertEqualAsync(
      String(decoding: try await fs.getxattr(inode: a, name: "user.custom.form"), as: UTF8.self), "NFC")
    await XCTAssertEqualAsync(
      String(decoding: try await fs.getxattr(inode: b, name: "user.custom.form"), as: UTF8.self), "changed")
    XCTAssertEqual(store.object(nfc)?.custom["form"], "NFC")
    XCTAssertEqual(store.object(nfd)?.custom["form"], "changed")
  }

  /// A tree walk keeps listings by directory key: two directories whose names
  /// differ only in normalization keep their own.
  func testAWalkKeepsTheListingsOfEachForm() async throws {
    for (form, file) in [(nfc, "composed"), (nfd, "decomposed")] {
      for sub in ["s1", "s2"] { store.put("x/\(form)/\(sub)/\(file)", data: bytes(file)) }
    }
    var tree: [[UInt8]: [String]] = [:]
    func walk(_ inode: UInt64, _ key: String) async throws {
      let handle = try await fs.opendir(inode: inode).handle
      let names = try await fs.names(of: inode, handle: handle, from: 0).filter { $0 != "." && $0 != ".." }
      fs.releasedir(inode: inode, handle: handle)
      tree[Array(key.utf8)] = names
      for name in names {
        guard let attributes = try await fs.lookup(parent: inode, name: name).attributes,
          attributes.kind == .directory
        else { continue }
        try await walk(attributes.inode, key + name + "/")
      }
    }
    try await walk(1, "")
    XCTAssertEqual(tree.count, 8)
    for (form, file) in [(nfc, "composed"), (nfd, "decomposed")] {
      XCTAssertEqual(tree[Array("x/\(form)/".utf8)], ["s1", "s2"])
      for sub in ["s1", "s2"] {
        XCTAssertEqual(tree[Array("x/\(form)/\(sub)/".utf8)], [file], "\(form) \(sub)")
      }
    }
  }
}

import FUSE
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// Symbolic links: both stored forms read, the written form, what stat,
/// readdir, unlink and rename make of them (docs/SEMANTICS.md#symlinks).
final class SymlinkTests: XCTestCase {
  var store: InMemoryObjectStore!
  var fs: BucketFileSystem!

  static let marker = SymlinkEncoding.markerKey
  static let targetKey = SymlinkEncoding.targetKey

  override func setUp() async throws {
    store = InMemoryObjectStore(bucket: "demo")
    fs = makeFileSystem(store)
  }

  /// gcsfuse ≥ 3.9: the body is the target.
  @discardableResult
  func putBodyLink(_ name: String, _ target: String) -> ObjectMetadata {
    store.put(name, data: bytes(target), custom: [Self.marker: "true"])
  }

  /// Earlier gcsfuse: an empty object whose key holds the target.
  @discardableResult
  func putKeyLink(_ name: String, _ target: String) -> ObjectMetadata {
    store.put(name, data: [], custom: [Self.targetKey: target])
  }

  func readlink(_ path: String) async throws -> String {
    String(decoding: try await fs.readlink(inode: try await fs.inode(at: path)), as: UTF8.self)
  }

  // MARK: Reading both stored forms

  func testABodyFormLinkIsALinkWhoseTargetIsItsBody() async throws {
    putBodyLink("dir/link", "../target.txt")
    let attributes = try await fs.lookup(parent: try await fs.inode(at: "dir"), name: "link").attributes
    XCTAssertEqual(attributes?.kind, .symlink)
    XCTAssertEqual(attributes?.size, 13, "lstat's size is the target's length")
    XCTAssertEqual(attributes?.permissions, 0o777)
    store.resetCalls()
    await XCTAssertEqualAsync(try await readlink("dir/link"), "../target.txt")
    XCTAssertEqual(store.calls(.read).count, 1, "one GET of the body")
    await XCTAssertEqualAsync(try await readlink("dir/link"), "../target.txt")
    XCTAssertEqual(store.calls(.read).count, 1, "the target of a generation is kept")
  }

  func testAKeyFormLinkIsALinkWhoseTargetIsItsKey() async throws {
    putKeyLink("link", "/absolute/path/to/x")
    let attributes = try await fs.lookup(parent: 1, name: "link").attributes
    XCTAssertEqual(attributes?.kind, .symlink)
    XCTAssertEqual(attributes?.size, 19, "the key's length, not the empty object's size")
    store.resetCalls()
    await XCTAssertEqualAsync(try await readlink("link"), "/absolute/path/to/x")
    XCTAssertEqual(store.calls, [], "the listed metadata holds the target")
  }

  func testBothFormsTogetherPreferTheBody() async throws {
    store.put("link", data: bytes("from-body"), custom: [Self.marker: "true", Self.targetKey: "from-key"])
    await XCTAssertEqualAsync(try await readlink("link"), "from-body")
    await XCTAssertEqualAsync(try await fs.lookup(parent: 1, name: "link").attributes?.size, 9)
  }

  func testAMarkerThatIsNotTrueLeavesTheKey() async throws {
    store.put("link", data: bytes("ignored"), custom: [Self.marker: "false", Self.targetKey: "k"])
    await XCTAssertEqualAsync(try await fs.kind(at: "link"), .symlink)
    await XCTAssertEqualAsync(try await readlink("link"), "k")
    store.put("upper", data: bytes("body"), custom: [Self.marker: "TRUE"])
    await XCTAssertEqualAsync(try await readlink("upper"), "body")
  }

  func testALinkWithNoTargetIsEINVALNotEIO() async throws {
    store.put("empty", data: [], custom: [Self.marker: "true"])
    let inode = try await fs.inode(at: "empty")
    await XCTAssertEqualAsync(try await fs.getattr(inode: inode).0.kind, .symlink)
    await XCTAssertErrno(.invalid) { _ = try await self.fs.readlink(inode: inode) }
    store.put("nul", data: [0x61, 0, 0x62], custom: [Self.marker: "true"])
    let nul = try await fs.inode(at: "nul")
    await XCTAssertErrno(.invalid) { _ = try await self.fs.readlink(inode: nul) }
  }

  func testATargetLongerThanALinkHoldsIsENAMETOOLONGWithoutReadingIt() async throws {
    putBodyLink("long", String(repeating: "a", count: 5000))
    let inode = try await fs.inode(at: "long")
    store.resetCalls()
    await XCTAssertErrno(.nameTooLong) { _ = try await self.fs.readlink(inode: inode) }
    XCTAssertEqual(store.calls(.read), [])
  }

  func testALinkReplacedElsewhereReadsTheNewVersion() async throws {
    putBodyLink("link", "old")
    let inode = try await fs.inode(at: "link")
    putBodyLink("link", "new")
    await XCTAssertEqualAsync(String(decoding: try await fs.readlink(inode: inode), as: UTF8.self), "new")
  }

  func testReadlinkOfAFileIsEINVALAndOpenOfALinkIsELOOP() async throws {
    store.put("file", data: bytes("x"))
    putKeyLink("link", "file")
    let file = try await fs.inode(at: "file")
    let link = try await fs.inode(at: "link")
    await XCTAssertErrno(.invalid) { _ = try await self.fs.readlink(inode: file) }
    await XCTAssertErrno(.invalid) { _ = try await self.fs.readlink(inode: 1) }
    await XCTAssertErrno(Errno(ELOOP)) { _ = try await self.fs.open(inode: link, flags: O_RDONLY) }
    await XCTAssertErrno(Errno(ELOOP)) { _ = try await self.fs.open(inode: link, flags: O_WRONLY) }
  }

  // MARK: A name that changes kind

  func testAFileReplacedByALinkElsewhereIsANewInodeOnceItsEntryExpires() async throws {
    let clock = ManualClock()
    fs = makeFileSystem(store, clock: clock)
    store.put("name", data: bytes("file bytes"))
    let first = try await fs.lookup(parent: 1, name: "name")
    let file = try XCTUnwrap(first.attributes)
    XCTAssertEqual(file.kind, .file)
    putKeyLink("name", "elsewhere")
    await XCTAssertEqualAsync(try await fs.kind(at: "name"), .file, "kept while fresh")
    clock.advance(61)
    let stale = try await fs.getattr(inode: file.inode).0
    XCTAssertEqual(stale.kind, .file)
    XCTAssertEqual(stale.size, 10, "what the inode showed, not the link's length")
    let second = try await fs.lookup(parent: 1, name: "name")
    let link = try XCTUnwrap(second.attributes)
    XCTAssertEqual(link.kind, .symlink)
    XCTAssertNotEqual(link.inode, file.inode, "the kernel's inode keeps its type: a new number")
    await XCTAssertEqualAsync(try await fs.getattr(inode: file.inode).0.kind, .file)
    fs.forget(inode: file.inode, count: 2)
    await XCTAssertEqualAsync(
      String(decoding: try await fs.readlink(inode: link.inode), as: UTF8.self), "elsewhere")
  }

  func testAnAnswerAboutTheNamesEarlierObjectChangesNothing() {
    var table = InodeTable(rootKey: "", metadataCapacity: 10)
    let earlier = ObjectMetadata(
      bucket: "b", name: "n", size: 1, generation: 5, metageneration: 1, timeCreated: "", updated: "")
    var later = earlier
    later.generation = 9
    later.custom = [Self.targetKey: "t"]
    let link = table.remember(key: "n", kind: .symlink, metadata: later, at: 0)
    XCTAssertEqual(table.remember(key: "n", kind: .file, metadata: earlier, at: 1), link)
    XCTAssertEqual(table[link]?.kind, .symlink)
    XCTAssertEqual(table[link]?.lookups, 2)
    XCTAssertEqual(table[link]?.facts?.generation, 9)
  }

  // MARK: readdir

  func testReaddirShowsLinksAsLinksWithTheirTargetsLength() async throws {
    store.put("dir/file", data: bytes("12345"))
    putBodyLink("dir/new", "file")
    putKeyLink("dir/old", "../dir/file")
    store.put("dir/sub/x", data: [])
    for plus in [true, false] {
      let fresh = makeFileSystem(store)
      let listed = try await fresh.entries(of: try await fresh.inode(at: "dir"), plus: plus)
      XCTAssertEqual(listed.map(\.name), ["file", "new", "old", "sub"])
      XCTAssertEqual(listed.map { $0.entry.attributes?.kind }, [.file, .symlink, .symlink, .directory])
      XCTAssertEqual(listed.map { $0.entry.attributes?.size }, [5, 4, 11, 0])
    }
    // What readdirplus listed answers lstat and readlink of the key form.
    _ = try await fs.entries(of: try await fs.inode(at: "dir"))
    store.resetCalls()
    await XCTAssertEqualAsync(try await fs.getattr(inode: try await fs.inode(at: "dir/old")).0.size, 11)
    await XCTAssertEqualAsync(try await readlink("dir/old"), "../dir/file")
    XCTAssertEqual(store.calls, [])
  }

  func testATreeWalksFlatListingsShowLinksAsLinks() async throws {
    for top in ["d0", "d1", "d2"] {
      store.put("\(top)/m/file", data: bytes("x"))
      putBodyLink("\(top)/m/new", "file")
      putKeyLink("\(top)/m/old", "file")
    }
    _ = try await fs.walk()
    XCTAssertFalse(store.flatLists.isEmpty, "the walk used flat listings")
    store.resetCalls()
    for top in ["d0", "d1", "d2"] {
      await XCTAssertEqualAsync(try await fs.kind(at: "\(top)/m/new"), .symlink)
      await XCTAssertEqualAsync(try await readlink("\(top)/m/old"), "file")
    }
    XCTAssertEqual(store.calls, [], "kinds and the key form's targets came with the listings")
  }

  // MARK: Creating

  func testSymlinkIsOneConditionalUploadHoldingBothForms() async throws {
    let entry = try await fs.symlink(parent: 1, name: "link", target: bytes("dir/../target"))
    XCTAssertEqual(store.calls, [.upload("link", ifGenerationMatch: 0)])
    XCTAssertEqual(store.data("link"), bytes("dir/../target"))
    let stored = try XCTUnwrap(store.object("link"))
    XCTAssertEqual(stored.custom[Self.marker], "true")
    XCTAssertEqual(stored.custom[Self.targetKey], "dir/../target")
    XCTAssertNotNil(stored.custom[Staging.mtimeKey].flatMap(Int.init))
    XCTAssertEqual(entry.attributes?.kind, .symlink)
    XCTAssertEqual(entry.attributes?.size, 13)
    store.resetCalls()
    let inode = try XCTUnwrap(entry.attributes?.inode)
    await XCTAssertEqualAsync(
      String(decoding: try await fs.readlink(inode: inode), as: UTF8.self), "dir/../target")
    await XCTAssertEqualAsync(try await fs.lookup(parent: 1, name: "link").attributes?.inode, inode)
    XCTAssertEqual(store.calls, [], "the mount knows what it stored")
  }

  func testSymlinkOntoATakenNameIsEEXISTAndChangesNothing() async throws {
    store.put("taken", data: bytes("mine"))
    await XCTAssertErrno(.exists) {
      _ = try await self.fs.symlink(parent: 1, name: "taken", target: bytes("x"))
    }
    XCTAssertEqual(store.data("taken"), bytes("mine"))
    XCTAssertNil(store.object("taken")?.custom[Self.marker])
  }

  func testSymlinkRefusesWhatNoObjectCanHold() async throws {
    await XCTAssertErrno(.invalid) {
      _ = try await self.fs.symlink(parent: 1, name: "l", target: [0xff, 0x2f])
    }
    await XCTAssertErrno(.nameTooLong) {
      _ = try await self.fs.symlink(parent: 1, name: "l", target: Array(repeating: 0x61, count: 4096))
    }
    await XCTAssertErrno(.invalid) {
      _ = try await self.fs.symlink(parent: 1, name: "..", target: bytes("x"))
    }
    XCTAssertEqual(store.calls(.upload), [])
    let readOnly = makeFileSystem(store, readOnly: true)
    await XCTAssertErrno(.readOnly) {
      _ = try await readOnly.symlink(parent: 1, name: "l", target: bytes("x"))
    }
  }

  // MARK: unlink, rename, setattr, xattrs

  func testUnlinkOfALinkDeletesItsGeneration() async throws {
    let link = putKeyLink("dir/link", "x")
    let dir = try await fs.inode(at: "dir")
    _ = try await fs.inode(at: "dir/link")
    store.resetCalls()
    try await fs.unlink(parent: dir, name: "link")
    XCTAssertEqual(store.calls, [.delete("dir/link", ifGenerationMatch: link.generation)])
    XCTAssertNil(store.object("dir/link"))
    await XCTAssertNilAsync(try await fs.lookup(parent: dir, name: "link").attributes)
  }

  func testRenameOfALinkMovesTheObjectAndItStaysALink() async throws {
    for supportsMove in [true, false] {
      store = InMemoryObjectStore(bucket: "demo")
      store.supportsMove = supportsMove
      fs = makeFileSystem(store)
      let created = try await fs.symlink(parent: 1, name: "a", target: bytes("t"))
      let inode = try XCTUnwrap(created.attributes?.inode)
      try await fs.rename(parent: 1, name: "a", newParent: 1, newName: "b", flags: [])
      XCTAssertEqual(store.names, ["b"])
      XCTAssertEqual(store.data("b"), bytes("t"))
      XCTAssertEqual(store.object("b")?.custom[Self.marker], "true")
      XCTAssertEqual(store.object("b")?.custom[Self.targetKey], "t")
      let moved = try await fs.lookup(parent: 1, name: "b").attributes
      XCTAssertEqual(moved?.kind, .symlink)
      XCTAssertEqual(moved?.inode, inode, "the kernel keeps the number")
      await XCTAssertEqualAsync(try await readlink("b"), "t")
    }
  }

  func testRenameOfAFileOverALinkLeavesNoLinkKeysAndViceVersa() async throws {
    store.put("file", data: bytes("data"), custom: ["owner": "ann"])
    putKeyLink("link", "elsewhere")
    try await fs.rename(parent: 1, name: "file", newParent: 1, newName: "link", flags: [])
    let result = try XCTUnwrap(store.object("link"))
    XCTAssertNil(result.custom[Self.targetKey], "a replaced link's keys would make the file a link")
    XCTAssertEqual(result.custom["owner"], "ann")
    await XCTAssertEqualAsync(try await fs.kind(at: "link"), .file)

    // A link over a file (an atomic link swap): the link as it was, nothing of the file.
    store.put("config", data: bytes("old"), custom: ["owner": "bob"])
    _ = try await fs.symlink(parent: 1, name: "config.tmp", target: bytes("v2"))
    try await fs.rename(parent: 1, name: "config.tmp", newParent: 1, newName: "config", flags: [])
    let swapped = try XCTUnwrap(store.object("config"))
    XCTAssertNil(swapped.custom["owner"])
    XCTAssertEqual(store.data("config"), bytes("v2"))
    await XCTAssertEqualAsync(try await fs.kind(at: "config"), .symlink)
    await XCTAssertEqualAsync(try await readlink("config"), "v2")
  }

  func testRenameOfADirectoryCarriesItsLinksAndCountsThemAgainstTheLimit() async throws {
    store.put("d/file", data: bytes("x"))
    putBodyLink("d/new", "file")
    putKeyLink("d/sub/old", "../file")
    _ = try await fs.inode(at: "d/new")
    try await fs.rename(parent: 1, name: "d", newParent: 1, newName: "e", flags: [])
    XCTAssertEqual(store.names, ["e/file", "e/new", "e/sub/old"])
    XCTAssertEqual(store.object("e/new")?.custom[Self.marker], "true")
    XCTAssertEqual(store.object("e/sub/old")?.custom[Self.targetKey], "../file")
    await XCTAssertEqualAsync(try await fs.kind(at: "e/new"), .symlink)
    await XCTAssertEqualAsync(try await readlink("e/new"), "file")
    await XCTAssertEqualAsync(try await readlink("e/sub/old"), "../file")

    var configuration = Configuration()
    configuration.renameDirectoryLimit = 2
    let limited = BucketFileSystem(
      store: store, configuration: configuration, logger: quietLogger, clock: ManualClock().read)
    await XCTAssertErrno(Errno(EXDEV)) {
      try await limited.rename(parent: 1, name: "e", newParent: 1, newName: "f", flags: [])
    }
  }

  func testRmdirOfALinkIsENOTDIR() async throws {
    putKeyLink("link", "x")
    _ = try await fs.inode(at: "link")
    await XCTAssertErrno(.notDirectory) { try await self.fs.rmdir(parent: 1, name: "link") }
  }

  func testAMtimeSetOnALinkIsOnePatchAndASizeIsEINVAL() async throws {
    putKeyLink("link", "x")
    let inode = try await fs.inode(at: "link")
    store.resetCalls()
    let (attributes, _) = try await fs.setattr(
      inode: inode, handle: nil, changes: AttributeChanges(modificationTime: Timestamp(seconds: 1_000_000)))
    XCTAssertEqual(store.calls, [.patch("link")])
    XCTAssertEqual(store.object("link")?.custom[Staging.mtimeKey], "1000000")
    XCTAssertEqual(attributes.kind, .symlink)
    XCTAssertEqual(attributes.modificationTime, Timestamp(seconds: 1_000_000))
    await XCTAssertErrno(.invalid) {
      _ = try await self.fs.setattr(inode: inode, handle: nil, changes: AttributeChanges(size: 0))
    }
  }

  func testALinkHasNoExtendedAttributes() async throws {
    putKeyLink("link", "x")
    let inode = try await fs.inode(at: "link")
    await XCTAssertEqualAsync(try await fs.listxattr(inode: inode), [])
    await XCTAssertErrno(.noData) { _ = try await self.fs.getxattr(inode: inode, name: "user.fullPath") }
    await XCTAssertErrno(.notPermitted) {
      try await self.fs.setxattr(inode: inode, name: "user.custom.k", value: bytes("v"), flags: [])
    }
  }

  /// Targets are bounded by their bytes too: three of 4,000 bytes in a
  /// cache of 10,000 keep the last two.
  func testLinkTargetsAreBoundedByTheirBytes() {
    func link(_ name: String) -> ObjectMetadata {
      ObjectMetadata(
        bucket: "b", name: name, size: 4000, generation: 1, metageneration: 1, timeCreated: "", updated: "")
    }
    var targets = LinkTargets(capacity: 100, maxBytes: 10_000)
    for name in ["a", "b", "c"] { targets.insert(Array(repeating: 0x61, count: 4000), for: link(name)) }
    XCTAssertEqual(targets.count, 2)
    XCTAssertNil(targets[link("a")])
    XCTAssertNotNil(targets[link("c")])
  }
}

import FUSE
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// Modes, owners, times and special files in gsutil's keys
/// (docs/SEMANTICS.md#attributes-modes): what stat shows and the exact
/// requests that store them.
final class PosixAttributeTests: XCTestCase {
  private func attributes(_ fs: BucketFileSystem, _ path: String) async throws -> FileAttributes {
    try await fs.getattr(inode: try await fs.inode(at: path)).0
  }

  func testGsutilKeysShowInStat() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put(
      "bin/tool", data: bytes("#!/bin/sh\n"),
      custom: [
        "goog-reserved-posix-mode": "755", "goog-reserved-posix-uid": "4321",
        "goog-reserved-posix-gid": "2345", "goog-reserved-file-mtime": "1700000000",
        "goog-reserved-file-atime": "1700000100",
      ])
    store.put("bin/plain", data: bytes("x"))
    store.put("bin/odd", data: bytes("x"), custom: ["goog-reserved-posix-mode": "0o4750"])
    store.put(
      "bin/bad", data: bytes("x"),
      custom: ["goog-reserved-posix-mode": "rwx", "goog-reserved-posix-uid": "-1"])
    let fs = makeFileSystem(store)
    let tool = try await attributes(fs, "bin/tool")
    XCTAssertEqual(tool.kind, .file)
    XCTAssertEqual(tool.permissions, 0o755)
    XCTAssertEqual(tool.uid, 4321)
    XCTAssertEqual(tool.gid, 2345)
    XCTAssertEqual(tool.modificationTime, Timestamp(seconds: 1_700_000_000))
    XCTAssertEqual(tool.accessTime, Timestamp(seconds: 1_700_000_100))
    // No keys, or keys that do not parse: the mount's defaults.
    for path in ["bin/plain", "bin/bad"] {
      let plain = try await attributes(fs, path)
      XCTAssertEqual(plain.permissions, 0o644)
      XCTAssertEqual(plain.uid, 1234)
      XCTAssertEqual(plain.gid, 5678)
    }
    let odd = try await attributes(fs, "bin/odd")
    XCTAssertEqual(odd.permissions, 0o4750)
  }

  func testOtherToolsKeysAreRead() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("a/gcsfuse", data: [], custom: ["gcsfuse_mtime": "2024-05-01T10:20:30Z"])
    store.put("a/rclone", data: [], custom: ["mtime": "2024-05-01T10:20:30.123456789Z"])
    // s3fs: decimal st_mode with the type (0100755), its uid and gid.
    store.put("a/s3fs", data: [], custom: ["mode": "33261", "uid": "7", "gid": "8", "mtime": "1700000000"])
    // A `mode` without type bits is not s3fs's; `uid` alone is nobody's owner.
    store.put("a/other", data: [], custom: ["mode": "fast", "uid": "9"])
    let fs = makeFileSystem(store)
    let gcsfuse = try await attributes(fs, "a/gcsfuse")
    XCTAssertEqual(gcsfuse.modificationTime, Timestamp(seconds: 1_714_558_830))
    let rclone = try await attributes(fs, "a/rclone")
    XCTAssertEqual(rclone.modificationTime, Timestamp(seconds: 1_714_558_830, nanoseconds: 123_456_789))
    let s3fs = try await attributes(fs, "a/s3fs")
    XCTAssertEqual(s3fs.permissions, 0o755)
    XCTAssertEqual(s3fs.uid, 7)
    XCTAssertEqual(s3fs.gid, 8)
    XCTAssertEqual(s3fs.modificationTime, Timestamp(seconds: 1_700_000_000))
    let other = try await attributes(fs, "a/other")
    XCTAssertEqual(other.permissions, 0o644)
    XCTAssertEqual(other.uid, 1234)
    // Stat's keys are not xattrs; the others still are.
    let s3fsNames = try await fs.listxattr(inode: try await fs.inode(at: "a/s3fs"))
    XCTAssertFalse(s3fsNames.contains { $0.hasPrefix("user.custom.") })
    let otherNames = try await fs.listxattr(inode: try await fs.inode(at: "a/other"))
    XCTAssertTrue(otherNames.contains("user.custom.mode"))
    XCTAssertTrue(otherNames.contains("user.custom.uid"))
  }

  func testChmodAndChownAreOneConditionalPatchAndNothingWhenUnchanged() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("f", data: bytes("x"))
    let fs = makeWritingFileSystem(store)
    let inode = try await fs.inode(at: "f")
    store.resetCalls()
    // The default it already shows: nothing.
    _ = try await fs.setattr(inode: inode, handle: nil, changes: AttributeChanges(mode: 0o644))
    _ = try await fs.setattr(inode: inode, handle: nil, changes: AttributeChanges(uid: 1234, gid: 5678))
    XCTAssertEqual(store.calls(.patch), [])
    let (chmodded, _) = try await fs.setattr(
      inode: inode, handle: nil, changes: AttributeChanges(mode: 0o750))
    XCTAssertEqual(chmodded.permissions, 0o750)
    let (chowned, _) = try await fs.setattr(
      inode: inode, handle: nil, changes: AttributeChanges(uid: 4321, gid: 5432))
    XCTAssertEqual(chowned.uid, 4321)
    XCTAssertEqual(chowned.gid, 5432)
    XCTAssertEqual(store.calls(.patch), [.patch("f"), .patch("f")])
    XCTAssertEqual(store.calls(.upload), [])
    let custom = store.object("f")?.custom
    XCTAssertEqual(custom?["goog-reserved-posix-mode"], "750")
    XCTAssertEqual(custom?["goog-reserved-posix-uid"], "4321")
    XCTAssertEqual(custom?["goog-reserved-posix-gid"], "5432")
    XCTAssertEqual(store.object("f")?.metageneration, 3)
    // Again: nothing.
    store.resetCalls()
    _ = try await fs.setattr(inode: inode, handle: nil, changes: AttributeChanges(mode: 0o750, uid: 4321))
    XCTAssertEqual(store.calls(.patch), [])
    // A remount shows them.
    let again = makeFileSystem(store)
    let shown = try await attributes(again, "f")
    XCTAssertEqual([shown.permissions, shown.uid, shown.gid], [0o750, 4321, 5432])
    // Back to the mount's defaults: the keys go, in one PATCH (a copy's metadata stays the original's).
    store.resetCalls()
    let (restored, _) = try await fs.setattr(
      inode: inode, handle: nil, changes: AttributeChanges(mode: 0o644, uid: 1234, gid: 5678))
    XCTAssertEqual([restored.permissions, restored.uid, restored.gid], [0o644, 1234, 5678])
    XCTAssertEqual(store.calls(.patch), [.patch("f")])
    XCTAssertEqual(store.object("f")?.custom, [:])
  }

  func testAConcurrentChangeIsReadAgainAndDecidedAgain() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("f", data: bytes("x"), custom: ["k": "v"])
    let fs = makeWritingFileSystem(store)
    let inode = try await fs.inode(at: "f")
    store.beforeNextPatch { store in
      _ = try? store.applyPatch("f", MetadataPatch(custom: ["other": "client"]))
    }
    store.resetCalls()
    _ = try await fs.setattr(inode: inode, handle: nil, changes: AttributeChanges(mode: 0o600))
    XCTAssertEqual(store.calls(.patch), [.patch("f"), .patch("f")])
    let custom = store.object("f")?.custom
    XCTAssertEqual(custom?["goog-reserved-posix-mode"], "600")
    XCTAssertEqual(custom?["other"], "client")
    XCTAssertEqual(custom?["k"], "v")
  }

  func testCreateStoresItsModeAndChangesWhileWritingRideTheUpload() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    let fs = makeWritingFileSystem(store)
    let (entry, opened) = try await Caller.$current.withValue(Caller(uid: 99, gid: 5678)) {
      try await fs.create(parent: 1, name: "secret", mode: 0o700, flags: O_WRONLY | O_CREAT)
    }
    let inode = entry.attributes!.inode
    XCTAssertEqual(entry.attributes?.permissions, 0o700)
    XCTAssertEqual(entry.attributes?.uid, 99)
    try await fs.writeText(inode, opened.handle, at: 0, "data")
    let (changed, _) = try await fs.setattr(
      inode: inode, handle: opened.handle,
      changes: AttributeChanges(mode: 0o600, modificationTime: Timestamp(seconds: 1_600_000_000)))
    XCTAssertEqual(changed.permissions, 0o600)
    try await fs.close(inode, opened.handle)
    XCTAssertEqual(store.calls(.upload), [.upload("secret", ifGenerationMatch: 0)])
    XCTAssertEqual(store.calls(.patch), [])
    let custom = store.object("secret")?.custom
    XCTAssertEqual(custom?["goog-reserved-posix-mode"], "600")
    XCTAssertEqual(custom?["goog-reserved-posix-uid"], "99")
    // The creator's group is the mount's: no key.
    XCTAssertNil(custom?["goog-reserved-posix-gid"])
    XCTAssertEqual(custom?["goog-reserved-file-mtime"], "1600000000")
  }

  func testDirectoriesKeepThemOnTheirPlaceholder() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("implicit/f", data: bytes("x"))
    let fs = makeWritingFileSystem(store)
    let made = try await fs.mkdir(parent: 1, name: "made", mode: 0o700)
    XCTAssertEqual(made.attributes?.permissions, 0o700)
    XCTAssertEqual(store.object("made/")?.custom["goog-reserved-posix-mode"], "700")
    // A directory with no placeholder: the chmod creates one, only where none is.
    let implicit = try await fs.inode(at: "implicit")
    store.resetCalls()
    let (shown, _) = try await fs.setattr(
      inode: implicit, handle: nil, changes: AttributeChanges(mode: 0o750))
    XCTAssertEqual(shown.permissions, 0o750)
    XCTAssertEqual(store.calls(.upload), [.upload("implicit/", ifGenerationMatch: 0)])
    XCTAssertEqual(store.object("implicit/")?.custom["goog-reserved-posix-mode"], "750")
    // One with a placeholder: a PATCH of it.
    store.resetCalls()
    _ = try await fs.setattr(inode: implicit, handle: nil, changes: AttributeChanges(uid: 42))
    XCTAssertEqual(store.calls(.patch), [.patch("implicit/")])
    XCTAssertEqual(store.calls(.upload), [])
    // A remount: the lookup's listing shows the placeholder, and stat its mode.
    let again = makeFileSystem(store)
    let entry = try await again.lookup(parent: 1, name: "implicit")
    XCTAssertEqual(entry.attributes?.permissions, 0o750)
    XCTAssertEqual(entry.attributes?.uid, 42)
    let madeAgain = try await attributes(again, "made")
    XCTAssertEqual(madeAgain.permissions, 0o700)
  }

  func testAFlatListingTellsEachDirectorysPlaceholderOrItsAbsence() {
    let store = InMemoryObjectStore(bucket: "demo")
    let items = [
      store.put("a/", data: [], custom: ["goog-reserved-posix-mode": "700"]),
      store.put("a/f", data: bytes("x")),
      store.put("b/g", data: bytes("x")),
    ]
    var tree = TreeListing(root: "")
    var listings: [TreeListing.Listing] = []
    for item in items { listings += tree.add(item, answeredAt: 0) }
    listings += tree.finish()
    let root = listings.first { $0.key == "" }?.entries ?? []
    let a = root.first { $0.name == "a" }
    let b = root.first { $0.name == "b" }
    XCTAssertEqual(a?.metadata?.custom["goog-reserved-posix-mode"], "700")
    // No placeholder sorts first under b/: it has none (generation 0, no keys).
    XCTAssertEqual(b?.metadata?.generation, 0)
    XCTAssertEqual(b?.metadata?.name, "b/")
  }

  func testMknodOfAFifoStoresItsTypeInItsMode() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    let fs = makeWritingFileSystem(store)
    let entry = try await fs.mknod(
      parent: 1, name: "pipe", mode: FileAttributes.Kind.fifo.mode | 0o640, device: 0)
    XCTAssertEqual(entry.attributes?.kind, .fifo)
    XCTAssertEqual(entry.attributes?.permissions, 0o640)
    XCTAssertEqual(store.calls(.upload), [.upload("pipe", ifGenerationMatch: 0)])
    XCTAssertEqual(store.object("pipe")?.custom["goog-reserved-posix-mode"], "10640")
    XCTAssertEqual(store.object("pipe")?.size, 0)
    let device = try await fs.mknod(
      parent: 1, name: "dev", mode: FileAttributes.Kind.characterDevice.mode | 0o600, device: 0x0103)
    XCTAssertEqual(device.attributes?.kind, .characterDevice)
    XCTAssertEqual(device.attributes?.device, 0x0103)
    XCTAssertEqual(store.object("dev")?.custom["rdev"], "259")
    // Listings show the type; chmod keeps it.
    let again = makeWritingFileSystem(store)
    let kinds = try await again.entries(of: 1, plus: false).map { $0.1.attributes?.kind }
    XCTAssertEqual(kinds, [.characterDevice, .fifo])
    let pipe = try await again.inode(at: "pipe")
    _ = try await again.setattr(inode: pipe, handle: nil, changes: AttributeChanges(mode: 0o600))
    XCTAssertEqual(store.object("pipe")?.custom["goog-reserved-posix-mode"], "10600")
    let pipeAgain = try await again.getattr(inode: pipe).0
    XCTAssertEqual(pipeAgain.kind, .fifo)
  }

  func testStatKeysAreNotXattrsAndSettingThemSendsNothing() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put(
      "f", data: bytes("x"),
      custom: ["goog-reserved-file-mtime": "1700000000", "goog-reserved-posix-mode": "600", "k": "v"])
    let fs = makeWritingFileSystem(store)
    let inode = try await fs.inode(at: "f")
    let names = try await fs.listxattr(inode: inode)
    XCTAssertTrue(names.contains("user.custom.k"))
    XCTAssertFalse(names.contains { $0.contains("goog-reserved") })
    // Asked for by name, the raw key still answers.
    let raw = try await fs.getxattr(inode: inode, name: "user.custom.goog-reserved-posix-mode")
    XCTAssertEqual(text(raw), "600")
    store.resetCalls()
    try await fs.removexattr(inode: inode, name: "user.custom.goog-reserved-file-mtime")
    try await fs.setxattr(
      inode: inode, name: "user.custom.goog-reserved-posix-mode", value: bytes("777"), flags: [])
    XCTAssertEqual(store.calls(.patch), [])
    XCTAssertEqual(store.object("f")?.custom["goog-reserved-posix-mode"], "600")
  }

  func testPosixAttributesOffBringsBackTheDefaults() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put(
      "f", data: bytes("x"), custom: ["goog-reserved-posix-mode": "700", "goog-reserved-posix-uid": "1"])
    var configuration = Configuration()
    configuration.uid = 1234
    configuration.gid = 5678
    configuration.posixAttributes = false
    configuration.stageDirectory = makeStageDirectory()
    let fs = BucketFileSystem(store: store, configuration: configuration, logger: quietLogger, clock: { 0 })
    let inode = try await fs.inode(at: "f")
    let shown = try await fs.getattr(inode: inode).0
    XCTAssertEqual([shown.permissions, shown.uid], [0o644, 1234])
    store.resetCalls()
    _ = try await fs.setattr(inode: inode, handle: nil, changes: AttributeChanges(mode: 0o600, uid: 7))
    XCTAssertEqual(store.calls(.patch), [])
    let listed = try await fs.listxattr(inode: inode)
    XCTAssertTrue(listed.contains("user.custom.goog-reserved-posix-mode"))
    await XCTAssertErrno(.notPermitted) {
      _ = try await fs.mknod(parent: 1, name: "pipe", mode: FileAttributes.Kind.fifo.mode | 0o644, device: 0)
    }
  }
}

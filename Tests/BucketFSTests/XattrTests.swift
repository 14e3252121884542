import FUSE
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

/// docs/SEMANTICS.md#xattrs against the exact in-process model of the service.
final class XattrTests: XCTestCase {
  var store: InMemoryObjectStore!
  var fs: BucketFileSystem!
  var forest: UInt64 = 0

  override func setUp() async throws {
    store = InMemoryObjectStore(bucket: "demo")
    store.put(
      "images/forest.jpg", data: bytes("jpeg"), contentType: "image/jpeg", cacheControl: "public,max-age=300",
      custom: ["location": "Yosemite, CA, USA", "activity": "Hiking"])
    fs = makeFileSystem(store)
    forest = try await fs.inode(at: "images/forest.jpg")
    store.resetCalls()
  }

  private func value(_ name: String) async throws -> String {
    String(decoding: try await fs.getxattr(inode: forest, name: name), as: UTF8.self)
  }

  func testTheSeedsExample() async throws {
    await XCTAssertEqualAsync(try await value("user.contentType"), "image/jpeg")
    await XCTAssertEqualAsync(try await value("user.cacheControl"), "public,max-age=300")
    await XCTAssertEqualAsync(try await value("user.custom.location"), "Yosemite, CA, USA")
    await XCTAssertEqualAsync(try await value("user.custom.activity"), "Hiking")
    await XCTAssertEqualAsync(try await value("user.fullPath"), "images/forest.jpg")
    await XCTAssertEqualAsync(try await value("user.name"), "forest.jpg")
    await XCTAssertEqualAsync(try await value("user.bucket"), "demo")
    await XCTAssertEqualAsync(try await value("user.size"), "4")
    await XCTAssertEqualAsync(try await value("user.md5Hash"), store.object("images/forest.jpg")!.md5Hash)
    await XCTAssertErrno(.noData) { _ = try await self.value("user.contentLanguage") }
    await XCTAssertErrno(.noData) { _ = try await self.value("user.custom.missing") }
    XCTAssertEqual(store.calls, [], "all from the lookup's metadata")
  }

  func testSetChangesThatPropertyOnlyAndShowsTheNewValueWithoutAnotherRequest() async throws {
    let before = store.object("images/forest.jpg")!
    try await fs.setxattr(inode: forest, name: "user.contentType", value: bytes("text/plain"), flags: [])
    XCTAssertEqual(store.calls(.patch).count, 1)
    let after = store.object("images/forest.jpg")!
    XCTAssertEqual(after.contentType, "text/plain")
    XCTAssertEqual(after.cacheControl, before.cacheControl)
    XCTAssertEqual(after.custom, before.custom)
    XCTAssertEqual(after.metageneration, before.metageneration + 1)
    XCTAssertEqual(after.generation, before.generation)

    store.resetCalls()
    await XCTAssertEqualAsync(try await value("user.contentType"), "text/plain")
    await XCTAssertEqualAsync(try await value("user.metageneration"), String(after.metageneration))
    XCTAssertEqual(store.calls, [], "the PATCH answer refreshed the cache")

    // A metadata change moves ctime, not mtime.
    let attributes = try await fs.getattr(inode: forest).0
    XCTAssertEqual(attributes.modificationTime, RFC3339.parse(before.timeCreated))
    XCTAssertEqual(attributes.changeTime, RFC3339.parse(after.updated))
    XCTAssertGreaterThan(attributes.changeTime, RFC3339.parse(before.updated)!)
  }

  func testCustomKeysSetAndRemove() async throws {
    try await fs.setxattr(inode: forest, name: "user.custom.camera", value: bytes("X100"), flags: [])
    XCTAssertEqual(
      store.object("images/forest.jpg")!.custom,
      ["location": "Yosemite, CA, USA", "activity": "Hiking", "camera": "X100"])
    try await fs.removexattr(inode: forest, name: "user.custom.location")
    XCTAssertEqual(store.object("images/forest.jpg")!.custom, ["activity": "Hiking", "camera": "X100"])
    await XCTAssertFalseAsync(try await fs.listxattr(inode: forest).contains("user.custom.location"))
    await XCTAssertErrno(.noData) {
      try await self.fs.removexattr(inode: self.forest, name: "user.custom.location")
    }

    try await fs.removexattr(inode: forest, name: "user.cacheControl")
    XCTAssertNil(store.object("images/forest.jpg")!.cacheControl)
    XCTAssertEqual(store.object("images/forest.jpg")!.contentType, "image/jpeg")
    await XCTAssertErrno(.noData) { _ = try await self.value("user.cacheControl") }

    // An empty value is a value.
    try await fs.setxattr(inode: forest, name: "user.custom.empty", value: [], flags: [])
    XCTAssertEqual(store.object("images/forest.jpg")!.custom["empty"], "")
  }

  func testCreateAndReplaceFlags() async throws {
    await XCTAssertErrno(.exists) {
      try await self.fs.setxattr(
        inode: self.forest, name: "user.contentType", value: bytes("x"), flags: .create)
    }
    await XCTAssertErrno(.noData) {
      try await self.fs.setxattr(
        inode: self.forest, name: "user.contentLanguage", value: bytes("en"), flags: .replace)
    }
    XCTAssertEqual(store.calls(.patch), [], "decided without sending")
    try await fs.setxattr(inode: forest, name: "user.contentLanguage", value: bytes("en"), flags: .create)
    try await fs.setxattr(inode: forest, name: "user.contentLanguage", value: bytes("fr"), flags: .replace)
    XCTAssertEqual(store.object("images/forest.jpg")!.contentLanguage, "fr")
  }

  func testAChangeMadeElsewhereBetweenCheckAndPatchIsCaught() async throws {
    // Someone else adds the key after our check: CREATE must now fail, and
    // their value must survive.
    store.beforeNextPatch { store in
      _ = try? store.applyPatch("images/forest.jpg", MetadataPatch(custom: ["camera": "theirs"]))
    }
    await XCTAssertErrno(.exists) {
      try await self.fs.setxattr(
        inode: self.forest, name: "user.custom.camera", value: bytes("ours"), flags: .create)
    }
    XCTAssertEqual(store.object("images/forest.jpg")!.custom["camera"], "theirs")
    XCTAssertEqual(store.calls(.patch).count, 1)
    XCTAssertEqual(store.calls(.metadata).count, 1, "re-read after the 412")

    // A plain set decides again and applies on top of the other change.
    store.resetCalls()
    store.beforeNextPatch { store in
      _ = try? store.applyPatch("images/forest.jpg", MetadataPatch(fields: [.contentLanguage: "de"]))
    }
    try await fs.setxattr(inode: forest, name: "user.contentType", value: bytes("image/png"), flags: [])
    let now = store.object("images/forest.jpg")!
    XCTAssertEqual(now.contentType, "image/png")
    XCTAssertEqual(now.contentLanguage, "de", "the other writer's change is not overwritten")
    XCTAssertEqual(store.calls(.patch).count, 2)

    // A removal whose property vanished meanwhile in another change answers
    // ENODATA. (Had the other change been exactly this removal, it could
    // have been ours with its answer lost: EdgeTests.)
    store.resetCalls()
    store.beforeNextPatch { store in
      _ = try? store.applyPatch(
        "images/forest.jpg", MetadataPatch(fields: [.contentLanguage: "it"], custom: ["activity": nil]))
    }
    await XCTAssertErrno(.noData) {
      try await self.fs.removexattr(inode: self.forest, name: "user.custom.activity")
    }
  }

  func testReadOnlyPropertiesAndForeignNamespacesSendNothing() async throws {
    // Read-only properties: accepted and ignored, so copying tools never fail on them.
    for name in [
      "user.md5Hash", "user.size", "user.generation", "user.bucket", "user.crc32c", "user.updated",
    ] {
      try await fs.setxattr(inode: forest, name: name, value: bytes("1"), flags: [])
      try await fs.removexattr(inode: forest, name: name)
      try await fs.setxattr(inode: forest, name: name, value: [0xff], flags: [.create])
    }
    await XCTAssertEqualAsync(
      text(try await fs.getxattr(inode: forest, name: "user.generation")),
      String(store.object("images/forest.jpg")!.generation), "the real value shows after")
    for name in ["user.custom."] {
      await XCTAssertErrno(.notPermitted) {
        try await self.fs.setxattr(inode: self.forest, name: name, value: bytes("1"), flags: [])
      }
      await XCTAssertErrno(.notPermitted) { try await self.fs.removexattr(inode: self.forest, name: name) }
    }
    for name in ["security.selinux", "system.posix_acl_access", "trusted.x", "os2.x"] {
      await XCTAssertErrno(.notSupported) { _ = try await self.fs.getxattr(inode: self.forest, name: name) }
      await XCTAssertErrno(.notSupported) {
        try await self.fs.setxattr(inode: self.forest, name: name, value: bytes("1"), flags: [])
      }
      await XCTAssertErrno(.notSupported) { try await self.fs.removexattr(inode: self.forest, name: name) }
    }
    XCTAssertEqual(store.calls, [])
  }

  func testOtherProgramsUserNamesAreKeptAsCustomKeysOfTheirName() async throws {
    try await fs.setxattr(
      inode: forest, name: "user.xdg.origin.url", value: bytes("https://example.com/a"), flags: [])
    XCTAssertEqual(store.object("images/forest.jpg")?.custom["user.xdg.origin.url"], "https://example.com/a")
    await XCTAssertEqualAsync(try await value("user.xdg.origin.url"), "https://example.com/a")
    let names = try await fs.listxattr(inode: forest)
    XCTAssertTrue(names.contains("user.xdg.origin.url"), "\(names)")
    XCTAssertFalse(names.contains("user.custom.user.xdg.origin.url"), "shown once: \(names)")
    await XCTAssertErrno(.invalid) {
      try await self.fs.setxattr(inode: self.forest, name: "user.xdg.bad", value: [0xff], flags: [])
    }
    try await fs.removexattr(inode: forest, name: "user.xdg.origin.url")
    XCTAssertNil(store.object("images/forest.jpg")?.custom["user.xdg.origin.url"])
  }

  func testSettingTheValueAPropertyHasSendsNothing() async throws {
    try await fs.setxattr(inode: forest, name: "user.contentType", value: bytes("image/jpeg"), flags: [])
    try await fs.setxattr(
      inode: forest, name: "user.cacheControl", value: bytes("public,max-age=300"), flags: [])
    XCTAssertEqual(store.calls(.patch), [])
    await XCTAssertErrno(.exists) {
      try await self.fs.setxattr(
        inode: self.forest, name: "user.contentType", value: bytes("image/jpeg"), flags: [.create])
    }
    try await fs.setxattr(inode: forest, name: "user.contentType", value: bytes("image/png"), flags: [])
    XCTAssertEqual(store.calls(.patch).count, 1)
  }

  func testTheOptionBringsBackEPERMForReadOnlyProperties() async throws {
    let strict = makeFileSystem(store, refuseReadOnlyXattrs: true)
    let inode = try await strict.inode(at: "images/forest.jpg")
    for name in ["user.md5Hash", "user.generation", "user.bucket"] {
      await XCTAssertErrno(.notPermitted) {
        try await strict.setxattr(inode: inode, name: name, value: bytes("1"), flags: [])
      }
      await XCTAssertErrno(.notPermitted) { try await strict.removexattr(inode: inode, name: name) }
    }
    XCTAssertEqual(store.calls(.patch), [])
  }

  func testInvalidAndOversizedValues() async throws {
    await XCTAssertErrno(.invalid) {
      try await self.fs.setxattr(inode: self.forest, name: "user.custom.k", value: [0xff, 0xfe], flags: [])
    }
    await XCTAssertErrno(.tooBig) {
      try await self.fs.setxattr(
        inode: self.forest, name: "user.custom.k", value: Array(repeating: 0x61, count: 4097), flags: [])
    }
    try await fs.setxattr(
      inode: forest, name: "user.custom.a", value: Array(repeating: 0x61, count: 4000), flags: [])
    try await fs.setxattr(
      inode: forest, name: "user.custom.b", value: Array(repeating: 0x61, count: 3000), flags: [])
    store.resetCalls()
    await XCTAssertErrno(.tooBig) {
      try await self.fs.setxattr(
        inode: self.forest, name: "user.custom.c", value: Array(repeating: 0x61, count: 2000), flags: [])
    }
    XCTAssertEqual(store.calls(.patch), [], "checked before sending")
  }

  func testServiceRefusalOfLargeMetadataIsE2BIG() async throws {
    store.injectFaults([.tooLarge("metadata exceeds the limit")], for: .patch)
    await XCTAssertErrno(.tooBig) {
      try await self.fs.setxattr(inode: self.forest, name: "user.custom.k", value: bytes("v"), flags: [])
    }
  }

  func testDirectoriesHaveNoMetadata() async throws {
    let images = try await fs.inode(at: "images")
    await XCTAssertEqualAsync(try await fs.listxattr(inode: images), [])
    await XCTAssertErrno(.noData) { _ = try await self.fs.getxattr(inode: images, name: "user.contentType") }
    await XCTAssertErrno(.notPermitted) {
      try await self.fs.setxattr(inode: images, name: "user.contentType", value: bytes("x"), flags: [])
    }
    await XCTAssertErrno(.notSupported) {
      _ = try await self.fs.getxattr(inode: images, name: "security.selinux")
    }
  }

  func testReadOnlyMount() async throws {
    let readOnly = makeFileSystem(store, readOnly: true)
    let inode = try await readOnly.inode(at: "images/forest.jpg")
    await XCTAssertErrno(.readOnly) {
      try await readOnly.setxattr(inode: inode, name: "user.contentType", value: bytes("x"), flags: [])
    }
    await XCTAssertErrno(.readOnly) { try await readOnly.removexattr(inode: inode, name: "user.contentType") }
    await XCTAssertEqualAsync(
      String(decoding: try await readOnly.getxattr(inode: inode, name: "user.contentType"), as: UTF8.self),
      "image/jpeg")
  }

  func testObjectDeletedElsewhere() async throws {
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    let inode = try await fs.inode(at: "images/forest.jpg")
    store.delete("images/forest.jpg")
    clock.advance(120)
    await XCTAssertErrno(.noEntry) { _ = try await fs.getxattr(inode: inode, name: "user.contentType") }
  }
}

import FUSE
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// What an upload stores besides the bytes: carried, inferred, set while
/// staged, and mtimes (docs/SEMANTICS.md#writes).
final class WriteMetadataTests: XCTestCase {
  var store: InMemoryObjectStore!
  var fs: BucketFileSystem!

  override func setUp() async throws {
    store = InMemoryObjectStore(bucket: "demo")
    store.put(
      "site/index.html", data: bytes("<p>old</p>"), contentType: "text/html; charset=utf-8",
      cacheControl: "public, max-age=60", contentDisposition: "inline", contentEncoding: "identity",
      contentLanguage: "en",
      custom: [
        "firebaseStorageDownloadTokens": "3f1c-token", "goog-reserved-file-mtime": "1700000000",
        "owner": "web team",
      ])
    fs = makeWritingFileSystem(store, firebase: true)
  }

  func testAnOverwriteCarriesEveryWritablePropertyOfTheGenerationItReplaces() async throws {
    let before = store.object("site/index.html")!
    let (inode, handle) = try await fs.openFile("site/index.html", flags: O_WRONLY | O_TRUNC)
    try await fs.writeText(inode, handle, at: 0, "<p>new</p>")
    try await fs.close(inode, handle)
    let after = store.object("site/index.html")!
    XCTAssertEqual(text(store.data("site/index.html")), "<p>new</p>")
    for field in ObjectMetadata.WritableField.allCases {
      XCTAssertEqual(after[field], before[field], "\(field)")
    }
    XCTAssertEqual(after.custom["firebaseStorageDownloadTokens"], "3f1c-token", "download links keep working")
    XCTAssertEqual(after.custom["owner"], "web team")
    // The mtime key is carried, with the time of the new bytes.
    let mtime = Int(after.custom["goog-reserved-file-mtime"] ?? "")
    XCTAssertNotNil(mtime)
    XCTAssertGreaterThan(mtime ?? 0, 1_700_000_000)
  }

  func testANewFileGetsItsTypeFromItsNameAndAFreshDownloadToken() async throws {
    for (name, type) in [
      ("data.json", "application/json"), ("photo.JPG", "image/jpeg"),
      ("Makefile", "application/octet-stream"),
      (".bashrc", "application/octet-stream"), ("archive.tar.gz", "application/gzip"),
    ] {
      let (inode, handle) = try await fs.createFile(name)
      try await fs.close(inode, handle)
      XCTAssertEqual(store.object(name)?.contentType, type, name)
      let token = store.object(name)?.custom["firebaseStorageDownloadTokens"] ?? ""
      XCTAssertEqual(token.count, 36, "a UUID")
    }
    let tokens = Set(
      ["data.json", "Makefile"].compactMap { store.object($0)?.custom["firebaseStorageDownloadTokens"] })
    XCTAssertEqual(tokens.count, 2, "one per object")
  }

  func testTheBuiltInTableServesWhenTheSystemHasNone() {
    let types = ContentTypes(mimeTypesPath: "/nonexistent/mime.types")
    XCTAssertEqual(types.type(for: "a/b/c.png"), "image/png")
    XCTAssertEqual(types.type(for: "x.unknownext"), "application/octet-stream")
    XCTAssertEqual(
      ContentTypes.parse("# comment\ntext/x-demo\t\tdemo dm\nother/type demo\n")["demo"], "text/x-demo")
  }

  func testXattrsSetWhileStagedGoIntoTheUploadWithoutAPatch() async throws {
    let (inode, handle) = try await fs.createFile("copy.bin")
    try await fs.writeText(inode, handle, at: 0, "payload")
    try await fs.setxattr(inode: inode, name: "user.contentType", value: bytes("text/csv"), flags: [])
    try await fs.setxattr(inode: inode, name: "user.custom.origin", value: bytes("laptop"), flags: [])
    try await fs.setxattr(inode: inode, name: "user.cacheControl", value: bytes("no-store"), flags: [])
    // Read-only names from a copy of another bucketfs file are ignored quietly.
    try await fs.setxattr(inode: inode, name: "user.md5Hash", value: bytes("AAAA"), flags: [])
    try await fs.setxattr(inode: inode, name: "user.generation", value: bytes("1"), flags: [])
    // Another program's user. name goes with the upload, as a custom key of that name.
    try await fs.setxattr(inode: inode, name: "user.xdg.referrer.url", value: bytes("https://r"), flags: [])
    await XCTAssertErrno(.notSupported) {
      try await self.fs.setxattr(inode: inode, name: "security.selinux", value: bytes("x"), flags: [])
    }
    // Pending values show before the upload.
    await XCTAssertEqualAsync(text(try await fs.getxattr(inode: inode, name: "user.contentType")), "text/csv")
    await XCTAssertEqualAsync(text(try await fs.getxattr(inode: inode, name: "user.size")), "7")
    await XCTAssertErrno(.noData) { _ = try await self.fs.getxattr(inode: inode, name: "user.md5Hash") }
    let names = try await fs.listxattr(inode: inode)
    XCTAssertTrue(names.contains("user.custom.origin"))
    try await fs.removexattr(inode: inode, name: "user.cacheControl")
    XCTAssertEqual(store.calls(.patch), [])
    try await fs.close(inode, handle)
    let stored = store.object("copy.bin")!
    XCTAssertEqual(stored.contentType, "text/csv")
    XCTAssertEqual(stored.custom["origin"], "laptop")
    XCTAssertEqual(stored.custom["user.xdg.referrer.url"], "https://r")
    XCTAssertNil(stored.cacheControl)
    XCTAssertEqual(store.calls(.patch), [], "carried by the upload itself")
    XCTAssertEqual(
      fs.provenance.inferred(key: "copy.bin", generation: stored.generation),
      [.custom("firebaseStorageDownloadTokens")], "the user set the type; the token was generated")
  }

  func testInferredPropertiesAreRememberedPerGeneration() async throws {
    let (inode, handle) = try await fs.createFile("tmp123.json")
    try await fs.close(inode, handle)
    let stored = store.object("tmp123.json")!
    XCTAssertEqual(
      fs.provenance.inferred(key: "tmp123.json", generation: stored.generation),
      [.writable(.contentType), .custom("firebaseStorageDownloadTokens")])
    XCTAssertEqual(fs.provenance.inferred(key: "tmp123.json", generation: stored.generation + 1), [])
    let carried = store.object("site/index.html")!
    XCTAssertEqual(fs.provenance.inferred(key: "site/index.html", generation: carried.generation), [])
  }

  func testUtimensOnAFileBeingWrittenGoesIntoTheUpload() async throws {
    let (inode, handle) = try await fs.createFile("dated.txt")
    try await fs.writeText(inode, handle, at: 0, "x")
    let when = Timestamp(seconds: 1_600_000_000, nanoseconds: 0)
    let shown = try await fs.setattr(
      inode: inode, handle: handle, changes: AttributeChanges(modificationTime: when)
    ).0
    XCTAssertEqual(shown.modificationTime, when)
    try await fs.close(inode, handle)
    XCTAssertEqual(store.object("dated.txt")?.custom["goog-reserved-file-mtime"], "1600000000")
    XCTAssertEqual(store.calls(.patch), [])
    await XCTAssertEqualAsync(try await fs.getattr(inode: inode).0.modificationTime, when)
  }

  func testUtimensOfAClosedFileIsOneConditionalPatchAndSoIsChmodWithChown() async throws {
    let inode = try await fs.inode(at: "site/index.html")
    let before = store.object("site/index.html")!
    store.resetCalls()
    let when = Timestamp(seconds: 1_650_000_000)
    let shown = try await fs.setattr(
      inode: inode, handle: nil, changes: AttributeChanges(modificationTime: when)
    ).0
    XCTAssertEqual(store.calls, [.patch("site/index.html")])
    XCTAssertEqual(shown.modificationTime, when)
    let after = store.object("site/index.html")!
    XCTAssertEqual(after.custom["goog-reserved-file-mtime"], "1650000000")
    XCTAssertEqual(after.generation, before.generation)
    store.resetCalls()
    _ = try await fs.setattr(
      inode: inode, handle: nil, changes: AttributeChanges(mode: 0o600, uid: 0, gid: 0))
    XCTAssertEqual(store.calls, [.patch("site/index.html")])
    let owned = store.object("site/index.html")!.custom
    XCTAssertEqual(owned["goog-reserved-posix-mode"], "600")
    XCTAssertEqual(owned["goog-reserved-posix-uid"], "0")
    XCTAssertEqual(owned["goog-reserved-posix-gid"], "0")
  }
}

extension WriteMetadataTests {
  /// rsync -X closes its temp file, reopens it read-only and sets the
  /// source's names, removing the ones its source lacks.
  func testReadOnlyNamesOnAFileJustCreatedHereAreIgnoredAndWritableOnesArePatched() async throws {
    let (inode, handle) = try await fs.createFile("tmp.dat")
    try await fs.close(inode, handle)
    store.resetCalls()
    try await fs.removexattr(inode: inode, name: "user.generation")
    try await fs.setxattr(inode: inode, name: "user.md5Hash", value: bytes("x"), flags: [])
    XCTAssertEqual(store.calls, [])
    try await fs.setxattr(inode: inode, name: "user.custom.origin", value: bytes("rsync"), flags: [])
    XCTAssertEqual(store.calls(.patch).count, 1)
    XCTAssertEqual(store.object("tmp.dat")?.custom["origin"], "rsync")
    // Any other object's read-only names are accepted and ignored too: nothing is sent.
    let other = try await fs.inode(at: "site/index.html")
    store.resetCalls()
    try await fs.removexattr(inode: other, name: "user.generation")
    XCTAssertEqual(store.calls, [])
  }
}

import FUSE
import ObjectStore
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

final class ErrnoMappingTests: XCTestCase {
  func testFileFactsKeepTimesExactlyInTheirCompactForm() {
    func facts(created: String, updated: String, mtime: String?) -> FileFacts {
      FileFacts(
        ObjectMetadata(
          bucket: "b", name: "f", size: 7, generation: 42, metageneration: 1, timeCreated: created,
          updated: updated, custom: mtime.map { ["goog-reserved-file-mtime": $0] } ?? [:]))
    }
    let recent = facts(
      created: "2024-05-01T10:20:30.123456789Z", updated: "2024-05-02T00:00:00Z", mtime: "1700000000")
    XCTAssertEqual(recent.created, Timestamp(seconds: 1_714_558_830, nanoseconds: 123_456_789))
    XCTAssertEqual(recent.changed, Timestamp(seconds: 1_714_608_000))
    XCTAssertEqual(recent.modified, Timestamp(seconds: 1_700_000_000))
    XCTAssertEqual(recent.size, 7)
    XCTAssertEqual(recent.generation, 42)

    let old = facts(created: "1969-12-31T23:59:59.5Z", updated: "", mtime: nil)
    XCTAssertEqual(old.created, Timestamp(seconds: -1, nanoseconds: 500_000_000))
    XCTAssertNil(old.changed)
    XCTAssertNil(old.modified)
  }

  /// Nanoseconds since 1970 fit an Int64 until 2262-04-11T23:47:16.854775807Z:
  /// a time past it (set by any client as the mtime) is absent, not a trap.
  func testTimesPastWhatNanosecondsHoldAreAbsent() {
    let facts = FileFacts(
      ObjectMetadata(
        bucket: "b", name: "f", size: 7, generation: 42, metageneration: 1,
        timeCreated: "2262-04-11T23:47:16.9Z", updated: "9999-12-31T23:59:59.999999999Z",
        custom: ["goog-reserved-file-mtime": "2262-04-11T23:47:16.999999999Z"]))
    XCTAssertNil(facts.created)
    XCTAssertNil(facts.changed)
    XCTAssertNil(facts.modified)
    let last = FileFacts(
      ObjectMetadata(
        bucket: "b", name: "f", size: 7, generation: 42, metageneration: 1,
        timeCreated: "2262-04-11T23:47:16.854775807Z", updated: "",
        custom: ["goog-reserved-file-mtime": "-9223372036"]))
    XCTAssertEqual(last.created, Timestamp(seconds: 9_223_372_036, nanoseconds: 854_775_807))
    XCTAssertNil(last.modified)
  }

  func testStorageErrorsMapToErrno() {
    let table: [(StorageError, ErrorMapping.Context, Int32)] = [
      (.notFound, .metadata, ENOENT),
      (.notFound, .read, ESTALE),  // the pinned generation is gone
      (.notFound, .inode, ESTALE),  // the kernel's entry for the name is stale
      (.accessDenied("no"), .inode, EACCES),
      (.preconditionFailed, .inode, EIO),
      (.accessDenied("no"), .metadata, EACCES),
      (.preconditionFailed, .read, ESTALE),
      (.tooLarge("metadata too large"), .metadata, E2BIG),
      (.badRequest("bad"), .metadata, EINVAL),
      (.unavailable("503"), .metadata, EIO),
      (.unavailable("503"), .read, EIO),
      (.invalidResponse("garbage"), .metadata, EIO),
      (.cancelled, .metadata, EINTR),
    ]
    for (error, context, expected) in table {
      XCTAssertEqual(ErrorMapping.errno(for: error, context: context).code, expected, "\(error) \(context)")
    }
    XCTAssertEqual(ErrorMapping.errno(for: CancellationError()).code, EINTR)
    XCTAssertEqual(ErrorMapping.errno(for: Errno.exists).code, EEXIST)
    struct Odd: Error {}
    XCTAssertEqual(ErrorMapping.errno(for: Odd()).code, EIO)
  }

  func testFirebaseRulesMessageGetsItsFix() {
    let rules = StorageError.accessDenied(
      "Listing objects in a bucket is disallowed for rules_version = \"1\". Please update storage security rules"
    )
    XCTAssertTrue(ErrorMapping.hint(for: rules)?.contains("rules_version = \"2\"") ?? false)
    XCTAssertNil(ErrorMapping.hint(for: .accessDenied("caller does not have storage.objects.get")))
    XCTAssertNil(ErrorMapping.hint(for: .notFound))
  }

  func testXattrBufferProtocol() {
    XCTAssertEqual(XattrReply(value: Array("image/jpeg".utf8), bufferSize: 0), .size(10))
    XCTAssertEqual(XattrReply(value: Array("image/jpeg".utf8), bufferSize: 4), .error(.range))
    XCTAssertEqual(XattrReply(value: Array("image/jpeg".utf8), bufferSize: 10), .value)
    XCTAssertEqual(XattrReply(value: [], bufferSize: 0), .size(0))
  }
}

final class XattrMappingTests: XCTestCase {
  static let forest = ObjectMetadata(
    bucket: "demo", name: "images/forest.jpg", size: 1234, generation: 17, metageneration: 3,
    timeCreated: "2024-05-01T10:20:30.123Z", updated: "2024-05-02T10:20:30.123Z", md5Hash: "bWQ1",
    crc32c: "Y3Jj", etag: "ZXRhZw==", storageClass: "STANDARD", cacheControl: "public,max-age=300",
    contentType: "image/jpeg", custom: ["location": "Yosemite, CA, USA", "activity": "Hiking"])

  func testNamesMapToProperties() {
    let table: [(String, XattrName?)] = [
      ("user.bucket", .readOnly(.bucket)), ("user.generation", .readOnly(.generation)),
      ("user.metageneration", .readOnly(.metageneration)), ("user.fullPath", .readOnly(.fullPath)),
      ("user.name", .readOnly(.name)), ("user.size", .readOnly(.size)),
      ("user.timeCreated", .readOnly(.timeCreated)), ("user.updated", .readOnly(.updated)),
      ("user.md5Hash", .readOnly(.md5Hash)), ("user.crc32c", .readOnly(.crc32c)),
      ("user.etag", .readOnly(.etag)),
      ("user.storageClass", .readOnly(.storageClass)),
      ("user.cacheControl", .writable(.cacheControl)),
      ("user.contentDisposition", .writable(.contentDisposition)),
      ("user.contentEncoding", .writable(.contentEncoding)),
      ("user.contentLanguage", .writable(.contentLanguage)),
      ("user.contentType", .writable(.contentType)),
      ("user.custom.location", .custom("location")), ("user.custom.a.b", .custom("a.b")),
      ("user.custom.", .unknown), ("user.", .unknown),
      // Other programs' user. names are custom keys of the very name.
      ("user.whatever", .custom("user.whatever")), ("user.contenttype", .custom("user.contenttype")),
      ("user.xdg.origin.url", .custom("user.xdg.origin.url")),
      ("user.custom.user.xdg.origin.url", .custom("user.xdg.origin.url")),
      ("security.selinux", nil), ("system.posix_acl_access", nil), ("trusted.x", nil), ("contentType", nil),
    ]
    for (name, expected) in table { XCTAssertEqual(XattrName(name), expected, name) }
  }

  func testWritability() {
    XCTAssertTrue(XattrName("user.contentType")!.isWritable)
    XCTAssertTrue(XattrName("user.custom.k")!.isWritable)
    // The seeds' table marks md5Hash writable, but the service computes it.
    XCTAssertFalse(XattrName("user.md5Hash")!.isWritable)
    XCTAssertFalse(XattrName("user.size")!.isWritable)
    XCTAssertTrue(XattrName("user.nonsense")!.isWritable)
    XCTAssertFalse(XattrName("user.custom.")!.isWritable)
  }

  /// Each custom key shows under one name, which parses back to that key.
  func testEveryCustomKeyShowsOnce() {
    var metadata = Self.forest
    metadata.custom = [
      "location": "x", "user.xdg.origin.url": "https://a", "user.contentType": "c", "user.custom.k": "d",
      "user.": "e",
    ]
    let shown = XattrName.names(of: metadata).filter {
      if case .custom = XattrName($0) { return true } else { return false }
    }
    XCTAssertEqual(
      shown,
      [
        "user.custom.location", "user.custom.user.", "user.custom.user.contentType",
        "user.custom.user.custom.k", "user.xdg.origin.url",
      ])
    for name in shown {
      guard case .custom(let key)? = XattrName(name) else { return XCTFail(name) }
      XCTAssertEqual(metadata.custom[key].map { _ in name }, name)
      XCTAssertEqual(XattrName.shownName(ofCustomKey: key), name)
    }
  }

  func testValues() {
    let m = Self.forest
    let table: [(String, String?)] = [
      ("user.bucket", "demo"), ("user.generation", "17"), ("user.metageneration", "3"),
      ("user.fullPath", "images/forest.jpg"), ("user.name", "forest.jpg"), ("user.size", "1234"),
      ("user.timeCreated", "2024-05-01T10:20:30.123Z"), ("user.updated", "2024-05-02T10:20:30.123Z"),
      ("user.md5Hash", "bWQ1"), ("user.contentType", "image/jpeg"),
      ("user.cacheControl", "public,max-age=300"),
      ("user.contentLanguage", nil), ("user.custom.location", "Yosemite, CA, USA"), ("user.custom.nope", nil),
    ]
    for (name, value) in table { XCTAssertEqual(XattrName(name)!.value(in: m), value, name) }
  }

  func testListingHasOnlyPresentPropertiesAndEveryCustomKey() {
    XCTAssertEqual(
      XattrName.names(of: Self.forest),
      [
        "user.bucket", "user.generation", "user.metageneration", "user.fullPath", "user.name", "user.size",
        "user.timeCreated", "user.updated", "user.md5Hash", "user.crc32c", "user.etag", "user.storageClass",
        "user.cacheControl", "user.contentType", "user.custom.activity", "user.custom.location",
      ])
  }

  func testPatchesCarryOnlyTheirField() {
    XCTAssertEqual(
      XattrName("user.contentType")!.patch("text/plain"), MetadataPatch(fields: [.contentType: "text/plain"]))
    XCTAssertEqual(
      XattrName("user.cacheControl")!.patch(nil), MetadataPatch(fields: [.cacheControl: String?.none]))
    XCTAssertEqual(XattrName("user.custom.k")!.patch("v"), MetadataPatch(custom: ["k": "v"]))
    XCTAssertEqual(XattrName("user.custom.k")!.patch(nil), MetadataPatch(custom: ["k": String?.none]))
  }

  func testCustomMetadataLimits() {
    XCTAssertTrue(MetadataLimits.fits(["k": String(repeating: "v", count: 4096)]))
    XCTAssertFalse(MetadataLimits.fits(["k": String(repeating: "v", count: 4097)]))
    XCTAssertTrue(
      MetadataLimits.fits([
        "a": String(repeating: "v", count: 4095), "b": String(repeating: "v", count: 4095),
      ]))
    XCTAssertFalse(
      MetadataLimits.fits([
        "a": String(repeating: "v", count: 4000), "b": String(repeating: "v", count: 4000),
        "c": String(repeating: "v", count: 200),
      ]))
  }
}

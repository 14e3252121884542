import XCTest

@testable import BucketFS

/// What bucketfs chose of the files it stored, per version, and which files
/// it created lately (Writes/Provenance.swift).
final class ProvenanceTests: XCTestCase {
  let clock = ManualClock()

  func makeProvenance(ttl: Double = 60) -> Provenance {
    var configuration = Configuration()
    configuration.metadataTTL = ttl
    configuration.firebaseDownloadTokens = true
    configuration.mimeTypesPath = nil
    return Provenance(configuration: configuration, clock: clock.read)
  }

  func testANewFilesTypeAndTokenAreInferredAndKeptPerVersion() {
    let provenance = makeProvenance()
    let (attributes, inferred) = provenance.newFile(name: "page.html", mode: 0o644)
    XCTAssertEqual(attributes.contentType, "text/html")
    XCTAssertNotNil(attributes.custom[Provenance.firebaseTokenKey])
    XCTAssertEqual(inferred, [.writable(.contentType), .custom(Provenance.firebaseTokenKey)])
    provenance.stored(key: "page.html", generation: 7, inferred: inferred)
    XCTAssertEqual(provenance.inferred(key: "page.html", generation: 7), inferred)
    XCTAssertEqual(provenance.inferred(key: "page.html", generation: 8), [], "another version: the user's")
    provenance.userSet(.writable(.contentType), key: "page.html", generation: 7)
    XCTAssertEqual(
      provenance.inferred(key: "page.html", generation: 7), [.custom(Provenance.firebaseTokenKey)])
  }

  func testTheOldestVersionsAreDroppedPastTheBound() {
    let provenance = makeProvenance()
    for generation in 1...Int64(Provenance.capacity + 1) {
      provenance.stored(key: "f", generation: generation, inferred: [.writable(.contentType)])
    }
    XCTAssertEqual(provenance.inferred(key: "f", generation: 1), [], "the oldest went")
    XCTAssertEqual(provenance.inferred(key: "f", generation: 2), [.writable(.contentType)])
    XCTAssertEqual(
      provenance.inferred(key: "f", generation: Int64(Provenance.capacity + 1)), [.writable(.contentType)])
  }

  func testACreatedFileIsRecentForTheMetadataTTLOnly() {
    let provenance = makeProvenance(ttl: 5)
    provenance.stored(key: "new", generation: 1, inferred: [], created: true)
    provenance.stored(key: "replaced", generation: 2, inferred: [])
    XCTAssertTrue(provenance.isRecentlyCreated("new"))
    XCTAssertFalse(provenance.isRecentlyCreated("replaced"), "stored over an object: not created here")
    clock.advance(5)
    XCTAssertFalse(provenance.isRecentlyCreated("new"))
  }
}

import CloudStorage
import Foundation
import ObjectStore
import StorageFake
import XCTest

/// Multipart uploads: request shape, the two content types, preconditions and retries.
final class UploadTests: XCTestCase {
  let attributes = ObjectAttributes(
    fields: [.contentType: "text/plain; charset=utf-8", .cacheControl: "no-cache", .contentLanguage: "en"],
    custom: [
      "firebaseStorageDownloadTokens": "5f1c-uuid", "goog-reserved-file-mtime": "1700000000", "k": "v ü",
    ])

  func testSmallUploadIsOneMultipartRequestWithMetadataAndMatchingTypes() async throws {
    let data = pattern(10_000)
    try await withFakeServer { server, client in
      let meta = try await client.upload(
        "dir/a b.txt", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertEqual(server.requests.map(\.kind), [.upload], "one request")
      let request = try XCTUnwrap(server.requests.first)
      XCTAssertEqual(request.method, "POST")
      XCTAssertEqual(request.path, "/upload/storage/v1/b/bkt/o")
      XCTAssertEqual(request.query["uploadType"], "multipart")
      XCTAssertEqual(request.query["ifGenerationMatch"], "0")
      XCTAssertTrue(request.header("Content-Type")?.hasPrefix("multipart/related; boundary=") ?? false)
      let (json, mediaType, media) = try multipartParts(request)
      XCTAssertEqual(json["name"] as? String, "dir/a b.txt")
      XCTAssertEqual(json["contentType"] as? String, "text/plain; charset=utf-8")
      XCTAssertEqual(mediaType, "text/plain; charset=utf-8", "the same type in the media part")
      XCTAssertEqual(json["cacheControl"] as? String, "no-cache")
      XCTAssertEqual(json["contentLanguage"] as? String, "en")
      XCTAssertEqual(json["metadata"] as? [String: String], attributes.custom)
      XCTAssertTrue(media == data, "the media part is the bytes")

      XCTAssertEqual(meta.name, "dir/a b.txt")
      XCTAssertEqual(meta.size, 10_000)
      XCTAssertEqual(meta.metageneration, 1)
      XCTAssertEqual(ObjectAttributes(of: meta), attributes)
      XCTAssertTrue(server.store.data("dir/a b.txt") == data)
      XCTAssertEqual(server.store.object("dir/a b.txt")?.generation, meta.generation)
    }
  }

  func testNoTypeSendsOctetStreamInBothPlaces() async throws {
    try await withFakeServer { server, client in
      let meta = try await client.upload(
        "x", from: BytesSource([1, 2, 3]), attributes: ObjectAttributes(), ifGenerationMatch: nil)
      let (json, mediaType, _) = try multipartParts(try XCTUnwrap(server.requests.first))
      XCTAssertEqual(json["contentType"] as? String, "application/octet-stream")
      XCTAssertEqual(mediaType, "application/octet-stream")
      XCTAssertNil(json["metadata"], "no empty custom map")
      XCTAssertNil(server.requests.first?.query["ifGenerationMatch"])
      XCTAssertEqual(meta.contentType, "application/octet-stream")
    }
  }

  func testEmptyFileUploads() async throws {
    try await withFakeServer { server, client in
      let meta = try await client.upload(
        "empty", from: BytesSource([]), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertEqual(meta.size, 0)
      XCTAssertEqual(server.store.data("empty"), [])
    }
  }

  func testThresholdPicksMultipartOrResumable() async throws {
    try await withFakeServer(uploads: smallChunks) { server, client in
      _ = try await client.upload(
        "at", from: BytesSource(pattern(512 << 10)), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertEqual(server.requests.map(\.kind), [.upload], "at the threshold: multipart")
      server.resetRequests()
      let above = pattern((512 << 10) + 1)
      _ = try await client.upload(
        "above", from: BytesSource(above), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertEqual(server.requests.map(\.kind), [.uploadSession, .uploadChunk, .uploadChunk, .uploadChunk])
      XCTAssertTrue(server.store.data("above") == above)
    }
  }

  func testPreconditionsOnOverwrite() async throws {
    try await withFakeServer { server, client in
      let first = server.store.put("f", data: [1], contentType: "text/plain")
      let refused = await storageError {
        try await client.upload(
          "f", from: BytesSource([2]), attributes: self.attributes, ifGenerationMatch: 0)
      }
      XCTAssertEqual(refused, .preconditionFailed, "ifGenerationMatch=0 on an existing name")
      let stale = await storageError {
        try await client.upload(
          "f", from: BytesSource([2]), attributes: self.attributes, ifGenerationMatch: first.generation - 1)
      }
      XCTAssertEqual(stale, .preconditionFailed)
      XCTAssertEqual(server.store.data("f"), [1], "nothing overwritten")
      XCTAssertEqual(server.requests(.upload).count, 2, "a 412 is not retried")
      let second = try await client.upload(
        "f", from: BytesSource([3]), attributes: attributes, ifGenerationMatch: first.generation)
      XCTAssertGreaterThan(second.generation, first.generation)
      XCTAssertEqual(server.store.data("f"), [3])
    }
  }

  func testWithPreconditionA503IsRetried() async throws {
    try await withFakeServer { server, client in
      server.injectFaults([.status(503), .resetConnection], for: .upload)
      _ = try await client.upload(
        "f", from: BytesSource([7, 8]), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertEqual(server.requests(.upload).count, 3)
      XCTAssertEqual(server.store.data("f"), [7, 8])
    }
  }

  /// The first attempt stored the object but its answer was lost: the repeat
  /// gets 412 (its own object is there). The live object has this upload's
  /// size, CRC-32C and metadata, so it is taken as this upload's; nothing is
  /// stored twice.
  func testWithPreconditionALostAnswerIsRecognisedAsOwnObject() async throws {
    let data = pattern(300_000)
    try await withFakeServer { server, client in
      server.injectFaults([.answerLost(reset: true)], for: .upload)
      let meta = try await client.upload(
        "f", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertEqual(server.requests(.upload).count, 2)
      XCTAssertEqual(server.store.calls(.upload).count, 2, "the repeat was refused")
      XCTAssertEqual(meta.generation, server.store.object("f")?.generation)
      XCTAssertTrue(server.store.data("f") == data)
    }
  }

  /// ... but when another writer stored the name between the two attempts,
  /// the 412 stands and nothing is overwritten.
  func testWithPreconditionALostAnswerThenAnotherWriterIs412() async throws {
    try await withFakeServer { server, client in
      server.injectFaults([.answerLost(reset: true)], for: .upload)
      // The first attempt stores ours; inside the second, before its
      // precondition, another writer replaces it.
      server.store.beforeNext(.upload) { store in
        store.beforeNext(.upload) { $0.put("f", data: Array("theirs".utf8), contentType: "text/plain") }
      }
      let error = await storageError {
        try await client.upload(
          "f", from: BytesSource([7, 8]), attributes: self.attributes, ifGenerationMatch: 0)
      }
      XCTAssertEqual(error, .preconditionFailed)
      XCTAssertEqual(server.store.data("f"), Array("theirs".utf8))
      XCTAssertEqual(server.requests(.upload).count, 2)
    }
  }

  func testWithoutPreconditionA503IsNotRetried() async throws {
    try await withFakeServer { server, client in
      server.injectFaults([.status(503)], for: .upload)
      let error = await storageError {
        try await client.upload(
          "f", from: BytesSource([7, 8]), attributes: self.attributes, ifGenerationMatch: nil)
      }
      guard case .unavailable = error else { return XCTFail("got \(String(describing: error))") }
      XCTAssertEqual(server.requests(.upload).count, 1)
      XCTAssertNil(server.store.object("f"))
    }
  }

  func testPersistent503FailsUnavailableWithinTheDeadline() async throws {
    try await withFakeServer(retry: .fast(deadline: 1)) { server, client in
      server.injectFaults(Array(repeating: .status(503), count: 1000), for: .upload)
      let seconds = await elapsed {
        let error = await storageError {
          try await client.upload(
            "f", from: BytesSource([1]), attributes: self.attributes, ifGenerationMatch: 0)
        }
        guard case .unavailable = error else { return XCTFail("got \(String(describing: error))") }
      }
      XCTAssertLessThan(seconds, 3)
      XCTAssertNil(server.store.object("f"))
    }
  }

  /// An attempt that is sending a body may outlast the retry deadline (a slow
  /// uplink): only new attempts stop at it. Stalls are still cut by the
  /// attempt timeout.
  func testASlowAnswerToALargeBodyIsNotCutByTheRetryDeadline() async throws {
    try await withFakeServer(retry: .fast(attemptTimeout: 3, deadline: 0.3)) { server, client in
      server.injectFaults([.stall(.milliseconds(900))], for: .upload)
      let data = pattern(1 << 20)
      _ = try await client.upload("f", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertEqual(server.requests(.upload).count, 1)
      XCTAssertTrue(server.store.data("f") == data)
    }
  }

  func testForbiddenIsAccessDeniedAndUnauthorizedRefreshesTheToken() async throws {
    let tokens = ScriptedTokens { call, _ in call == 1 ? "old" : "new" }
    try await withFakeServer(tokens: tokens) { server, client in
      server.requireBearerToken = "new"
      _ = try await client.upload("f", from: BytesSource([1]), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertEqual(server.requests(.upload).count, 2)
      let refreshes = await tokens.calls
      XCTAssertEqual(refreshes, [false, true])
      server.injectFaults([.status(403)], for: .upload)
      let error = await storageError {
        try await client.upload(
          "g", from: BytesSource([1]), attributes: self.attributes, ifGenerationMatch: 0)
      }
      guard case .accessDenied = error else { return XCTFail("got \(String(describing: error))") }
    }
  }

  func testCustomMetadataOverTheLimitIsTooLarge() async throws {
    try await withFakeServer { server, client in
      let big = ObjectAttributes(custom: ["k": String(repeating: "x", count: 9000)])
      let error = await storageError {
        try await client.upload("f", from: BytesSource([1]), attributes: big, ifGenerationMatch: 0)
      }
      guard case .tooLarge = error else { return XCTFail("got \(String(describing: error))") }
      XCTAssertNil(server.store.object("f"))
    }
  }

  func testPolicyRefusesChunkSizesThatAreNotMultiplesOf256KiB() {
    XCTAssertThrowsError(try UploadPolicy(threshold: 0, chunkSize: 100_000))
    XCTAssertThrowsError(try UploadPolicy(threshold: 0, chunkSize: 0))
    XCTAssertThrowsError(try UploadPolicy(threshold: -1, chunkSize: 256 << 10))
    XCTAssertEqual(try UploadPolicy(threshold: 0, chunkSize: 512 << 10).chunkSize, 512 << 10)
    XCTAssertEqual(UploadPolicy().threshold, 8 << 20)
    XCTAssertEqual(UploadPolicy().chunkSize % UploadPolicy.chunkGranularity, 0)
  }
}

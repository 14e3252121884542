import CloudStorage
import Foundation
import NIOCore
import ObjectStore
import StorageFake
import XCTest

/// Resumable sessions: shape, chunk sizes, resuming byte-exact after faults,
/// streaming from the source, preconditions.
final class ResumableUploadTests: XCTestCase {
  let attributes = ObjectAttributes(fields: [.contentType: "video/mp4"], custom: ["owner": "me"])
  let chunk = 256 << 10

  /// Requests for chunks starting at `offset`.
  func chunkAt(_ offset: Int) -> @Sendable (FakeStorageServer.RecordedRequest) -> Bool {
    { $0.kind == .uploadChunk && $0.header("Content-Range")?.hasPrefix("bytes \(offset)-") == true }
  }

  func ranges(_ server: FakeStorageServer) -> [String] {
    server.requests.filter { $0.kind == .uploadChunk || $0.kind == .uploadStatus }
      .compactMap { $0.header("Content-Range") }
  }

  func testSessionShapeAndChunks() async throws {
    let data = pattern(3 * chunk + 1000)
    let size = data.count
    try await withFakeServer(uploads: smallChunks) { server, client in
      let meta = try await client.upload(
        "v.mp4", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)
      let start = try XCTUnwrap(server.requests.first)
      XCTAssertEqual(start.kind, .uploadSession)
      XCTAssertEqual(start.method, "POST")
      XCTAssertEqual(start.path, "/upload/storage/v1/b/bkt/o")
      XCTAssertEqual(start.query["uploadType"], "resumable")
      XCTAssertEqual(start.query["ifGenerationMatch"], "0", "the precondition travels on the start")
      XCTAssertEqual(start.header("X-Upload-Content-Type"), "video/mp4")
      XCTAssertEqual(start.header("X-Upload-Content-Length"), String(size))
      let json = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(start.body)) as? [String: Any])
      XCTAssertEqual(json["name"] as? String, "v.mp4")
      XCTAssertEqual(json["contentType"] as? String, "video/mp4")
      XCTAssertEqual(json["metadata"] as? [String: String], ["owner": "me"])

      let chunks = server.requests(.uploadChunk)
      XCTAssertEqual(
        chunks.map { $0.header("Content-Range") },
        [
          "bytes 0-262143/\(size)", "bytes 262144-524287/\(size)", "bytes 524288-786431/\(size)",
          "bytes 786432-\(size - 1)/\(size)",
        ])
      for request in chunks.dropLast() {
        XCTAssertEqual(request.body.count % chunk, 0, "multiples of 256 KiB")
      }
      XCTAssertTrue(chunks.allSatisfy { $0.header("Content-Type") == "video/mp4" }, "the type on every PUT")
      XCTAssertTrue(chunks.allSatisfy { $0.query["upload_id"] != nil }, "sent to the session URI")
      XCTAssertTrue(server.store.data("v.mp4") == data)
      XCTAssertEqual(meta.size, Int64(size))
      XCTAssertEqual(meta.contentType, "video/mp4")
      XCTAssertEqual(meta.custom, ["owner": "me"])
      XCTAssertEqual(server.store.calls(.upload).count, 1, "stored once")
    }
  }

  func testLargerChunkSize() async throws {
    let data = pattern(5 * chunk)
    let policy = try UploadPolicy(threshold: 0, chunkSize: 2 * chunk)
    try await withFakeServer(uploads: policy) { server, client in
      _ = try await client.upload(
        "f", from: BytesSource(data), attributes: attributes, ifGenerationMatch: nil)
      XCTAssertEqual(server.requests(.uploadChunk).map(\.body.count), [2 * chunk, 2 * chunk, chunk])
      XCTAssertTrue(server.store.data("f") == data)
    }
  }

  func testA503OnAChunkAsksTheSessionAndResumesByteExact() async throws {
    let data = pattern(4 * chunk + 17)
    try await withFakeServer(uploads: smallChunks) { server, client in
      server.injectFaults([.status(503)], when: chunkAt(chunk))
      _ = try await client.upload("f", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)
      let size = data.count
      XCTAssertEqual(
        ranges(server),
        [
          "bytes 0-262143/\(size)", "bytes 262144-524287/\(size)", "bytes */\(size)",
          "bytes 262144-524287/\(size)",
          "bytes 524288-786431/\(size)", "bytes 786432-1048575/\(size)", "bytes 1048576-\(size - 1)/\(size)",
        ])
      XCTAssertTrue(server.store.data("f") == data)
    }
  }

  /// The chunk arrived but its answer was lost: the session says it holds
  /// it, and the next PUT carries the next chunk, not this one again.
  func testALostAnswerResumesAfterWhatTheSessionHolds() async throws {
    let data = pattern(3 * chunk + 5)
    try await withFakeServer(uploads: smallChunks) { server, client in
      server.injectFaults([.answerLost(reset: true)], when: chunkAt(chunk))
      _ = try await client.upload("f", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)
      let size = data.count
      XCTAssertEqual(
        ranges(server),
        [
          "bytes 0-262143/\(size)", "bytes 262144-524287/\(size)", "bytes */\(size)",
          "bytes 524288-786431/\(size)", "bytes 786432-\(size - 1)/\(size)",
        ])
      XCTAssertTrue(server.store.data("f") == data)
    }
  }

  /// The last chunk stored the object but its answer was lost: the session,
  /// asked, answers with the object; nothing is sent again.
  func testALostFinalAnswerIsFoundByAsking() async throws {
    let data = pattern(2 * chunk + 11)
    try await withFakeServer(uploads: smallChunks) { server, client in
      server.injectFaults([.answerLost(reset: false)], when: chunkAt(2 * chunk))
      let meta = try await client.upload(
        "f", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertEqual(meta.size, Int64(data.count))
      XCTAssertEqual(server.requests.map(\.kind).suffix(2), [.uploadChunk, .uploadStatus])
      XCTAssertEqual(server.store.calls(.upload).count, 1, "stored once")
      XCTAssertTrue(server.store.data("f") == data)
    }
  }

  /// The session kept part of a chunk: the upload goes on from that exact byte.
  func testAPartlyKeptChunkResumesAtTheExactByte() async throws {
    let data = pattern(3 * chunk)
    try await withFakeServer(uploads: smallChunks) { server, client in
      server.injectFaults([.persistPrefix(100_000)], when: chunkAt(chunk))
      _ = try await client.upload("f", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)
      let size = data.count
      let resumed = chunk + 100_000
      XCTAssertEqual(
        ranges(server),
        [
          "bytes 0-262143/\(size)", "bytes 262144-524287/\(size)", "bytes */\(size)",
          "bytes \(resumed)-\(resumed + chunk - 1)/\(size)", "bytes \(resumed + chunk)-\(size - 1)/\(size)",
        ])
      XCTAssertTrue(server.store.data("f") == data)
    }
  }

  func testAResetConnectionResumes() async throws {
    let data = pattern(2 * chunk + 3)
    try await withFakeServer(uploads: smallChunks) { server, client in
      server.injectFaults([.resetConnection], when: chunkAt(0))
      _ = try await client.upload("f", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertEqual(server.requests(.uploadStatus).count, 1)
      XCTAssertTrue(server.store.data("f") == data)
    }
  }

  /// A chunk PUT that gets no answer is abandoned after the attempt timeout;
  /// the session is asked and the upload resumes.
  func testAStalledChunkTimesOutAndResumes() async throws {
    let data = pattern(3 * chunk + 9)
    try await withFakeServer(retry: .fast(attemptTimeout: 0.5, deadline: 5), uploads: smallChunks) {
      server, client in
      server.injectFaults([.stall(.seconds(3))], when: chunkAt(2 * chunk))
      let seconds = try await elapsed {
        _ = try await client.upload(
          "f", from: BytesSource(data), attributes: self.attributes, ifGenerationMatch: 0)
      }
      XCTAssertLessThan(seconds, 3, "the stall was not waited out")
      XCTAssertEqual(server.requests(.uploadStatus).count, 1)
      XCTAssertEqual(server.requests(.uploadChunk).filter(chunkAt(2 * chunk)).count, 2)
      XCTAssertTrue(server.store.data("f") == data)
    }
  }

  /// Faults on the status query too: it is retried like any safe request.
  func testStatusQueriesAreRetried() async throws {
    let data = pattern(2 * chunk + 1)
    try await withFakeServer(uploads: smallChunks) { server, client in
      server.injectFaults([.status(503)], when: chunkAt(chunk))
      server.injectFaults([.status(503), .resetConnection], for: .uploadStatus)
      _ = try await client.upload("f", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertEqual(server.requests(.uploadStatus).count, 3)
      XCTAssertTrue(server.store.data("f") == data)
    }
  }

  /// The service forgot the session (404): a new one, from the start.
  func testAForgottenSessionStartsOver() async throws {
    let data = pattern(3 * chunk)
    try await withFakeServer(uploads: smallChunks) { server, client in
      server.injectFaults([.status(404)], when: chunkAt(chunk))
      _ = try await client.upload("f", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertEqual(server.requests(.uploadSession).count, 2)
      XCTAssertEqual(
        server.requests(.uploadSession).map { $0.query["ifGenerationMatch"] }, ["0", "0"],
        "with its precondition")
      XCTAssertTrue(server.store.data("f") == data)
      XCTAssertEqual(server.store.calls(.upload).count, 1)
    }
  }

  func testPersistentFaultsFailUnavailableAndStoreNothing() async throws {
    let data = pattern(2 * chunk + 1)
    try await withFakeServer(retry: .fast(deadline: 1), uploads: smallChunks) { server, client in
      server.injectFaults(Array(repeating: .status(503), count: 10_000), when: chunkAt(chunk))
      let seconds = await elapsed {
        let error = await storageError {
          try await client.upload(
            "f", from: BytesSource(data), attributes: self.attributes, ifGenerationMatch: 0)
        }
        guard case .unavailable = error else { return XCTFail("got \(String(describing: error))") }
      }
      XCTAssertLessThan(seconds, 4)
      XCTAssertNil(server.store.object("f"))
    }
  }

  /// Another writer stores the name while the session runs: the last chunk
  /// gets 412, nothing is overwritten, and nothing is retried into one.
  func testAConcurrentWriterWinsWith412() async throws {
    let data = pattern(2 * chunk + 1)
    try await withFakeServer(uploads: smallChunks) { server, client in
      server.store.beforeNext(.upload) { store in store.put("f", data: Array("theirs".utf8)) }
      let error = await storageError {
        try await client.upload(
          "f", from: BytesSource(data), attributes: self.attributes, ifGenerationMatch: 0)
      }
      XCTAssertEqual(error, .preconditionFailed)
      XCTAssertEqual(server.store.data("f"), Array("theirs".utf8))
      XCTAssertEqual(server.requests(.uploadSession).count, 1)
    }
  }

  func testA412AtTheStartSendsNoBytes() async throws {
    try await withFakeServer(uploads: smallChunks) { server, client in
      let existing = server.store.put("f", data: [1])
      let error = await storageError {
        try await client.upload(
          "f", from: BytesSource(pattern(3 * self.chunk)), attributes: self.attributes,
          ifGenerationMatch: existing.generation + 1)
      }
      XCTAssertEqual(error, .preconditionFailed)
      XCTAssertEqual(server.requests(.uploadChunk).count, 0)
      XCTAssertEqual(server.store.data("f"), [1])
    }
  }

  /// The source is read one chunk at a time, and never more than one chunk
  /// ahead of what the service holds: memory stays at about a chunk however
  /// large the file.
  func testStreamsFromTheSourceChunkByChunk() async throws {
    let data = pattern(16 * chunk + 123)
    let source = RecordingSource(data)
    try await withFakeServer(uploads: smallChunks) { server, client in
      source.held = { server.sessionBytes(for: "big") ?? 0 }
      server.injectFaults([.status(503)], when: chunkAt(5 * chunk))
      _ = try await client.upload("big", from: source, attributes: attributes, ifGenerationMatch: 0)
      XCTAssertTrue(server.store.data("big") == data)
    }
    XCTAssertLessThanOrEqual(source.largestRead, chunk, "no read larger than a chunk")
    XCTAssertLessThanOrEqual(
      source.mostAhead, Int64(chunk), "never more than a chunk read ahead of the service")
    XCTAssertEqual(source.totalRead, data.count + chunk, "each byte read once, the failed chunk twice")
  }

  /// A local failure reading the stage is passed on unchanged.
  func testASourceErrorIsPassedOn() async throws {
    struct Unreadable: Error {}
    struct Failing: UploadSource {
      var size: Int64 { 2 << 20 }
      func read(at offset: Int64, count: Int) throws -> ByteBuffer {
        if offset > 0 { throw Unreadable() }
        return ByteBuffer(repeating: 1, count: count)
      }
    }
    try await withFakeServer(uploads: smallChunks) { server, client in
      do {
        _ = try await client.upload("f", from: Failing(), attributes: attributes, ifGenerationMatch: 0)
        XCTFail("expected the source's error")
      } catch is Unreadable {}
      XCTAssertNil(server.store.object("f"))
    }
  }

  /// fake-gcs-server stores what a session holds when asked its status: an
  /// object of the wrong size is never taken for the upload; that generation
  /// is deleted under its own precondition and the upload fails.
  func testAStoredObjectOfTheWrongSizeIsRefusedAndDeleted() async throws {
    let size = 3 * chunk
    let object =
      #"{"name":"f","bucket":"bkt","size":"262144","generation":"77","metageneration":"1","timeCreated":"t"}"#
    try await withCannedServer(
      uploads: smallChunks,
      handler: { request in
        switch request.method {
        case "POST":
          return .init(
            200, headers: [("Location", "http://elsewhere:1/upload/storage/v1/b/bkt/o?upload_id=s1")],
            body: [])
        case "PUT" where request.header("Content-Range")?.hasPrefix("bytes 0-") == true:
          return .init(308, headers: [("Range", "bytes=0-262143")], body: [])
        case "PUT" where request.header("Content-Range")?.hasPrefix("bytes */") == true:
          return .json(200, object)
        case "PUT":
          return .json(503, "{}")
        default:
          return .init(204, body: [])
        }
      }
    ) { server, client in
      let error = await storageError {
        try await client.upload(
          "f", from: BytesSource(pattern(size)), attributes: self.attributes, ifGenerationMatch: 0)
      }
      guard case .invalidResponse = error else { return XCTFail("got \(String(describing: error))") }
      let requests = server.requests
      XCTAssertEqual(requests.map(\.method), ["POST", "PUT", "PUT", "PUT", "DELETE"])
      XCTAssertEqual(
        requests[1].target, "/upload/storage/v1/b/bkt/o?upload_id=s1", "the session, on our endpoint")
      XCTAssertEqual(requests.last?.target, "/storage/v1/b/bkt/o/f?ifGenerationMatch=77")
    }
  }
}

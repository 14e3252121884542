import CloudStorage
import Foundation
import ObjectStore
import StorageFake
import XCTest

/// How the service's error answers, and answers that make no sense, map to ``StorageError``.
final class ErrorTests: XCTestCase {
  func testMissingObjectIsNotFound() async throws {
    try await withFakeServer { server, client in
      let error = await storageError { try await client.metadata(of: "no/such/object") }
      XCTAssertEqual(error, .notFound)
      XCTAssertEqual(server.requests.count, 1, "a 404 is not retried")
    }
  }

  func testMissingBucketIsNotFound() async throws {
    try await withFakeServer(clientBucket: "no-such-bucket") { server, client in
      server.store.put("f", data: [1])
      let listError = await storageError {
        try await client.list(ListRequest(prefix: "", delimiter: "/", pageSize: 10))
      }
      XCTAssertEqual(listError, .notFound)
      let getError = await storageError { try await client.metadata(of: "f") }
      XCTAssertEqual(getError, .notFound)
      let readError = await storageError {
        try await client.read("f", generation: 1, range: 0..<1, reusing: nil)
      }
      XCTAssertEqual(readError, .notFound)
      XCTAssertTrue(server.requests.allSatisfy { $0.path.hasPrefix("/storage/v1/b/no-such-bucket/") })
    }
  }

  func testForbiddenCarriesTheServiceMessage() async throws {
    let message = "ana@example.com does not have storage.objects.get access to the object \"f\"."
    try await withFakeServer { server, client in
      server.store.put("f", data: [1])
      server.store.injectFaults([.accessDenied(message)], for: .metadata)
      let error = await storageError { try await client.metadata(of: "f") }
      XCTAssertEqual(error, .accessDenied(message))
      XCTAssertEqual(server.requests.count, 1, "a 403 is not retried")
    }
  }

  func testFirebaseRulesMessageSurvivesIntact() async throws {
    let message =
      "Listing objects in a bucket is disallowed for rules_version = \"1\". "
      + "Please update storage security rules to rules_version = \"2\" to use list."
    try await withFakeServer { server, client in
      server.store.injectFaults([.accessDenied(message)], for: .list)
      let error = await storageError {
        try await client.list(ListRequest(prefix: "", delimiter: "/", pageSize: 10))
      }
      XCTAssertEqual(error, .accessDenied(message))
    }
  }

  func testScripted403IsAccessDenied() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1])
      server.injectFaults([.status(403)], for: .media)
      let error = await storageError { try await client.read("f", generation: 1, range: 0..<1, reusing: nil) }
      XCTAssertEqual(error, .accessDenied("Access denied."))
    }
  }

  func testUnauthorizedWithoutTokensIsAccessDenied() async throws {
    try await withFakeServer { server, client in
      server.requireBearerToken = "secret"
      server.store.put("f", data: [1])
      let error = await storageError { try await client.metadata(of: "f") }
      guard case .accessDenied(let message) = error else {
        return XCTFail("expected accessDenied, got \(String(describing: error))")
      }
      XCTAssertTrue(message.contains("Anonymous caller"), message)
      XCTAssertEqual(server.requests.count, 1, "without a token provider there is nothing to refresh")
    }
  }

  func testUnexpectedStatusIsInvalidResponse() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1])
      server.injectFaults([.status(418)], for: .metadata)
      let error = await storageError { try await client.metadata(of: "f") }
      guard case .invalidResponse(let message) = error else {
        return XCTFail("expected invalidResponse, got \(String(describing: error))")
      }
      XCTAssertTrue(message.contains("418"), message)
    }
  }

  // MARK: Answers that cannot be parsed: invalidResponse, never a crash.

  func testGarbageMetadataIsInvalidResponse() async throws {
    let answers = [
      "this is not JSON",
      "<html><body>Service Unavailable</body></html>",
      #"{"name":"f","bucket":"bkt","generation":"1""#,  // truncated
      "[]",
      "null",
      "",
      #"{"bucket":"bkt","generation":"1","metageneration":"1"}"#,  // no name
      #"{"name":"f","metageneration":"1"}"#,  // no generation
      #"{"name":"f","generation":"1"}"#,  // no metageneration
      #"{"name":"f","generation":"twelve","metageneration":"1"}"#,
      #"{"name":"f","generation":"1","metageneration":"1","size":"99999999999999999999"}"#,
      #"{"name":"f","generation":"1","metageneration":"1","size":-1.5}"#,
      #"{"name":7,"generation":"1","metageneration":"1"}"#,
      #"{"name":"f","generation":"1","metageneration":"1","metadata":["a"]}"#,
      #"{"name":"f","generation":"1","metageneration":"1","metadata":{"a":1}}"#,
    ]
    for answer in answers {
      try await withCannedServer(handler: { _ in .json(200, answer) }) { server, client in
        let error = await storageError { try await client.metadata(of: "f") }
        guard case .invalidResponse = error else {
          return XCTFail("\(answer): expected invalidResponse, got \(String(describing: error))")
        }
        XCTAssertEqual(server.requests.count, 1, "\(answer): an unparseable answer is not retried")
      }
    }
  }

  func testGarbageListIsInvalidResponse() async throws {
    let answers = [
      "not json at all",
      #"{"items":5}"#,
      #"{"prefixes":"a/"}"#,
      #"{"items":[{"name":"x"}]}"#,  // an item without generation
      #"{"items":[{"name":"x","generation":"1","metageneration":"1"}],"nextPageToken":7}"#,
    ]
    for answer in answers {
      try await withCannedServer(handler: { _ in .json(200, answer) }) { _, client in
        let error = await storageError {
          try await client.list(ListRequest(prefix: "", delimiter: "/", pageSize: 10))
        }
        guard case .invalidResponse = error else {
          return XCTFail("\(answer): expected invalidResponse, got \(String(describing: error))")
        }
      }
    }
  }

  /// Through the fake's HTTP front: numbers no field can hold, types the
  /// field does not have, truncated text. Each is invalidResponse, in a
  /// metadata answer and as an item of a list page.
  func testOutOfRangeNumbersWrongTypesAndTruncationsAreInvalidResponse() async throws {
    let good = #""name":"f","bucket":"bkt","generation":"7","metageneration":"1","size":"3""#
    let objects = [
      #"{"name":"f","generation":"7","metageneration":"1","size":"1180591620717411303424"}"#,  // 2^70
      #"{"name":"f","generation":"7","metageneration":"1","size":1180591620717411303424}"#,
      #"{"name":"f","generation":"9223372036854775808","metageneration":"1","size":"3"}"#,  // Int64.max + 1
      #"{"name":"f","generation":"7","metageneration":"99999999999999999999999","size":"3"}"#,
      #"{"name":"f","generation":"7","metageneration":"1","size":true}"#,
      #"{"name":"f","generation":"7","metageneration":"1","size":"3.5"}"#,
      #"{"name":"f","generation":"7","metageneration":"1","size":3e2}"#,
      #"{"name":"f","generation":"7","metageneration":"1","size":"0x10"}"#,
      #"{"name":"f","generation":[7],"metageneration":"1","size":"3"}"#,
      #"{"name":"f","generation":"7","metageneration":"1","size":"3","contentType":7}"#,
      #"{"name":"f","generation":"7","metageneration":"1","size":"3","updated":{"t":1}}"#,
      #"{"name":["f"],"generation":"7","metageneration":"1","size":"3"}"#,
      #"{"name":"f","generation":"7","metageneration":"1","size":"3","metadata":"k=v"}"#,
      "{" + good + ",\"metadata\":{\"k\":\"v",  // truncated inside a string
      "{" + good,  // truncated before the brace
      "{" + good + "}}",
    ]
    try await withFakeServer { server, client in
      server.store.put("f", data: [1, 2, 3])
      for object in objects {
        server.injectFaults([.raw(.json(object))], for: .metadata)
        let error = await storageError { try await client.metadata(of: "f") }
        guard case .invalidResponse = error else {
          return XCTFail("\(object): expected invalidResponse, got \(String(describing: error))")
        }
        server.injectFaults([.raw(.json(#"{"items":["# + object + "]}"))], for: .list)
        let listError = await storageError {
          try await client.list(ListRequest(prefix: "", delimiter: "/", pageSize: 10))
        }
        guard case .invalidResponse = listError else {
          return XCTFail("list of \(object): expected invalidResponse, got \(String(describing: listError))")
        }
      }
      // The sound answer still reads.
      server.injectFaults([.raw(.json("{" + good + "}"))], for: .metadata)
      let meta = try await client.metadata(of: "f")
      XCTAssertEqual(meta.size, 3)
      XCTAssertEqual(meta.generation, 7)
    }
  }

  /// An answer nested a million deep in a field nobody reads.
  func testADeeplyNestedAnswerIsInvalidResponse() async throws {
    let deep = String(repeating: "[", count: 1_000_000) + String(repeating: "]", count: 1_000_000)
    let object = #"{"name":"f","generation":"7","metageneration":"1","size":"3","acl":"# + deep + "}"
    try await withFakeServer { server, client in
      server.injectFaults([.raw(.json(object))], for: .metadata)
      let error = await storageError { try await client.metadata(of: "f") }
      guard case .invalidResponse = error else {
        return XCTFail("expected invalidResponse, got \(String(describing: error))")
      }
      server.injectFaults([.raw(.json(#"{"items":["# + object + "]}"))], for: .list)
      let listError = await storageError {
        try await client.list(ListRequest(prefix: "", delimiter: "/", pageSize: 10))
      }
      guard case .invalidResponse = listError else {
        return XCTFail("expected invalidResponse, got \(String(describing: listError))")
      }
      // An error status whose body is nested as deep (read for its message).
      server.injectFaults([.raw(.json(#"{"error":"# + deep + "}", status: 418))], for: .metadata)
      let statusError = await storageError { try await client.metadata(of: "f") }
      guard case .invalidResponse = statusError else {
        return XCTFail("expected invalidResponse, got \(String(describing: statusError))")
      }
    }
  }

  /// A negative size, generation or metageneration, or no size at all, is
  /// no object: a file shown empty would have a write replace all its bytes.
  func testNegativeNumbersAndAMissingSizeAreInvalidResponse() async throws {
    let objects = [
      #"{"name":"f","generation":"7","metageneration":"1","size":"-1"}"#,
      #"{"name":"f","generation":"7","metageneration":"1","size":-9223372036854775808}"#,
      #"{"name":"f","generation":"-7","metageneration":"1","size":"3"}"#,
      #"{"name":"f","generation":"7","metageneration":"-1","size":"3"}"#,
      #"{"name":"f","generation":"7","metageneration":"1"}"#,
      #"{"name":"f","generation":"7","metageneration":"1","size":null}"#,
      // The checksums of no bytes vouch for a missing size only when they agree.
      #"{"name":"f","generation":"7","metageneration":"1","crc32c":"AAAAAA==","md5Hash":"XUFAKrxLKna5cZ2REBfFkg=="}"#,
      #"{"name":"f","generation":"7","metageneration":"1","crc32c":"mnG7TA=="}"#,
    ]
    try await withFakeServer { server, client in
      server.store.put("f", data: [1, 2, 3])
      for object in objects {
        server.injectFaults([.raw(.json(object))], for: .metadata)
        let error = await storageError { try await client.metadata(of: "f") }
        guard case .invalidResponse = error else {
          return XCTFail("\(object): expected invalidResponse, got \(String(describing: error))")
        }
        server.injectFaults([.raw(.json(#"{"items":["# + object + "]}"))], for: .list)
        let listError = await storageError {
          try await client.list(ListRequest(prefix: "", delimiter: "/", pageSize: 10))
        }
        guard case .invalidResponse = listError else {
          return XCTFail("list of \(object): expected invalidResponse, got \(String(describing: listError))")
        }
      }
    }
  }

  /// protobuf's JSON (storage-testbench) leaves out a size of 0; the
  /// checksums of no bytes stand for it.
  func testAMissingSizeWithTheChecksumsOfNoBytesIsZero() async throws {
    let objects = [
      #"{"name":"f","generation":"7","metageneration":"1","crc32c":"AAAAAA==","md5Hash":"1B2M2Y8AsgTpgAmY7PhCfg=="}"#,
      #"{"name":"f","generation":"7","metageneration":"1","crc32c":"AAAAAA=="}"#,
    ]
    try await withFakeServer { server, client in
      server.store.put("f", data: [])
      for object in objects {
        server.injectFaults([.raw(.json(object))], for: .metadata)
        let metadata = try await client.metadata(of: "f")
        XCTAssertEqual(metadata.size, 0, object)
      }
    }
  }

  /// A Content-Length longer than the body (the connection then closes) is
  /// a broken answer, retried; a shorter one cuts the JSON, which is invalid.
  func testALyingContentLengthIsRetriedOrInvalidNeverACrash() async throws {
    try await withFakeServer { server, client in
      let stored = server.store.put("f", data: [1, 2, 3])
      let text = #"{"name":"f","generation":"7","metageneration":"1","size":"3"}"#
      server.injectFaults(
        [.raw(.json(text, contentLength: "1000")), .raw(.json(text, contentLength: "99999999999"))],
        for: .metadata)
      let meta = try await client.metadata(of: "f")
      XCTAssertEqual(meta, stored, "the third attempt got the real answer")
      XCTAssertEqual(server.requests(.metadata).count, 3)

      server.resetRequests()
      server.injectFaults([.raw(.json(text, contentLength: "20"))], for: .metadata)
      let error = await storageError { try await client.metadata(of: "f") }
      guard case .invalidResponse = error else {
        return XCTFail("expected invalidResponse, got \(String(describing: error))")
      }
    }
  }

  /// A 308 saying the session holds every byte an Int64 can count.
  func testASessionRangeBeyondInt64IsInvalidResponse() async throws {
    let data = Array(repeating: UInt8(7), count: 300 << 10)
    let policy = try UploadPolicy(threshold: 0, chunkSize: 256 << 10)
    for range in ["bytes=0-9223372036854775807", "bytes=0-9223372036854775806", "bytes=0--5", "bytes=5-9"] {
      try await withFakeServer(uploads: policy) { server, client in
        server.injectFaults(
          [.raw(.init(status: 308, headers: [("Range", range)], body: []))], for: .uploadChunk)
        let error = await storageError {
          try await client.upload(
            "f", from: BytesSource(data), attributes: ObjectAttributes(), ifGenerationMatch: 0)
        }
        guard case .invalidResponse = error else {
          return XCTFail("\(range): expected invalidResponse, got \(String(describing: error))")
        }
        XCTAssertNil(server.store.object("f"), range)
      }
    }
  }

  func testGarbagePatchAnswerIsInvalidResponse() async throws {
    try await withCannedServer(handler: { _ in .json(200, "{{{") }) { _, client in
      let error = await storageError {
        try await client.patch("f", MetadataPatch(fields: [.contentType: "x"]), ifMetagenerationMatch: 1)
      }
      guard case .invalidResponse = error else {
        return XCTFail("expected invalidResponse, got \(String(describing: error))")
      }
    }
  }

  /// Error statuses whose body is not the service's JSON still map by status, with the text.
  func testErrorStatusWithNonJSONBody() async throws {
    try await withCannedServer(handler: { request in
      request.path.hasSuffix("/forbidden")
        ? .text(403, "<h1>nope</h1>", contentType: "text/html") : .text(404, "")
    }) { _, client in
      let forbidden = await storageError { try await client.metadata(of: "forbidden") }
      XCTAssertEqual(forbidden, .accessDenied("<h1>nope</h1>"))
      let missing = await storageError { try await client.metadata(of: "missing") }
      XCTAssertEqual(missing, .notFound)
    }
  }
}

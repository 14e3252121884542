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
        try await client.list(prefix: "", delimiter: "/", pageSize: 10, pageToken: nil)
      }
      XCTAssertEqual(listError, .notFound)
      let getError = await storageError { try await client.metadata(of: "f") }
      XCTAssertEqual(getError, .notFound)
      let readError = await storageError { try await client.read("f", generation: 1, range: 0..<1) }
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
        try await client.list(prefix: "", delimiter: "/", pageSize: 10, pageToken: nil)
      }
      XCTAssertEqual(error, .accessDenied(message))
    }
  }

  func testScripted403IsAccessDenied() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1])
      server.injectFaults([.status(403)], for: .media)
      let error = await storageError { try await client.read("f", generation: 1, range: 0..<1) }
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
          try await client.list(prefix: "", delimiter: "/", pageSize: 10, pageToken: nil)
        }
        guard case .invalidResponse = error else {
          return XCTFail("\(answer): expected invalidResponse, got \(String(describing: error))")
        }
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

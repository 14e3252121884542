import CloudStorage
import Foundation
import NIOCore
import ObjectStore
import StorageFake
import XCTest

/// Deletes, rewrites (copies) and moves: request shapes, preconditions, retries.
final class DeleteTests: XCTestCase {
  func testDeleteSendsItsPrecondition() async throws {
    try await withFakeServer { server, client in
      let meta = server.store.put("d/f x", data: [1])
      try await client.delete("d/f x", ifGenerationMatch: meta.generation)
      let request = try XCTUnwrap(server.requests(.delete).first)
      XCTAssertEqual(request.method, "DELETE")
      XCTAssertEqual(request.path, "/storage/v1/b/bkt/o/d%2Ff%20x")
      XCTAssertEqual(request.query, ["ifGenerationMatch": String(meta.generation)])
      XCTAssertNil(server.store.object("d/f x"))
    }
  }

  func testMissingIsNotFoundAndAnotherGenerationIs412() async throws {
    try await withFakeServer { server, client in
      let missing = await storageError { try await client.delete("nope", ifGenerationMatch: 5) }
      XCTAssertEqual(missing, .notFound)
      let meta = server.store.put("f", data: [1])
      let stale = await storageError { try await client.delete("f", ifGenerationMatch: meta.generation - 1) }
      XCTAssertEqual(stale, .preconditionFailed)
      XCTAssertNotNil(server.store.object("f"), "another generation is not deleted")
      XCTAssertEqual(server.requests(.delete).count, 2, "neither is retried")
    }
  }

  /// The first attempt deleted the object but the answer was lost: the
  /// retry's 404 means that generation is gone, which is what was asked.
  func testALostAnswerThenA404IsDone() async throws {
    try await withFakeServer { server, client in
      let meta = server.store.put("f", data: [1])
      server.injectFaults([.answerLost(reset: true)], for: .delete)
      try await client.delete("f", ifGenerationMatch: meta.generation)
      XCTAssertEqual(server.requests(.delete).count, 2)
      XCTAssertNil(server.store.object("f"))
    }
  }

  func testWithoutPreconditionA503IsNotRetried() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1])
      server.injectFaults([.status(503)], for: .delete)
      let error = await storageError { try await client.delete("f", ifGenerationMatch: nil) }
      guard case .unavailable = error else { return XCTFail("got \(String(describing: error))") }
      XCTAssertEqual(server.requests(.delete).count, 1)
      XCTAssertNotNil(server.store.object("f"))
    }
  }

  func testWithPreconditionA503IsRetried() async throws {
    try await withFakeServer { server, client in
      let meta = server.store.put("f", data: [1])
      server.injectFaults([.status(503)], for: .delete)
      try await client.delete("f", ifGenerationMatch: meta.generation)
      XCTAssertEqual(server.requests(.delete).count, 2)
      XCTAssertNil(server.store.object("f"))
    }
  }
}

final class RewriteTests: XCTestCase {
  func testCopyKeepsTheSourcesMetadataWithAnEmptyBody() async throws {
    try await withFakeServer { server, client in
      let source = server.store.put(
        "a", data: pattern(5000), contentType: "image/png", cacheControl: "max-age=60", custom: ["k": "v"])
      let copy = try await client.copy(
        "a", sourceGeneration: source.generation, to: "d/b", attributes: nil, ifGenerationMatch: 0)
      let request = try XCTUnwrap(server.requests(.rewrite).first)
      XCTAssertEqual(request.method, "POST")
      XCTAssertEqual(request.path, "/storage/v1/b/bkt/o/a/rewriteTo/b/bkt/o/d%2Fb")
      XCTAssertEqual(request.query["sourceGeneration"], String(source.generation))
      XCTAssertEqual(request.query["ifGenerationMatch"], "0")
      XCTAssertNil(request.query["rewriteToken"])
      XCTAssertEqual(request.body, [], "no resource: the source's metadata")
      XCTAssertEqual(copy.name, "d/b")
      XCTAssertEqual(ObjectAttributes(of: copy), ObjectAttributes(of: source))
      XCTAssertTrue(server.store.data("d/b") == pattern(5000))
      XCTAssertNotNil(server.store.object("a"), "a copy leaves the source")
    }
  }

  func testCopyWithAttributesSendsTheResource() async throws {
    try await withFakeServer { server, client in
      let source = server.store.put("a", data: [1, 2], contentType: "image/png", custom: ["old": "1"])
      let wanted = ObjectAttributes(
        fields: [.contentType: "text/plain", .contentDisposition: "inline"], custom: ["new": "2"])
      let copy = try await client.copy(
        "a", sourceGeneration: source.generation, to: "b", attributes: wanted, ifGenerationMatch: 0)
      let request = try XCTUnwrap(server.requests(.rewrite).first)
      let json = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any])
      XCTAssertEqual(json["contentType"] as? String, "text/plain")
      XCTAssertEqual(json["contentDisposition"] as? String, "inline")
      XCTAssertEqual(json["metadata"] as? [String: String], ["new": "2"])
      XCTAssertEqual(request.header("Content-Type"), "application/json; charset=UTF-8")
      XCTAssertEqual(ObjectAttributes(of: copy), wanted)
    }
  }

  func testCopyLoopsOnTheRewriteToken() async throws {
    try await withFakeServer { server, client in
      server.rewriteBytesPerCall = 1000
      let source = server.store.put("a", data: pattern(4500))
      let copy = try await client.copy(
        "a", sourceGeneration: source.generation, to: "b", attributes: nil, ifGenerationMatch: 0)
      let calls = server.requests(.rewrite)
      XCTAssertEqual(calls.count, 5)
      XCTAssertNil(calls[0].query["rewriteToken"])
      XCTAssertTrue(
        calls.dropFirst().allSatisfy { $0.query["rewriteToken"] != nil }, "each later call carries a token")
      XCTAssertEqual(Set(calls.compactMap { $0.query["rewriteToken"] }).count, 4, "a new token each time")
      XCTAssertTrue(calls.allSatisfy { $0.query["ifGenerationMatch"] == "0" })
      XCTAssertEqual(copy.size, 4500)
      XCTAssertTrue(server.store.data("b") == pattern(4500))
    }
  }

  func testCopyPreconditionsAndMissingSource() async throws {
    try await withFakeServer { server, client in
      let source = server.store.put("a", data: [1])
      server.store.put("b", data: [9])
      let taken = await storageError {
        try await client.copy(
          "a", sourceGeneration: source.generation, to: "b", attributes: nil, ifGenerationMatch: 0)
      }
      XCTAssertEqual(taken, .preconditionFailed)
      XCTAssertEqual(server.store.data("b"), [9])
      let stale = await storageError {
        try await client.copy(
          "a", sourceGeneration: source.generation - 1, to: "c", attributes: nil, ifGenerationMatch: 0)
      }
      XCTAssertEqual(stale, .notFound, "a generation that is gone")
      let missing = await storageError {
        try await client.copy("zz", sourceGeneration: 1, to: "c", attributes: nil, ifGenerationMatch: 0)
      }
      XCTAssertEqual(missing, .notFound)
      XCTAssertNil(server.store.object("c"))
    }
  }

  /// A destination taken between two calls of a long copy: 412, not an overwrite.
  func testADestinationTakenMidCopyIs412() async throws {
    try await withFakeServer { server, client in
      server.rewriteBytesPerCall = 1000
      let source = server.store.put("a", data: pattern(3000))
      server.store.beforeNext(.copy) { store in store.put("b", data: [7]) }
      let error = await storageError {
        try await client.copy(
          "a", sourceGeneration: source.generation, to: "b", attributes: nil, ifGenerationMatch: 0)
      }
      XCTAssertEqual(error, .preconditionFailed)
      XCTAssertEqual(server.store.data("b"), [7])
    }
  }

  func testA503MidLoopIsRetriedWithTheSameToken() async throws {
    try await withFakeServer { server, client in
      server.rewriteBytesPerCall = 1000
      let source = server.store.put("a", data: pattern(2500))
      server.injectFaults([.status(503)]) { $0.kind == .rewrite && $0.query["rewriteToken"] != nil }
      _ = try await client.copy(
        "a", sourceGeneration: source.generation, to: "b", attributes: nil, ifGenerationMatch: 0)
      let tokens = server.requests(.rewrite).map { $0.query["rewriteToken"] }
      XCTAssertEqual(tokens.count, 4)
      XCTAssertEqual(tokens[1], tokens[2], "the retry repeats the call")
      XCTAssertTrue(server.store.data("b") == pattern(2500))
    }
  }
}

final class MoveTests: XCTestCase {
  func testMoveShapeAndResult() async throws {
    try await withFakeServer { server, client in
      let source = server.store.put("d/a", data: [1, 2, 3], contentType: "text/csv", custom: ["k": "v"])
      let moved = try await client.move(
        "d/a", sourceGeneration: source.generation, to: "e/b c", ifGenerationMatch: 0)
      let request = try XCTUnwrap(server.requests(.move).first)
      XCTAssertEqual(request.method, "POST")
      XCTAssertEqual(request.path, "/storage/v1/b/bkt/o/d%2Fa/moveTo/o/e%2Fb%20c")
      XCTAssertEqual(request.query["ifSourceGenerationMatch"], String(source.generation))
      XCTAssertEqual(request.query["ifGenerationMatch"], "0")
      XCTAssertEqual(moved.name, "e/b c")
      XCTAssertEqual(ObjectAttributes(of: moved), ObjectAttributes(of: source), "the metadata comes along")
      XCTAssertNil(server.store.object("d/a"))
      XCTAssertEqual(server.store.data("e/b c"), [1, 2, 3])
    }
  }

  func testMissingSourceStaleSourceAndTakenDestination() async throws {
    try await withFakeServer { server, client in
      let missing = await storageError {
        try await client.move("nope", sourceGeneration: 1, to: "x", ifGenerationMatch: 0)
      }
      XCTAssertEqual(missing, .notFound)
      let source = server.store.put("a", data: [1])
      let stale = await storageError {
        try await client.move("a", sourceGeneration: source.generation - 1, to: "x", ifGenerationMatch: 0)
      }
      XCTAssertEqual(stale, .preconditionFailed)
      server.store.put("x", data: [9])
      let taken = await storageError {
        try await client.move("a", sourceGeneration: source.generation, to: "x", ifGenerationMatch: 0)
      }
      XCTAssertEqual(taken, .preconditionFailed)
      XCTAssertEqual(server.store.data("a"), [1])
      XCTAssertEqual(server.store.data("x"), [9])
    }
  }

  /// A bucket that refuses moves: unsupported, remembered, and the source stays.
  func testABucketThatCannotMoveIsUnsupportedOnce() async throws {
    try await withFakeServer { server, client in
      server.store.supportsMove = false
      let source = server.store.put("a", data: [1])
      let error = await storageError {
        try await client.move("a", sourceGeneration: source.generation, to: "b", ifGenerationMatch: 0)
      }
      guard case .unsupported = error else { return XCTFail("got \(String(describing: error))") }
      XCTAssertEqual(server.store.data("a"), [1])
      let again = await storageError {
        try await client.move("a", sourceGeneration: source.generation, to: "b", ifGenerationMatch: 0)
      }
      guard case .unsupported = again else { return XCTFail("got \(String(describing: again))") }
      XCTAssertEqual(server.requests(.move).count, 1, "the answer is remembered")
    }
  }

  /// A 405 or 501 says the call is not offered.
  func testMethodNotAllowedOrNotImplementedIsUnsupported() async throws {
    for status in [405, 501] {
      try await withFakeServer { server, client in
        let source = server.store.put("a", data: [1])
        server.injectFaults([.status(status)], for: .move)
        let error = await storageError {
          try await client.move("a", sourceGeneration: source.generation, to: "b", ifGenerationMatch: 0)
        }
        guard case .unsupported = error else { return XCTFail("\(status): got \(String(describing: error))") }
      }
    }
  }

  /// A server that does not know the route answers 404 (fake-gcs-server
  /// does): with the source there, that is unsupported, not ENOENT.
  func testA404ForASourceThatExistsIsUnsupported() async throws {
    try await withFakeServer { server, client in
      let source = server.store.put("a", data: [1])
      server.injectFaults([.status(404)], for: .move)
      let error = await storageError {
        try await client.move("a", sourceGeneration: source.generation, to: "b", ifGenerationMatch: 0)
      }
      guard case .unsupported = error else { return XCTFail("got \(String(describing: error))") }
    }
  }

  func testAnotherBadRequestStaysABadRequest() async throws {
    try await withFakeServer { server, client in
      let source = server.store.put("a", data: [1])
      let error = await storageError {
        try await client.move("a", sourceGeneration: source.generation, to: "a", ifGenerationMatch: nil)
      }
      guard case .badRequest = error else { return XCTFail("got \(String(describing: error))") }
    }
  }
}

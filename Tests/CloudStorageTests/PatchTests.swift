import CloudStorage
import Foundation
import ObjectStore
import StorageFake
import XCTest

/// Metadata PATCHes: the body on the wire, removal as JSON null, preconditions and limits.
final class PatchTests: XCTestCase {
  /// The recorded PATCH body, parsed.
  private func body(of request: FakeStorageServer.RecordedRequest?) throws -> [String: Any] {
    let request = try XCTUnwrap(request, "no PATCH was recorded")
    let json = try JSONSerialization.jsonObject(with: Data(request.body), options: [.fragmentsAllowed])
    return try XCTUnwrap(json as? [String: Any], "PATCH body is not an object")
  }

  func testSetSendsOnlyTheNamedField() async throws {
    try await withFakeServer { server, client in
      let before = server.store.put(
        "f", data: [1], contentType: "a/b", cacheControl: "no-store", contentLanguage: "en",
        custom: ["keep": "me"])
      let after = try await client.patch(
        "f", MetadataPatch(fields: [.contentType: "text/plain"]), ifMetagenerationMatch: nil)

      let request = server.requests(.patch).first
      XCTAssertEqual(request?.method, "PATCH")
      XCTAssertEqual(request?.path, "/storage/v1/b/bkt/o/f")
      XCTAssertEqual(request?.header("Content-Type")?.hasPrefix("application/json"), true)
      let json = try body(of: request)
      XCTAssertEqual(Set(json.keys), ["contentType"])
      XCTAssertEqual(json["contentType"] as? String, "text/plain")

      XCTAssertEqual(after.contentType, "text/plain")
      XCTAssertEqual(after.cacheControl, "no-store", "other properties untouched")
      XCTAssertEqual(after.contentLanguage, "en")
      XCTAssertEqual(after.custom, ["keep": "me"])
      XCTAssertEqual(after.metageneration, before.metageneration + 1)
      XCTAssertEqual(after.generation, before.generation)
      XCTAssertEqual(after, server.store.object("f"), "the answer is the new state")
    }
  }

  func testRemovingAStandardFieldSendsNull() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1], contentType: "a/b", cacheControl: "no-store")
      let after = try await client.patch(
        "f", MetadataPatch(fields: [.cacheControl: nil]), ifMetagenerationMatch: nil)

      let json = try body(of: server.requests(.patch).first)
      XCTAssertEqual(Set(json.keys), ["cacheControl"])
      XCTAssertTrue(json["cacheControl"] is NSNull, "removal must be JSON null, got \(json)")
      XCTAssertNil(after.cacheControl)
      XCTAssertEqual(after.contentType, "a/b")
      XCTAssertNil(server.store.object("f")?.cacheControl)
    }
  }

  func testSettingAndRemovingCustomKeysUsesTheMetadataMap() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1], custom: ["old": "1", "keep": "2"])
      let after = try await client.patch(
        "f", MetadataPatch(custom: ["old": nil, "new": "3"]), ifMetagenerationMatch: nil)

      let json = try body(of: server.requests(.patch).first)
      XCTAssertEqual(Set(json.keys), ["metadata"])
      let map = try XCTUnwrap(json["metadata"] as? [String: Any])
      XCTAssertEqual(Set(map.keys), ["old", "new"])
      XCTAssertTrue(map["old"] is NSNull, "custom removal must be null, got \(map)")
      XCTAssertEqual(map["new"] as? String, "3")
      XCTAssertEqual(after.custom, ["keep": "2", "new": "3"])
    }
  }

  func testMixedPatchCarriesFieldsAndMetadata() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1], contentType: "a/b", contentDisposition: "inline", custom: ["k": "v"])
      let patch = MetadataPatch(
        fields: [.contentDisposition: nil, .contentLanguage: "de"], custom: ["k": nil, "ü": "ß"])
      let after = try await client.patch("f", patch, ifMetagenerationMatch: 1)

      let json = try body(of: server.requests(.patch).first)
      XCTAssertEqual(Set(json.keys), ["contentDisposition", "contentLanguage", "metadata"])
      XCTAssertTrue(json["contentDisposition"] is NSNull)
      XCTAssertEqual(json["contentLanguage"] as? String, "de")
      let map = try XCTUnwrap(json["metadata"] as? [String: Any])
      XCTAssertTrue(map["k"] is NSNull)
      XCTAssertEqual(map["ü"] as? String, "ß")
      XCTAssertNil(after.contentDisposition)
      XCTAssertEqual(after.contentLanguage, "de")
      XCTAssertEqual(after.contentType, "a/b")
      XCTAssertEqual(after.custom, ["ü": "ß"])
    }
  }

  func testPreconditionIsSentAndHonoured() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1])
      let after = try await client.patch(
        "f", MetadataPatch(fields: [.contentType: "x/y"]), ifMetagenerationMatch: 1)
      XCTAssertEqual(after.metageneration, 2)
      XCTAssertEqual(server.requests(.patch).first?.query["ifMetagenerationMatch"], "1")
      XCTAssertNotNil(server.requests(.patch).first?.query["fields"])
    }
  }

  func testNoPreconditionSendsNone() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1])
      _ = try await client.patch(
        "f", MetadataPatch(fields: [.contentType: "x/y"]), ifMetagenerationMatch: nil)
      XCTAssertNil(server.requests(.patch).first?.query["ifMetagenerationMatch"])
    }
  }

  func testMetagenerationMismatchIsPreconditionFailed() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1], contentType: "orig")
      // Someone else changes it first.
      try server.store.applyPatch("f", MetadataPatch(fields: [.cacheControl: "private"]))
      let error = await storageError {
        try await client.patch("f", MetadataPatch(fields: [.contentType: "mine"]), ifMetagenerationMatch: 1)
      }
      XCTAssertEqual(error, .preconditionFailed)
      XCTAssertEqual(server.requests(.patch).count, 1, "a 412 is final")
      XCTAssertEqual(server.store.object("f")?.contentType, "orig", "nothing overwritten")
    }
  }

  func testOverLongCustomValueIsTooLarge() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1])
      let value = String(repeating: "v", count: InMemoryObjectStore.maxCustomValueBytes + 1)
      let error = await storageError {
        try await client.patch("f", MetadataPatch(custom: ["k": value]), ifMetagenerationMatch: nil)
      }
      guard case .tooLarge = error else {
        return XCTFail("expected tooLarge, got \(String(describing: error))")
      }
      XCTAssertEqual(server.store.object("f")?.custom, [:])
    }
  }

  func testOverLargeCustomMapIsTooLarge() async throws {
    try await withFakeServer { server, client in
      server.store.put("f", data: [1])
      var custom: [String: String?] = [:]
      for i in 0..<3 { custom["key\(i)"] = String(repeating: "v", count: 3000) }
      let error = await storageError {
        try await client.patch("f", MetadataPatch(custom: custom), ifMetagenerationMatch: 1)
      }
      guard case .tooLarge = error else {
        return XCTFail("expected tooLarge, got \(String(describing: error))")
      }
      XCTAssertEqual(server.requests(.patch).count, 1, "a 400 is not retried")
    }
  }

  func testOtherBadRequestIsBadRequest() async throws {
    try await withFakeServer { server, client in
      server.store.injectFaults([.badRequest("Invalid argument.")], for: .patch)
      server.store.put("f", data: [1])
      let error = await storageError {
        try await client.patch("f", MetadataPatch(fields: [.contentType: "x"]), ifMetagenerationMatch: nil)
      }
      XCTAssertEqual(error, .badRequest("Invalid argument."))
    }
  }

  func testPatchOfMissingObjectIsNotFound() async throws {
    try await withFakeServer { _, client in
      let error = await storageError {
        try await client.patch("nope", MetadataPatch(fields: [.contentType: "x"]), ifMetagenerationMatch: 1)
      }
      XCTAssertEqual(error, .notFound)
    }
  }

  /// An answer without the fields a cache entry needs is followed by one GET.
  func testIncompletePatchAnswerIsReadBack() async throws {
    let full = """
      {"name":"f","bucket":"bkt","size":"1","generation":"5","metageneration":"2",
       "timeCreated":"2024-01-01T00:00:00.000Z","updated":"2024-01-02T00:00:00.000Z","contentType":"x/y"}
      """
    try await withCannedServer(handler: { request in
      request.method == "PATCH" ? .json(200, #"{"name":"f","contentType":"x/y"}"#) : .json(200, full)
    }) { server, client in
      let meta = try await client.patch(
        "f", MetadataPatch(fields: [.contentType: "x/y"]), ifMetagenerationMatch: 1)
      XCTAssertEqual(meta.metageneration, 2)
      XCTAssertEqual(meta.contentType, "x/y")
      XCTAssertEqual(server.requests.map(\.method), ["PATCH", "GET"])
    }
  }
}

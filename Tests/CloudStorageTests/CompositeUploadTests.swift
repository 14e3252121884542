import CloudStorage
import CoreMetrics
import Foundation
import MetricsTestKit
import ObjectStore
import StorageFake
import XCTest

@testable import CloudStorage

/// Parallel composite uploads: parts under `.bucketfs-parts/ID/`, one
/// compose under the caller's precondition carrying every property, the
/// parts deleted on every path (docs/SEMANTICS.md#writes-composite).
final class CompositeUploadTests: XCTestCase {
  let attributes = ObjectAttributes(
    fields: [
      .contentType: "text/plain; charset=utf-8", .cacheControl: "no-cache", .contentLanguage: "en",
      .contentDisposition: "attachment", .contentEncoding: "identity",
    ],
    custom: ["firebaseStorageDownloadTokens": "5f1c-uuid", "k": "v ü"])

  /// The faults here are the tests' own, and they count requests exactly: no
  /// attempt may time out of itself. With `.fast()`'s 1 s, under a sanitizer
  /// (or a loaded machine) a compose of some MiB in the fake outlasted it and
  /// went again (scripts/sanitize.sh, TSan).
  let patient = RetryPolicy.fast(attemptTimeout: 30, deadline: 60)

  /// Composite above 1 MiB, 256 KiB parts, 3 at once; each part above the
  /// upload threshold, so in a resumable session (`threshold` at 256 KiB or
  /// more: each in one multipart request).
  func policy(
    parallel: Int = 3, maxParts: Int = 32, partSize: Int64 = 256 << 10, threshold: Int64 = 128 << 10
  ) throws -> UploadPolicy {
    try UploadPolicy(
      threshold: threshold, chunkSize: 256 << 10, compositeThreshold: 1 << 20, partSize: partSize,
      parallelParts: parallel, maxParts: maxParts)
  }

  func partNames(_ server: FakeStorageServer) throws -> [String] {
    try server.requests(.uploadSession).map {
      try XCTUnwrap(JSONSerialization.jsonObject(with: Data($0.body)) as? [String: Any])["name"] as? String
        ?? ""
    }
  }

  func composeBody(_ request: FakeStorageServer.RecordedRequest) throws -> [String: Any] {
    try XCTUnwrap(JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any])
  }

  func leftovers(_ server: FakeStorageServer) -> [String] {
    server.store.names.filter { $0.hasPrefix(UploadPolicy.partDirectory) }
  }

  func testLargeUploadIsPartsInParallelThenOneComposeThenDeletes() async throws {
    let data = pattern(10 * (256 << 10) - 1000)  // 10 parts, the last short
    let metrics = TestMetrics()
    try await withFakeServer(retry: patient, uploads: try policy(), metrics: StorageMetrics(factory: metrics))
    {
      server, client in
      server.store.latency = .milliseconds(20)  // so parts overlap
      let meta = try await client.upload(
        "dir/big", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)

      let names = try partNames(server)
      XCTAssertEqual(names.count, 10)
      let id = try XCTUnwrap(
        names.first?.dropFirst(UploadPolicy.partDirectory.count).split(separator: "/").first)
      XCTAssertEqual(Set(names), Set((0..<10).map { UploadPolicy.partDirectory + "\(id)/000\($0)" }))
      XCTAssertTrue(server.requests(.uploadSession).allSatisfy { $0.query["ifGenerationMatch"] == "0" })
      XCTAssertLessThanOrEqual(server.peakInFlight(.uploadChunk), 3, "at most parallelParts at once")
      XCTAssertGreaterThan(server.peakInFlight(.uploadChunk), 1, "parts overlap")

      let composes = server.requests(.compose)
      XCTAssertEqual(composes.count, 1)
      let compose = try XCTUnwrap(composes.first)
      XCTAssertEqual(compose.path, "/storage/v1/b/bkt/o/dir%2Fbig/compose")
      XCTAssertEqual(compose.query["ifGenerationMatch"], "0")
      let body = try composeBody(compose)
      let sources = try XCTUnwrap(body["sourceObjects"] as? [[String: Any]])
      XCTAssertEqual(
        sources.map { $0["name"] as? String }, (0..<10).map { UploadPolicy.partDirectory + "\(id)/000\($0)" })
      XCTAssertTrue(sources.allSatisfy { $0["generation"] != nil }, "each source pinned to its generation")
      let destination = try XCTUnwrap(body["destination"] as? [String: Any])
      XCTAssertEqual(destination["contentType"] as? String, "text/plain; charset=utf-8")
      XCTAssertEqual(destination["metadata"] as? [String: String], attributes.custom)

      XCTAssertTrue(server.store.data("dir/big") == data)
      XCTAssertEqual(ObjectAttributes(of: meta), attributes, "every property, as one upload would set")
      XCTAssertEqual(meta.size, Int64(data.count))
      XCTAssertNil(meta.md5Hash, "a composite has no md5Hash")
      XCTAssertEqual(meta.crc32c, server.store.put("reference", data: data).crc32c)
      XCTAssertEqual(server.store.componentCount("dir/big"), 10)

      XCTAssertEqual(leftovers(server), [])
      let deletes = server.requests(.delete)
      XCTAssertEqual(deletes.count, 10)
      XCTAssertTrue(
        deletes.allSatisfy { $0.query["ifGenerationMatch"] != nil }, "each part under its generation")
      let counted = metrics.counterTotal(
        label: "bucketfs_storage_requests_total", dimensions: [("kind", "compose")])
      XCTAssertEqual(counted, 1)
    }
  }

  func testMoreThan32PartsComposeInATree() async throws {
    let data = pattern(40 * (64 << 10))
    try await withFakeServer(
      retry: patient, uploads: try policy(parallel: 8, maxParts: 64, partSize: 64 << 10)
    ) {
      server, client in
      let meta = try await client.upload(
        "t", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertEqual(server.requests(.upload).count, 40, "64 KiB parts: one multipart request each")
      let composes = server.requests(.compose)
      XCTAssertEqual(composes.count, 3, "32 and 8 into two intermediates, then those two")
      for request in composes {
        let sources = try XCTUnwrap(try composeBody(request)["sourceObjects"] as? [[String: Any]])
        XCTAssertLessThanOrEqual(sources.count, 32)
      }
      let last = try XCTUnwrap(composes.last)
      XCTAssertEqual(last.objectName, "t")
      XCTAssertTrue(
        composes.dropLast().allSatisfy { $0.objectName?.hasPrefix(UploadPolicy.partDirectory) ?? false })
      XCTAssertTrue(composes.dropLast().allSatisfy { $0.query["ifGenerationMatch"] == "0" })
      XCTAssertTrue(server.store.data("t") == data)
      XCTAssertEqual(ObjectAttributes(of: meta), attributes)
      XCTAssertEqual(server.store.componentCount("t"), 40)
      XCTAssertEqual(leftovers(server), [])
      XCTAssertEqual(server.requests(.delete).count, 42, "the parts and the intermediates")
    }
  }

  func testPartsNoLargerThanTheUploadThresholdGoInOneRequestEach() async throws {
    let data = pattern(6 * (256 << 10) + 1000)
    try await withFakeServer(retry: patient, uploads: try policy(threshold: 256 << 10)) { server, client in
      server.injectFaults(
        [.status(503)],
        when: { $0.kind == .upload && String(decoding: $0.body, as: UTF8.self).contains("0002\"") })
      let meta = try await client.upload(
        "m", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertEqual(server.requests(.uploadSession).count, 0)
      let parts = server.requests(.upload).filter {
        String(decoding: $0.body, as: UTF8.self).contains("bucketfs-parts")
      }
      XCTAssertEqual(parts.count, 8, "7 parts, one sent twice (the 503)")
      XCTAssertTrue(
        parts.allSatisfy { $0.query["uploadType"] == "multipart" && $0.query["ifGenerationMatch"] == "0" })
      XCTAssertTrue(server.store.data("m") == data)
      XCTAssertEqual(meta.size, Int64(data.count))
      XCTAssertEqual(leftovers(server), [])
    }
  }

  func testAFailingPartIsRetriedAlone() async throws {
    let data = pattern(6 * (256 << 10))
    try await withFakeServer(retry: patient, uploads: try policy()) { server, client in
      server.injectFaults(
        [.status(503)], when: { $0.kind == .uploadChunk && $0.query["upload_id"] == "session-000002" })
      let meta = try await client.upload(
        "r", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertEqual(server.requests(.uploadSession).count, 6, "no part started again")
      XCTAssertEqual(server.requests(.uploadChunk).count, 7, "one chunk sent twice")
      XCTAssertTrue(server.store.data("r") == data)
      XCTAssertEqual(meta.size, Int64(data.count))
      XCTAssertEqual(leftovers(server), [])
    }
  }

  func testAFailedPartDeletesEveryPart() async throws {
    let data = pattern(8 * (256 << 10))
    try await withFakeServer(retry: patient, uploads: try policy()) { server, client in
      server.store.latency = .milliseconds(10)
      server.injectFaults(
        [.status(400)],
        when: {
          $0.kind == .uploadSession && String(decoding: $0.body, as: UTF8.self).contains("/0005\"")
        })
      let error = await storageError {
        try await client.upload("f", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)
      }
      guard case .badRequest = error else { return XCTFail("\(String(describing: error))") }
      XCTAssertEqual(server.requests(.compose).count, 0)
      XCTAssertNil(server.store.object("f"))
      XCTAssertEqual(leftovers(server), [], "every part made is deleted")
    }
  }

  func testAFailedComposeDeletesEveryPart() async throws {
    try await withFakeServer(retry: patient, uploads: try policy()) { server, client in
      server.injectFaults([.status(400)], for: .compose)
      let error = await storageError {
        try await client.upload(
          "f", from: BytesSource(pattern(3 << 20)), attributes: attributes, ifGenerationMatch: 0)
      }
      guard case .badRequest = error else { return XCTFail("\(String(describing: error))") }
      XCTAssertNil(server.store.object("f"))
      XCTAssertEqual(leftovers(server), [])
    }
  }

  func testComposeConflictIsPreconditionFailedAndPartsAreDeleted() async throws {
    try await withFakeServer(retry: patient, uploads: try policy()) { server, client in
      let theirs = server.store.put("f", data: [1, 2, 3], custom: ["who": "them"])
      let error = await storageError {
        try await client.upload(
          "f", from: BytesSource(pattern(3 << 20)), attributes: attributes, ifGenerationMatch: 0)
      }
      guard case .preconditionFailed = error else { return XCTFail("\(String(describing: error))") }
      XCTAssertEqual(server.store.object("f")?.generation, theirs.generation, "theirs stands")
      XCTAssertEqual(leftovers(server), [])
    }
  }

  func testALostComposeAnswerIsTakenWhenTheObjectIsThisUploads() async throws {
    let data = pattern(3 << 20)
    try await withFakeServer(retry: patient, uploads: try policy()) { server, client in
      server.injectFaults([.answerLost(reset: true)], for: .compose)
      let meta = try await client.upload(
        "f", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertEqual(server.requests(.compose).count, 2, "repeated; the repeat's 412 is checked")
      XCTAssertEqual(meta.generation, server.store.object("f")?.generation)
      XCTAssertTrue(server.store.data("f") == data)
      XCTAssertEqual(leftovers(server), [])
    }
  }

  /// A part's answer was lost, and before the repeat the part there came to
  /// carry metadata the upload did not send (storage-testbench adds keys of
  /// its own to every upload): the repeat's 412 is checked by the part's
  /// bytes, which are this upload's, so the upload goes on.
  func testALostPartAnswerIsTakenByItsBytes() async throws {
    let data = pattern(3 << 20)
    try await withFakeServer(retry: patient, uploads: try policy(parallel: 1, threshold: 256 << 10)) {
      server, client in
      server.injectFaults([.answerLost(reset: true)], for: .upload)
      server.store.beforeNext(.upload) { store in
        store.beforeNext(.upload) { store in Self.relabelParts(store) { $0 } }
      }
      let meta = try await client.upload(
        "f", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertTrue(server.store.data("f") == data)
      XCTAssertEqual(meta.generation, server.store.object("f")?.generation)
      XCTAssertEqual(leftovers(server), [])
    }
  }

  /// ... but a part whose bytes differ is not this upload's: the upload
  /// fails, as unavailable (not the destination's 412), and stores nothing.
  func testALostPartAnswerWithOtherBytesThereFailsTheUpload() async throws {
    try await withFakeServer(retry: patient, uploads: try policy(parallel: 1, threshold: 256 << 10)) {
      server, client in
      server.injectFaults([.answerLost(reset: true)], for: .upload)
      server.store.beforeNext(.upload) { store in
        store.beforeNext(.upload) { store in Self.relabelParts(store) { $0.map { $0 ^ 1 } } }
      }
      let error = await storageError {
        try await client.upload(
          "f", from: BytesSource(pattern(3 << 20)), attributes: self.attributes, ifGenerationMatch: 0)
      }
      guard case .unavailable = error else { return XCTFail("\(String(describing: error))") }
      XCTAssertNil(server.store.object("f"))
      XCTAssertEqual(leftovers(server), [])
    }
  }

  /// Stores each part again with `change` applied to its bytes and a custom key added.
  static func relabelParts(_ store: InMemoryObjectStore, _ change: ([UInt8]) -> [UInt8]) {
    for name in store.names where name.hasPrefix(UploadPolicy.partDirectory) {
      store.put(
        name, data: change(store.data(name) ?? []), contentType: "application/octet-stream",
        custom: ["x_added": "1"])
    }
  }

  func testWithoutAPreconditionALostComposeIsNotRepeated() async throws {
    try await withFakeServer(retry: patient, uploads: try policy()) { server, client in
      server.injectFaults([.status(503)], for: .compose)
      let error = await storageError {
        try await client.upload(
          "f", from: BytesSource(pattern(3 << 20)), attributes: attributes, ifGenerationMatch: nil)
      }
      guard case .unavailable = error else { return XCTFail("\(String(describing: error))") }
      XCTAssertEqual(server.requests(.compose).count, 1)
      XCTAssertEqual(leftovers(server), [])
    }
  }

  func testOverwriteCarriesTheCallersGeneration() async throws {
    try await withFakeServer(retry: patient, uploads: try policy()) { server, client in
      let old = server.store.put("f", data: [9])
      _ = try await client.upload(
        "f", from: BytesSource(pattern(2 << 20)), attributes: attributes, ifGenerationMatch: old.generation)
      XCTAssertEqual(server.requests(.compose).first?.query["ifGenerationMatch"], String(old.generation))
      XCTAssertEqual(server.store.object("f")?.size, 2 << 20)
    }
  }

  func testThresholdOffOrSmallFileIsOneUpload() async throws {
    let off = try UploadPolicy(threshold: 512 << 10, chunkSize: 256 << 10, compositeThreshold: 0)
    try await withFakeServer(retry: patient, uploads: off) { server, client in
      let meta = try await client.upload(
        "a", from: BytesSource(pattern(3 << 20)), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertEqual(server.requests(.compose).count, 0)
      XCTAssertEqual(server.requests(.uploadSession).count, 1)
      XCTAssertNotNil(meta.md5Hash)
    }
    try await withFakeServer(retry: patient, uploads: try policy()) { server, client in
      _ = try await client.upload(
        "b", from: BytesSource(pattern(1 << 20)), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertEqual(server.requests(.compose).count, 0, "at the threshold: one upload")
    }
  }

  func testRefusedPartsFallBackToOneStreamForTheMount() async throws {
    let data = pattern(2 << 20)
    try await withFakeServer(retry: patient, uploads: try policy()) { server, client in
      server.injectFaults(
        Array(repeating: .status(403), count: 100),
        when: {
          $0.kind == .uploadSession && String(decoding: $0.body, as: UTF8.self).contains("bucketfs-parts")
        })
      let meta = try await client.upload(
        "a", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertNotNil(meta.md5Hash, "one stream")
      XCTAssertTrue(server.store.data("a") == data)
      server.resetRequests()
      _ = try await client.upload("b", from: BytesSource(data), attributes: attributes, ifGenerationMatch: 0)
      XCTAssertEqual(server.requests(.uploadSession).count, 1, "no parts tried again")
      XCTAssertEqual(leftovers(server), [])
    }
  }

  func testLeftoverPartsAreCountedAndOldOnesRemoved() async throws {
    try await withFakeServer(retry: patient, uploads: try policy()) { server, client in
      XCTAssertEqual(client.cleanCommand, "bucketfs clean-parts gs://bkt")
      let none = try await client.leftoverParts()
      XCTAssertEqual(none.parts.count, 0)
      let now = Int(Date().timeIntervalSince1970)
      server.store.put(UploadPolicy.partDirectory + "\(now - 7200)-aaaa/0000", data: [1])
      server.store.put(UploadPolicy.partDirectory + "\(now - 7200)-aaaa/0001", data: [2])
      server.store.put(UploadPolicy.partDirectory + "\(now)-bbbb/0000", data: [3])
      server.store.put(UploadPolicy.partDirectory + "odd", data: [4])
      server.store.put("kept", data: [5])
      let found = try await client.leftoverParts()
      XCTAssertEqual(found.parts.count, 4)
      XCTAssertFalse(found.more)
      let done = try await client.removeLeftoverParts(olderThan: 3600)
      XCTAssertEqual(done, .init(removed: 3, spared: 1, failed: 0))
      XCTAssertEqual(server.store.names, [UploadPolicy.partDirectory + "\(now)-bbbb/0000", "kept"])
      XCTAssertTrue(server.requests(.delete).allSatisfy { $0.query["ifGenerationMatch"] != nil })
      let all = try await client.removeLeftoverParts(olderThan: 0)
      XCTAssertEqual(all.removed, 1)
      XCTAssertEqual(server.store.names, ["kept"])
    }
  }

  func testAMountOfAPrefixKeepsItsPartsAndListingsInside() async throws {
    let inside = try UploadPolicy(
      threshold: 512 << 10, chunkSize: 256 << 10, compositeThreshold: 1 << 20, partSize: 256 << 10,
      partsUnder: "some/prefix/")
    try await withFakeServer(retry: patient, uploads: inside) { server, client in
      server.injectFaults([.status(400)], for: .compose)
      _ = await storageError {
        try await client.upload(
          "some/prefix/f", from: BytesSource(pattern(2 << 20)), attributes: attributes, ifGenerationMatch: 0)
      }
      XCTAssertEqual(client.partPrefix, "some/prefix/.bucketfs-parts/")
      XCTAssertEqual(client.cleanCommand, "bucketfs clean-parts gs://bkt/some/prefix")
      XCTAssertTrue(try partNames(server).allSatisfy { $0.hasPrefix("some/prefix/.bucketfs-parts/") })
      XCTAssertTrue(
        server.requests(.list).allSatisfy { $0.query["prefix"]?.hasPrefix("some/prefix/") ?? false })
      server.store.put("some/prefix/.bucketfs-parts/1-x/0000", data: [1])
      server.store.put(".bucketfs-parts/1-y/0000", data: [1])
      let found = try await client.leftoverParts()
      XCTAssertEqual(found.parts.map(\.name), ["some/prefix/.bucketfs-parts/1-x/0000"])
    }
  }

  func testPartsFollowThePolicy() throws {
    let policy = try policy()
    XCTAssertEqual(policy.parts(of: 1000 << 10).map(\.count), [256 << 10, 256 << 10, 256 << 10, 232 << 10])
    XCTAssertEqual(policy.parts(of: 64 << 20).count, 32, "larger parts rather than more than maxParts")
    XCTAssertEqual(policy.parts(of: 64 << 20).map(\.count).reduce(0, +), 64 << 20)
    XCTAssertFalse(policy.isComposite(1 << 20))
    XCTAssertTrue(policy.isComposite((1 << 20) + 1))
    XCTAssertEqual(UploadPolicy().compositeThreshold, 32 << 20)
    XCTAssertThrowsError(try UploadPolicy(threshold: 0, chunkSize: 256 << 10, compositeThreshold: -1))
    XCTAssertThrowsError(try UploadPolicy(threshold: 0, chunkSize: 256 << 10, maxParts: 2000))
  }
}

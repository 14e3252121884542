import CloudStorage
import CoreMetrics
import MetricsTestKit
import ObjectStore
import StorageFake
import XCTest

/// Every HTTP request the client sends is counted once, by kind and status,
/// retries included, so the counts agree with what the service saw
/// (docs/SEMANTICS.md#metrics).
final class StorageMetricsTests: XCTestCase {
  private let requests = "bucketfs_storage_requests_total"

  private func count(_ metrics: TestMetrics, _ kind: String, _ status: String? = nil) -> Int64 {
    var dimensions = [("kind", kind)]
    if let status { dimensions.append(("status", status)) }
    return metrics.counterTotal(label: requests, dimensions: dimensions)
  }

  private func timed(_ metrics: TestMetrics, _ kind: String) throws -> Int {
    try metrics.expectTimer("bucketfs_storage_request_duration_seconds", [("kind", kind)]).values.count
  }

  func testEachKindIsCountedWithItsStatus() async throws {
    let metrics = TestMetrics()
    try await withFakeServer(uploads: smallChunks, metrics: StorageMetrics(factory: metrics)) {
      server, client in
      let meta = server.store.put("d/a", data: Array(repeating: 7, count: 100))
      _ = try await client.list(ListRequest(prefix: "d/", delimiter: "/", pageSize: 10))
      _ = try await client.metadata(of: "d/a")
      _ = await storageError { try await client.metadata(of: "d/missing") }
      _ = try await client.read("d/a", generation: meta.generation, range: 10..<50, reusing: nil)
      _ = try await client.patch(
        "d/a", MetadataPatch(fields: [.contentType: "text/plain"]), ifMetagenerationMatch: nil)
      let small = try await client.upload(
        "d/small", from: BytesSource(Array(repeating: 1, count: 1000)), attributes: ObjectAttributes(),
        ifGenerationMatch: 0)
      _ = try await client.upload(
        "d/large", from: BytesSource(pattern(600 << 10)), attributes: ObjectAttributes(), ifGenerationMatch: 0
      )
      let copied = try await client.copy(
        "d/small", sourceGeneration: small.generation, to: "d/copy", attributes: nil, ifGenerationMatch: 0)
      _ = try await client.move(
        "d/copy", sourceGeneration: copied.generation, to: "d/moved", ifGenerationMatch: 0)
      try await client.delete("d/moved", ifGenerationMatch: nil)

      XCTAssertEqual(count(metrics, "list", "200"), 1)
      XCTAssertEqual(count(metrics, "get", "200"), 1)
      XCTAssertEqual(count(metrics, "get", "404"), 1)
      XCTAssertEqual(count(metrics, "download", "206"), 1)
      XCTAssertEqual(count(metrics, "patch", "200"), 1)
      XCTAssertEqual(count(metrics, "copy", "200"), 1)
      XCTAssertEqual(count(metrics, "move", "200"), 1)
      XCTAssertEqual(count(metrics, "delete"), 1)
      // One multipart request; a session start and three 256 KiB chunks for 600 KiB.
      let uploads = server.requests.filter {
        [.upload, .uploadSession, .uploadChunk, .uploadStatus].contains($0.kind)
      }
      XCTAssertEqual(uploads.count, 5)
      XCTAssertEqual(count(metrics, "upload"), Int64(uploads.count))
      // Every request the server saw, and no other, was counted; each was timed.
      XCTAssertEqual(metrics.counterTotal(label: requests), Int64(server.requests.count))
      for kind in StorageRequestKind.allCases where count(metrics, kind.rawValue) > 0 {
        XCTAssertEqual(Int64(try timed(metrics, kind.rawValue)), count(metrics, kind.rawValue), kind.rawValue)
      }
      XCTAssertEqual(metrics.counterTotal(label: "bucketfs_storage_retries_total"), 0)
      XCTAssertEqual(metrics.counterTotal(label: "bucketfs_storage_bytes_downloaded_total"), 40)
      // The media of both uploads, plus the metadata parts and the session start's body.
      let uploaded = metrics.counterTotal(label: "bucketfs_storage_bytes_uploaded_total")
      XCTAssertEqual(uploaded, Int64(uploads.map(\.body.count).reduce(0, +)))
      XCTAssertGreaterThan(uploaded, 1000 + (600 << 10))
    }
  }

  func testRetriesAreCountedAsRequestsAndRetries() async throws {
    let metrics = TestMetrics()
    try await withFakeServer(metrics: StorageMetrics(factory: metrics)) { server, client in
      server.store.put("f", data: [1])
      server.injectFaults([.status(503), .status(429)], for: .metadata)
      _ = try await client.metadata(of: "f")
      XCTAssertEqual(server.requests(.metadata).count, 3)
      XCTAssertEqual(count(metrics, "get", "503"), 1)
      XCTAssertEqual(count(metrics, "get", "429"), 1)
      XCTAssertEqual(count(metrics, "get", "200"), 1)
      XCTAssertEqual(
        try metrics.expectCounter("bucketfs_storage_retries_total", [("kind", "get")]).totalValue, 2)
    }
  }

  func testAttemptsWithoutAnAnswerAreNamed() async throws {
    let metrics = TestMetrics()
    try await withFakeServer(
      retry: .fast(attemptTimeout: 0.5, deadline: 3), metrics: StorageMetrics(factory: metrics)
    ) {
      server, client in
      server.store.put("f", data: [1])
      server.injectFaults([.resetConnection], for: .list)
      server.injectFaults([.stall(.seconds(5))], for: .metadata)
      _ = try await client.list(ListRequest(prefix: "", delimiter: "/", pageSize: 10))
      _ = try await client.metadata(of: "f")
      XCTAssertEqual(count(metrics, "list", "error"), 1)
      XCTAssertEqual(count(metrics, "list", "200"), 1)
      XCTAssertEqual(count(metrics, "get", "timeout"), 1)
      XCTAssertEqual(count(metrics, "get", "200"), 1)
      XCTAssertEqual(metrics.counterTotal(label: "bucketfs_storage_retries_total"), 2)
    }
  }
}

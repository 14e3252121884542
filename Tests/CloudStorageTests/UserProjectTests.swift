import AsyncHTTPClient
import CloudStorage
import Logging
import ObjectStore
import ServiceAccess
import StorageFake
import XCTest

/// Requester pays: with a billing project every request of every kind carries `userProject`;
/// without one, a requester-pays bucket's refusal is EACCES, recognized, and logged once.
final class UserProjectTests: XCTestCase {
  static let project = "billed-project-42"

  /// A requester-pays fake and a client; `userProject` as given.
  func withRequesterPays(
    userProject: String?, uploads: UploadPolicy = UploadPolicy(), logger: Logger = testLogger(),
    _ body: (FakeStorageServer, CloudStorageClient) async throws -> Void
  ) async throws {
    let server = FakeStorageServer(bucket: "bkt")
    server.requireUserProject = Self.project
    try await server.start()
    let http = CloudStorageClient.makeHTTPClient(retry: .fast())
    let outcome: Result<Void, any Error>
    do {
      let client = CloudStorageClient(
        bucket: "bkt", endpoint: try Endpoint(server.endpoint), http: http, tokens: nil, retry: .fast(),
        uploads: uploads, logger: logger, userProject: userProject)
      try await body(server, client)
      outcome = .success(())
    } catch {
      outcome = .failure(error)
    }
    try? await http.shutdown()
    try? await server.stop()
    try outcome.get()
  }

  func testEveryRequestKindCarriesTheBillingProject() async throws {
    // Resumable above 512 KiB in 256 KiB chunks; composite above 1 MiB in 256 KiB parts.
    let uploads = try UploadPolicy(
      threshold: 512 << 10, chunkSize: 256 << 10, compositeThreshold: 1 << 20, partSize: 256 << 10)
    try await withRequesterPays(userProject: Self.project, uploads: uploads) { server, client in
      let attributes = ObjectAttributes(fields: [.contentType: "text/plain"], custom: [:])
      let small = try await client.upload(
        "d/small", from: BytesSource(pattern(1000)), attributes: attributes, ifGenerationMatch: 0)
      _ = try await client.upload(
        "d/medium", from: BytesSource(pattern(700 << 10)), attributes: attributes, ifGenerationMatch: 0)
      let large = try await client.upload(
        "d/large", from: BytesSource(pattern((1 << 20) + 5000)), attributes: attributes, ifGenerationMatch: 0)
      _ = try await client.list(ListRequest(prefix: "d/", delimiter: "/", pageSize: 10))
      let meta = try await client.metadata(of: "d/small")
      _ = try await client.read("d/small", generation: meta.generation, range: 0..<10, reusing: nil)
      _ = try await client.patch(
        "d/small", MetadataPatch(fields: [.contentType: "text/csv"]), ifMetagenerationMatch: nil)
      let copy = try await client.copy(
        "d/small", sourceGeneration: small.generation, to: "d/copy", attributes: nil, ifGenerationMatch: 0)
      _ = try await client.move(
        "d/copy", sourceGeneration: copy.generation, to: "d/moved", ifGenerationMatch: 0)
      try await client.delete("d/large", ifGenerationMatch: large.generation)
      _ = try await client.leftoverParts()
      _ = try await client.removeLeftoverParts(olderThan: 0)

      let kinds = Set(server.requests.map(\.kind))
      for kind: FakeStorageServer.RequestKind in [
        .upload, .uploadSession, .uploadChunk, .compose, .list, .metadata, .media, .patch, .rewrite, .move,
        .delete,
      ] {
        XCTAssertTrue(kinds.contains(kind), "no \(kind) request was made")
      }
      for request in server.requests {
        XCTAssertEqual(request.query["userProject"], Self.project, "\(request)")
      }
      // Each names it once, however the URL was made (a session URI included).
      XCTAssertFalse(server.requests.contains { $0.path.contains("userProject") })
    }
  }

  func testWithoutABillingProjectTheRefusalIsAccessDeniedAndLoggedOnce() async throws {
    let (logger, lines) = collectingLogger()
    try await withRequesterPays(userProject: nil, logger: logger) { server, client in
      for _ in 0..<2 {
        let error = await storageError {
          try await client.list(ListRequest(prefix: "", delimiter: "/", pageSize: 1))
        }
        XCTAssertEqual(
          error, .accessDenied("Bucket is a requester pays bucket but no user project provided."))
        XCTAssertEqual(error?.isRequesterPaysRefusal, true)
      }
      XCTAssertEqual(server.requests.count, 2, "a refusal is not retried")
    }
    let logged = lines.withLock { $0 }.filter { $0.contains("requester-pays") }
    XCTAssertEqual(
      logged,
      [
        "bucket bkt is requester-pays: name a billing project with --billing-project (the service said: "
          + "Bucket is a requester pays bucket but no user project provided.)"
      ])
    XCTAssertFalse(StorageError.accessDenied("Access denied.").isRequesterPaysRefusal)
  }
}

/// A logger whose messages land in the returned box.
private func collectingLogger() -> (Logger, Locked<[String]>) {
  let lines = Locked<[String]>([])
  let logger = Logger(label: "user-project-tests") { _ in Collector(lines: lines) }
  return (logger, lines)
}

private struct Collector: LogHandler {
  let lines: Locked<[String]>
  var logLevel: Logger.Level = .trace
  var metadata: Logger.Metadata = [:]

  subscript(metadataKey key: String) -> Logger.Metadata.Value? {
    get { metadata[key] }
    set { metadata[key] = newValue }
  }

  func log(event: LogEvent) {
    lines.withLock { $0.append("\(event.message)") }
  }
}

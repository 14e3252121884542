import CloudStorage
import Foundation
import NIOCore
import ObjectStore
import StorageFake
import XCTest

@testable import CloudStorage

/// Every byte that goes up or comes down is checked against the object's
/// CRC-32C (docs/SEMANTICS.md#integrity), against a fake that flips bytes.
final class IntegrityTests: XCTestCase {
  /// No attempt may time out of itself on a loaded machine: the faults here are the tests' own.
  let patient = RetryPolicy.fast(attemptTimeout: 30, deadline: 60)

  func testMultipartUploadDeclaresTheMediaCRC32C() async throws {
    let data = pattern(300_000)
    try await withFakeServer { server, client in
      _ = try await client.upload("a", from: BytesSource(data), attributes: .init(), ifGenerationMatch: nil)
      let (json, _, _) = try multipartParts(try XCTUnwrap(server.requests(.upload).first))
      XCTAssertEqual(json["crc32c"] as? String, CRC32C.base64(CRC32C.update(0, ByteBuffer(bytes: data))))
    }
  }

  /// A source that knows its sum (a file summed as it was written) is read
  /// once, for sending, and its sum is what the metadata declares; any
  /// other is read twice: once to sum it, once to send it.
  func testASourceThatKnowsItsSumIsReadOnceAndDeclaresIt() async throws {
    let data = pattern(300_000)
    let sum = CRC32C.update(0, ByteBuffer(bytes: data))
    try await withFakeServer { server, client in
      let summed = RecordingSource(data)
      summed.crc32c = sum
      _ = try await client.upload("a", from: summed, attributes: .init(), ifGenerationMatch: 0)
      XCTAssertEqual(summed.totalRead, data.count)
      let (json, _, _) = try multipartParts(try XCTUnwrap(server.requests(.upload).first))
      XCTAssertEqual(json["crc32c"] as? String, CRC32C.base64(sum))
      let unsummed = RecordingSource(data)
      _ = try await client.upload("b", from: unsummed, attributes: .init(), ifGenerationMatch: 0)
      XCTAssertEqual(unsummed.totalRead, 2 * data.count)
      XCTAssertTrue(server.store.data("a") == data && server.store.data("b") == data)
    }
  }

  /// A source whose bytes no longer have the sum it knows (its disk changed
  /// one) is refused, by the service for one request or a session, by the
  /// client for parts summed as they were sent: nothing is stored.
  func testASourceWhoseBytesAreNotItsSumIsNeverStored() async throws {
    let policy = try UploadPolicy(
      threshold: 256 << 10, chunkSize: 256 << 10, compositeThreshold: 1 << 20, partSize: 256 << 10)
    try await withFakeServer(retry: .fast(attemptTimeout: 30, deadline: 0.5), uploads: policy) {
      server, client in
      for (name, size) in [("small", 100_000), ("session", 700_000), ("parts", 3 << 20)] {
        let source = RecordingSource(pattern(size))
        source.crc32c = 0x1234_5678
        do {
          _ = try await client.upload(name, from: source, attributes: .init(), ifGenerationMatch: 0)
          XCTFail("\(name): bytes that are not the sum written must not be stored")
        } catch {}
        XCTAssertNil(server.store.object(name), name)
      }
    }
  }

  func testUploadRefusedOnceForItsChecksumIsSentAgain() async throws {
    let data = pattern(200_000)
    try await withFakeServer { server, client in
      server.corrupt { $0.uploads = 1 }
      _ = try await client.upload("a", from: BytesSource(data), attributes: .init(), ifGenerationMatch: 0)
      XCTAssertEqual(server.requests(.upload).count, 2, "refused with 400, then sent again")
      XCTAssertTrue(server.store.data("a") == data)
    }
  }

  func testUploadAlwaysRefusedFailsAndStoresNothing() async throws {
    try await withFakeServer { server, client in
      server.corrupt { $0.uploads = Int.max }
      do {
        _ = try await client.upload(
          "a", from: BytesSource(pattern(1000)), attributes: .init(), ifGenerationMatch: nil)
        XCTFail("a corrupted upload must fail")
      } catch StorageError.unavailable {}
      XCTAssertNil(server.store.object("a"))
      XCTAssertGreaterThan(server.requests(.upload).count, 1, "sent again until the retry deadline")
    }
  }

  func testStreamedAndCompositePartsDeclareTheirCRC32C() async throws {
    let data = pattern(3 << 20)
    let policy = try UploadPolicy(
      threshold: 1 << 20, chunkSize: 256 << 10, compositeThreshold: 1 << 20, partSize: 512 << 10)
    try await withFakeServer(retry: patient, uploads: policy) { server, client in
      _ = try await client.upload("big", from: BytesSource(data), attributes: .init(), ifGenerationMatch: nil)
      let parts = server.requests(.upload)
      XCTAssertGreaterThanOrEqual(parts.count, 6, "six parts (a slow one may go again)")
      for request in parts {
        let (json, _, media) = try multipartParts(request)
        XCTAssertEqual(json["crc32c"] as? String, CRC32C.base64(CRC32C.update(0, ByteBuffer(bytes: media))))
      }
      XCTAssertTrue(server.store.data("big") == data)
    }
  }

  func testComposeWhoseCRC32CIsNotThePartsDeletesThatGenerationAndFails() async throws {
    let data = pattern(3 << 20)
    let policy = try UploadPolicy(
      threshold: 1 << 20, chunkSize: 256 << 10, compositeThreshold: 1 << 20, partSize: 512 << 10)
    try await withFakeServer(retry: patient, uploads: policy) { server, client in
      server.corrupt { $0.composes = 1 }
      do {
        _ = try await client.upload(
          "big", from: BytesSource(data), attributes: .init(), ifGenerationMatch: nil)
        XCTFail("a compose with a wrong crc32c must fail")
      } catch StorageError.invalidResponse {}
      XCTAssertNil(server.store.object("big"), "that generation is deleted")
      let deletes = server.requests(.delete).filter { $0.objectName == "big" }
      XCTAssertEqual(deletes.count, 1)
      XCTAssertNotNil(deletes.first?.query["ifGenerationMatch"], "deleted under its generation")
    }
  }

  func testResumableUploadIsCheckedAgainstWhatWasSent() async throws {
    let data = pattern(1 << 20)
    try await withFakeServer(uploads: smallChunks) { server, client in
      let meta = try await client.upload(
        "r", from: BytesSource(data), attributes: .init(), ifGenerationMatch: nil)
      XCTAssertEqual(meta.crc32c, CRC32C.base64(CRC32C.update(0, ByteBuffer(bytes: data))))
    }
  }

  func testFlippedByteInAWholeObjectIsFetchedAgain() async throws {
    let data = pattern(100_000)
    try await withFakeServer { server, client in
      let meta = try await client.upload(
        "a", from: BytesSource(data), attributes: .init(), ifGenerationMatch: nil)
      server.corrupt { $0.downloads = 1 }
      let bytes = try await client.read("a", generation: meta.generation, range: 0..<meta.size, reusing: nil)
      XCTAssertTrue(Array(bytes.readableBytesView) == data, "never the flipped byte")
      XCTAssertEqual(server.requests(.media).count, 2)
    }
  }

  func testWholeObjectAlwaysCorruptedFails() async throws {
    let data = pattern(100_000)
    try await withFakeServer(retry: .fast(attemptTimeout: 1, deadline: 1)) { server, client in
      let meta = try await client.upload(
        "a", from: BytesSource(data), attributes: .init(), ifGenerationMatch: nil)
      server.corrupt { $0.downloads = Int.max }
      do {
        _ = try await client.read("a", generation: meta.generation, range: 0..<meta.size, reusing: nil)
        XCTFail("corrupted bytes must never be answered")
      } catch StorageError.unavailable {}
    }
  }

  /// A resumable session's last request is at most 1 MiB, read before it is
  /// sent, and declares the whole object's CRC-32C; the chunks before it are
  /// whole multiples of 256 KiB and declare none.
  func testResumableSessionDeclaresTheWholeCRC32CWithItsLastRequest() async throws {
    let data = pattern((3 << 20) + 1000)
    let policy = try UploadPolicy(threshold: 512 << 10, chunkSize: 8 << 20)
    try await withFakeServer(retry: patient, uploads: policy) { server, client in
      _ = try await client.upload("r", from: BytesSource(data), attributes: .init(), ifGenerationMatch: nil)
      let chunks = server.requests(.uploadChunk)
      XCTAssertEqual(chunks.count, 2, "the file but its end, then its end")
      let last = try XCTUnwrap(chunks.last)
      XCTAssertEqual(
        last.header("X-Goog-Hash"), "crc32c=\(CRC32C.base64(CRC32C.update(0, ByteBuffer(bytes: data))))")
      XCTAssertLessThanOrEqual(last.body.count, 1 << 20)
      for chunk in chunks.dropLast() {
        XCTAssertNil(chunk.header("X-Goog-Hash"))
        XCTAssertEqual(chunk.body.count % (256 << 10), 0)
      }
      XCTAssertTrue(server.store.data("r") == data)
    }
  }

  func testResumableChunkCorruptedOnceIsSentAgainInANewSession() async throws {
    let data = pattern(3 << 20)
    let policy = try UploadPolicy(threshold: 512 << 10, chunkSize: 1 << 20)
    try await withFakeServer(retry: patient, uploads: policy) { server, client in
      server.corrupt { $0.chunks = 1 }
      _ = try await client.upload("r", from: BytesSource(data), attributes: .init(), ifGenerationMatch: 0)
      XCTAssertEqual(server.requests(.uploadSession).count, 2, "the refused session, then a new one")
      XCTAssertTrue(server.store.data("r") == data)
    }
  }

  func testResumableChunksAlwaysCorruptedFailAndStoreNothing() async throws {
    let policy = try UploadPolicy(threshold: 512 << 10, chunkSize: 1 << 20)
    try await withFakeServer(retry: patient, uploads: policy) { server, client in
      server.corrupt { $0.chunks = Int.max }
      do {
        _ = try await client.upload(
          "r", from: BytesSource(pattern(2 << 20)), attributes: .init(), ifGenerationMatch: nil)
        XCTFail("a session whose bytes are refused must fail")
      } catch StorageError.unavailable(let message) {
        XCTAssertTrue(message.contains("CRC32C"), message)
      }
      XCTAssertNil(server.store.object("r"))
      XCTAssertEqual(
        server.requests(.uploadSession).count, 1 + CloudStorageClient.sessionRestarts,
        "a bounded few sessions")
    }
  }
}

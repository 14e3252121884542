import CloudStorage
import Foundation
import NIOCore
import ObjectStore
import StorageFake
import XCTest

/// Ranged media reads of one pinned generation.
final class ReadTests: XCTestCase {
  func testRangesReturnExactBytes() async throws {
    let data = (0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
    try await withFakeServer { server, client in
      let meta = server.store.put("blob", data: data)
      let size = Int64(data.count)
      let ranges: [Range<Int64>] = [
        0..<1, 0..<size, 1..<2, 100..<1124, 4095..<4097, size - 1..<size, size - 10..<size,
      ]
      for range in ranges {
        let bytes = try await client.read("blob", generation: meta.generation, range: range, reusing: nil)
          .array
        XCTAssertEqual(bytes, Array(data[Int(range.lowerBound)..<Int(range.upperBound)]), "\(range)")
      }
      let sent = server.requests(.media).map { $0.header("Range") }
      XCTAssertEqual(
        sent, ranges.map { "bytes=\($0.lowerBound)-\($0.upperBound - 1)" }, "one Range header per read")
    }
  }

  /// A sequential reader's spent segment is filled again in place: no fresh
  /// memory per segment. A spare too small, or still shared, is not written over.
  func testReadFillsASpareBufferInPlace() async throws {
    let data = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }
    try await withFakeServer { server, client in
      let meta = server.store.put("blob", data: data)
      let spent = ByteBufferAllocator().buffer(capacity: 200_000)
      let address = spent.withVeryUnsafeBytes { UInt(bitPattern: $0.baseAddress) }
      let bytes = try await client.read(
        "blob", generation: meta.generation, range: 1000..<151_000, reusing: SpareBuffer(consume spent))
      XCTAssertEqual(bytes.withVeryUnsafeBytes { UInt(bitPattern: $0.baseAddress) }, address, "same memory")
      XCTAssertEqual(bytes.readableBytes, 150_000)
      XCTAssertEqual(Array(bytes.readableBytesView), Array(data[1000..<151_000]))

      let small = ByteBufferAllocator().buffer(capacity: 1000)
      let grown = try await client.read(
        "blob", generation: meta.generation, range: 0..<150_000, reusing: SpareBuffer(consume small))
      XCTAssertEqual(Array(grown.readableBytesView), Array(data[0..<150_000]))

      // A slice of the spare still on its way to the kernel keeps its bytes.
      var shared = ByteBufferAllocator().buffer(capacity: 200_000)
      shared.writeBytes(Array(repeating: 0xAB, count: 4096))
      let inFlight = shared.getSlice(at: 0, length: 4096)!
      let other = try await client.read(
        "blob", generation: meta.generation, range: 0..<150_000, reusing: SpareBuffer(shared))
      XCTAssertEqual(Array(other.readableBytesView), Array(data[0..<150_000]))
      XCTAssertEqual(Array(inFlight.readableBytesView), Array(repeating: 0xAB, count: 4096))
    }
  }

  func testRangePastTheEndGivesFewerBytes() async throws {
    try await withFakeServer { server, client in
      let meta = server.store.put("ten", data: Array(0..<10))
      let bytes = try await client.read("ten", generation: meta.generation, range: 6..<4096, reusing: nil)
        .array
      XCTAssertEqual(bytes, [6, 7, 8, 9])
    }
  }

  func testEmptyObjectReadsAsNothing() async throws {
    try await withFakeServer { server, client in
      let meta = server.store.put("empty", data: [])
      let bytes = try await client.read("empty", generation: meta.generation, range: 0..<4096, reusing: nil)
        .array
      XCTAssertEqual(bytes, [])
    }
  }

  func testStaleGenerationIsNotFound() async throws {
    try await withFakeServer { server, client in
      let old = server.store.put("f", data: Array("old".utf8))
      let new = server.store.put("f", data: Array("new contents".utf8))
      XCTAssertNotEqual(old.generation, new.generation)
      let error = await storageError {
        try await client.read("f", generation: old.generation, range: 0..<3, reusing: nil)
      }
      XCTAssertEqual(error, .notFound)
      // The live generation still reads.
      let bytes = try await client.read("f", generation: new.generation, range: 0..<3, reusing: nil).array
      XCTAssertEqual(bytes, Array("new".utf8))
      XCTAssertEqual(server.requests(.media).count, 2, "a 404 is not retried")
    }
  }

  func testDeletedObjectIsNotFound() async throws {
    try await withFakeServer { server, client in
      let meta = server.store.put("f", data: [1, 2, 3])
      server.store.delete("f")
      let error = await storageError {
        try await client.read("f", generation: meta.generation, range: 0..<3, reusing: nil)
      }
      XCTAssertEqual(error, .notFound)
    }
  }

  /// A server that ignores Range and sends the whole object (200): the client takes the slice.
  func testWholeObjectAnswerIsSliced() async throws {
    let data = Array(0..<200).map { UInt8($0) }
    try await withCannedServer(handler: { _ in .init(200, body: data) }) { server, client in
      let bytes = try await client.read("x", generation: 1, range: 50..<60, reusing: nil).array
      XCTAssertEqual(bytes, Array(data[50..<60]))
      let tail = try await client.read("x", generation: 1, range: 195..<300, reusing: nil).array
      XCTAssertEqual(tail, Array(data[195..<200]))
      XCTAssertEqual(server.requests.first?.header("Range"), "bytes=50-59")
    }
  }

  /// The sums a reader asks for are the pieces' CRC-32Cs as the bytes
  /// arrived: of a 206, of a whole object sliced, of a retry after a short
  /// answer (the first answer's sums go); none for another range.
  func testArrivalSumsArePiecesOfTheAnswer() async throws {
    let data = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 29 &+ 5) }
    func expected(_ range: Range<Int>, _ ends: [Int]) -> [UInt32] {
      var start = range.lowerBound
      return ends.map { end in
        defer { start = range.lowerBound + end }
        return CRC32C.update(0, ByteBuffer(bytes: data[start..<(range.lowerBound + end)]))
      }
    }
    let ends = [4096, 100_000, 100_001, 250_000]
    try await withFakeServer { server, client in
      let meta = server.store.put("blob", data: data)
      let sums = ArrivalSums(range: 1000..<251_000, pieceEnds: ends)
      _ = try await client.read(
        "blob", generation: meta.generation, range: 1000..<251_000, reusing: SpareBuffer(nil, sums: sums))
      XCTAssertEqual(sums.sums, expected(1000..<251_000, ends))

      server.injectFaults([.shortBody(100)], for: .media)
      let retried = ArrivalSums(range: 1000..<251_000, pieceEnds: ends)
      _ = try await client.read(
        "blob", generation: meta.generation, range: 1000..<251_000, reusing: SpareBuffer(nil, sums: retried))
      XCTAssertEqual(retried.sums, expected(1000..<251_000, ends))

      let other = ArrivalSums(range: 0..<250_000, pieceEnds: ends)
      _ = try await client.read(
        "blob", generation: meta.generation, range: 1000..<251_000, reusing: SpareBuffer(nil, sums: other))
      XCTAssertNil(other.sums, "sums of another range are not taken")
    }
    try await withCannedServer(handler: { _ in .init(200, body: data) }) { _, client in
      let sums = ArrivalSums(range: 50_000..<60_000, pieceEnds: [1, 10_000])
      _ = try await client.read(
        "x", generation: 1, range: 50_000..<60_000, reusing: SpareBuffer(nil, sums: sums))
      XCTAssertEqual(sums.sums, expected(50_000..<60_000, [1, 10_000]))
    }
  }

  /// A 206 for some other range than the one asked for is not silently used.
  func testMismatchedContentRangeIsInvalid() async throws {
    try await withCannedServer(handler: { _ in
      .init(206, headers: [("Content-Range", "bytes 0-9/100")], body: Array(0..<10))
    }) { _, client in
      let error = await storageError {
        try await client.read("x", generation: 1, range: 50..<60, reusing: nil)
      }
      guard case .invalidResponse = error else { return XCTFail("got \(String(describing: error))") }
    }
  }
}

/// Issue 11 item 3: a short answer is never a short read (the kernel takes
/// one as end of file); a server that ignores Range still gives the right bytes.
final class ShortReadTests: XCTestCase {
  func testShort206IsRetriedAndTheRetryGivesEveryByte() async throws {
    let data = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 13) }
    try await withFakeServer { server, client in
      let meta = server.store.put("f", data: data)
      server.injectFaults([.shortBody(100)], for: .media)
      let bytes = try await client.read("f", generation: meta.generation, range: 1000..<5000, reusing: nil)
        .array
      XCTAssertEqual(bytes.count, 4000)
      XCTAssertTrue(bytes == Array(data[1000..<5000]), "the bytes of the range")
      XCTAssertEqual(server.requests(.media).count, 2, "the short answer was retried once")
    }
  }

  func testPersistentlyShort206FailsUnavailable() async throws {
    let data = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 13) }
    try await withFakeServer(retry: .fast(deadline: 1)) { server, client in
      let meta = server.store.put("f", data: data)
      server.injectFaults(Array(repeating: .shortBody(100), count: 1000), for: .media)
      let error = await storageError {
        try await client.read("f", generation: meta.generation, range: 0..<4096, reusing: nil)
      }
      guard case .unavailable = error else {
        return XCTFail("expected unavailable, got \(String(describing: error))")
      }
      XCTAssertGreaterThan(server.requests(.media).count, 1)
    }
  }

  /// Fewer bytes than asked at the object's end is the end, not a short answer.
  func testTheObjectsEndIsNotShort() async throws {
    try await withFakeServer { server, client in
      let meta = server.store.put("f", data: Array(0..<100))
      let bytes = try await client.read("f", generation: meta.generation, range: 90..<200, reusing: nil).array
      XCTAssertEqual(bytes, Array(90..<100))
      XCTAssertEqual(server.requests(.media).count, 1)
    }
  }

  /// More bytes than asked, under a Content-Range that says so: only those asked for.
  func testA206WithMoreBytesThanAskedGivesTheRange() async throws {
    let data = (0..<200).map { UInt8($0) }
    try await withFakeServer { server, client in
      let meta = server.store.put("f", data: data)
      server.injectFaults(
        [
          .raw(
            .init(status: 206, headers: [("Content-Range", "bytes 50-89/200")], body: Array(data[50..<90])))
        ],
        for: .media)
      let bytes = try await client.read("f", generation: meta.generation, range: 50..<60, reusing: nil).array
      XCTAssertEqual(bytes, Array(data[50..<60]))
    }
  }

  /// A 206 without a usable Content-Range cannot tell a short answer from
  /// the object's end: it is no answer, never a short read.
  func testA206WithoutAUsableContentRangeIsInvalidResponse() async throws {
    let data = (0..<200).map { UInt8($0) }
    let contentRanges: [String?] = [
      nil, "bytes 50-59/-9223372036854775808", "bytes 50-59/55", "bytes 50-40/200", "bytes 50-59/lots",
      "bytes */200", "items 50-59/200",
    ]
    try await withFakeServer { server, client in
      let meta = server.store.put("f", data: data)
      for contentRange in contentRanges {
        server.injectFaults(
          [
            .raw(
              .init(status: 206, headers: contentRange.map { [("Content-Range", $0)] } ?? [], body: [50, 51]))
          ],
          for: .media)
        let error = await storageError {
          try await client.read("f", generation: meta.generation, range: 50..<60, reusing: nil)
        }
        guard case .invalidResponse = error else {
          return XCTFail(
            "\(contentRange ?? "none"): expected invalidResponse, got \(String(describing: error))")
        }
      }
    }
  }

  /// A Content-Length that lies about the media: longer (the connection
  /// then closes) or shorter than the bytes of the range; retried, and the
  /// retry gives exactly the range.
  func testALyingContentLengthOnMediaIsRetried() async throws {
    let data = (0..<200).map { UInt8($0) }
    try await withFakeServer { server, client in
      let meta = server.store.put("f", data: data)
      let range = [("Content-Range", "bytes 50-59/200")]
      server.injectFaults(
        [
          .raw(.init(status: 206, headers: range, body: Array(data[50..<60]), contentLength: "4096")),
          .raw(.init(status: 206, headers: range, body: Array(data[50..<60]), contentLength: "3")),
        ], for: .media)
      let bytes = try await client.read("f", generation: meta.generation, range: 50..<60, reusing: nil).array
      XCTAssertEqual(bytes, Array(data[50..<60]))
      XCTAssertEqual(server.requests(.media).count, 3)
    }
  }

  /// A 200 with the whole object for a ranged GET: the right slice for any
  /// offset, even far past range + 64 KiB, in one request.
  func testRangeIgnoredGivesTheRightBytesAtAnyOffset() async throws {
    let data = (0..<600_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) }
    try await withFakeServer { server, client in
      let meta = server.store.put("big", data: data)
      let ranges: [Range<Int64>] = [0..<10, 300_000..<300_100, 599_990..<600_000, 500_000..<700_000]
      for range in ranges {
        server.resetRequests()
        server.injectFaults([.ignoreRange], for: .media)
        let bytes = try await client.read("big", generation: meta.generation, range: range, reusing: nil)
          .array
        let upper = Int(min(range.upperBound, Int64(data.count)))
        XCTAssertEqual(bytes.count, upper - Int(range.lowerBound), "\(range)")
        XCTAssertTrue(bytes == Array(data[Int(range.lowerBound)..<upper]), "\(range)")
        XCTAssertEqual(server.requests(.media).count, 1, "\(range): one request, no retries")
      }
    }
  }
}

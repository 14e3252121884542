import CloudStorage
import Foundation
import NIOCore
import ObjectStore
import StorageFake
import XCTest

/// Small sizes so resumable uploads run in a few chunks: multipart up to
/// 512 KiB, 256 KiB chunks above.
let smallChunks = try! UploadPolicy(threshold: 512 << 10, chunkSize: 256 << 10)

/// Distinct bytes, so a misplaced or repeated chunk shows.
func pattern(_ count: Int, seed: Int = 1) -> [UInt8] {
  (0..<count).map { UInt8(truncatingIfNeeded: ($0 &* 31) ^ ($0 >> 8) &+ seed) }
}

/// An upload source over memory that records how it is read: the largest
/// single read, and how far reads ran ahead of what the server holds.
final class RecordingSource: UploadSource, @unchecked Sendable {
  let bytes: [UInt8]
  private let lock = NSLock()
  private var reads: [(offset: Int64, count: Int)] = []
  private var ahead: Int64 = 0
  /// Bytes the service holds so far, asked at each read.
  var held: @Sendable () -> Int64 = { 0 }
  /// What the source says its bytes sum to (a file summed as it was written).
  var crc32c: UInt32? = nil

  init(_ bytes: [UInt8]) { self.bytes = bytes }

  var size: Int64 { Int64(bytes.count) }

  func read(at offset: Int64, count: Int) throws -> ByteBuffer {
    let start = Int(offset)
    let end = min(start + count, bytes.count)
    let held = self.held()
    lock.withLock {
      reads.append((offset, end - start))
      ahead = max(ahead, Int64(end) - held)
    }
    return ByteBuffer(bytes: bytes[start..<end])
  }

  var largestRead: Int { lock.withLock { reads.map(\.count).max() ?? 0 } }
  var totalRead: Int { lock.withLock { reads.map(\.count).reduce(0, +) } }
  /// The most bytes ever read from the source but not yet held by the service.
  var mostAhead: Int64 { lock.withLock { ahead } }
}

/// The parts of a multipart upload body: the JSON metadata, the media's Content-Type and bytes.
func multipartParts(_ request: FakeStorageServer.RecordedRequest) throws -> (
  json: [String: Any], mediaType: String?, media: [UInt8]
) {
  let contentType = try XCTUnwrap(request.header("Content-Type"))
  let boundary = try XCTUnwrap(contentType.components(separatedBy: "boundary=").last)
  let text = String(decoding: request.body, as: UTF8.self)
  let parts = text.components(separatedBy: "--\(boundary)")
  XCTAssertEqual(parts.count, 4, "preamble, two parts, epilogue")
  XCTAssertTrue(parts[3].hasPrefix("--"), "a closing delimiter")
  func split(_ part: String) -> (headers: String, content: String) {
    let range = part.range(of: "\r\n\r\n")!
    var content = String(part[range.upperBound...])
    if content.hasSuffix("\r\n") { content.removeLast(1) }  // "\r\n" is one Character
    return (String(part[..<range.lowerBound]), content)
  }
  let metadata = split(parts[1])
  XCTAssertTrue(metadata.headers.lowercased().contains("content-type: application/json"))
  let json = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(metadata.content.utf8)) as? [String: Any])
  // The media part, as bytes: find it in the raw body.
  let raw = request.body
  let mediaHeaders = split(parts[2]).headers
  let mediaType = mediaHeaders.components(separatedBy: "\r\n").first {
    $0.lowercased().hasPrefix("content-type:")
  }
  .map { $0.dropFirst("content-type:".count).trimmingCharacters(in: .whitespaces) }
  let marker = Array("\r\n--\(boundary)\r\n".utf8)
  let secondStart = (0...(raw.count - marker.count)).filter { Array(raw[$0..<($0 + marker.count)]) == marker }
  let afterHeaders = try XCTUnwrap(
    (secondStart[0] + marker.count..<raw.count - 3).first {
      Array(raw[$0..<($0 + 4)]) == Array("\r\n\r\n".utf8)
    })
  let closing = Array("\r\n--\(boundary)--".utf8)
  let end = try XCTUnwrap(
    (0...(raw.count - closing.count)).last { Array(raw[$0..<($0 + closing.count)]) == closing })
  return (json, mediaType, Array(raw[(afterHeaders + 4)..<end]))
}

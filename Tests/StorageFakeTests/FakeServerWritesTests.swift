import Foundation
import ObjectStore
import StorageFake
import XCTest

/// The fake's write endpoints spoken to raw (curl), as the service answers:
/// multipart parsing, resumable sessions with 308 and Range, rewrite tokens,
/// delete, move.
final class FakeServerWritesTests: XCTestCase {
  var server: FakeStorageServer!
  var uploads: String { server.endpoint + "/upload/storage/v1/b/bkt/o" }
  var objects: String { server.endpoint + "/storage/v1/b/bkt/o" }

  override func setUp() async throws {
    server = FakeStorageServer(bucket: "bkt")
    try await server.start()
  }

  override func tearDown() async throws {
    try await server.stop()
    server = nil
  }

  func multipart(_ metadata: String, media: String, mediaType: String?) -> String {
    var body = "--XyZ\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n\(metadata)\r\n--XyZ\r\n"
    if let mediaType { body += "Content-Type: \(mediaType)\r\n" }
    return body + "\r\n\(media)\r\n--XyZ--\r\n"
  }

  func testMultipartTakesMetadataAndRefusesDisagreeingTypes() async throws {
    let headers = ["Content-Type: multipart/related; boundary=XyZ"]
    let good = try await curl(
      uploads + "?uploadType=multipart&ifGenerationMatch=0", method: "POST", headers: headers,
      body: multipart(
        #"{"name":"a/b","contentType":"text/plain","cacheControl":"no-cache","metadata":{"k":"v"}}"#,
        media: "hello",
        mediaType: "text/plain"))
    XCTAssertEqual(good.status, 200, good.text)
    XCTAssertEqual(good.json["name"] as? String, "a/b")
    XCTAssertEqual(server.store.data("a/b"), Array("hello".utf8))
    let meta = try XCTUnwrap(server.store.object("a/b"))
    XCTAssertEqual(meta.contentType, "text/plain")
    XCTAssertEqual(meta.cacheControl, "no-cache")
    XCTAssertEqual(meta.custom, ["k": "v"])

    let mismatch = try await curl(
      uploads + "?uploadType=multipart", method: "POST", headers: headers,
      body: multipart(#"{"name":"c","contentType":"text/plain"}"#, media: "x", mediaType: "image/png"))
    XCTAssertEqual(mismatch.status, 400, mismatch.text)
    XCTAssertNil(server.store.object("c"))

    let fromHeader = try await curl(
      uploads + "?uploadType=multipart", method: "POST", headers: headers,
      body: multipart(#"{"name":"d"}"#, media: "x", mediaType: "image/png"))
    XCTAssertEqual(fromHeader.status, 200, fromHeader.text)
    XCTAssertEqual(server.store.object("d")?.contentType, "image/png", "without a JSON type, the part's")

    let taken = try await curl(
      uploads + "?uploadType=multipart&ifGenerationMatch=0", method: "POST", headers: headers,
      body: multipart(#"{"name":"a/b"}"#, media: "again", mediaType: nil))
    XCTAssertEqual(taken.status, 412, taken.text)
    XCTAssertEqual(server.store.data("a/b"), Array("hello".utf8))
  }

  func testResumableSessionProtocol() async throws {
    let chunk = String(repeating: "a", count: 256 << 10)
    let size = (256 << 10) + 5
    let start = try await curl(
      uploads + "?uploadType=resumable&ifGenerationMatch=0", method: "POST",
      headers: ["Content-Type: application/json", "X-Upload-Content-Type: text/plain"], body: #"{"name":"r"}"#
    )
    XCTAssertEqual(start.status, 200, start.text)
    let session = try XCTUnwrap(start.header("Location"))
    XCTAssertTrue(session.contains("upload_id="), session)

    let empty = try await curl(session, method: "PUT", headers: ["Content-Range: bytes */\(size)"], body: "")
    XCTAssertEqual(empty.status, 308)
    XCTAssertNil(empty.header("Range"), "nothing held yet")

    let odd = try await curl(
      session, method: "PUT", headers: ["Content-Range: bytes 0-99/\(size)"],
      body: String(repeating: "a", count: 100))
    XCTAssertEqual(odd.status, 400, "a chunk but the last must be a multiple of 256 KiB")

    let first = try await curl(
      session, method: "PUT", headers: ["Content-Range: bytes 0-\((256 << 10) - 1)/\(size)"], body: chunk)
    XCTAssertEqual(first.status, 308, first.text)
    XCTAssertEqual(first.header("Range"), "bytes=0-\((256 << 10) - 1)")
    XCTAssertEqual(server.sessionBytes(for: "r"), 256 << 10)

    let gap = try await curl(
      session, method: "PUT", headers: ["Content-Range: bytes \((256 << 10) + 1)-\(size - 1)/\(size)"],
      body: "bcde")
    XCTAssertEqual(gap.status, 400, "a chunk past what the session holds")

    let asked = try await curl(session, method: "PUT", headers: ["Content-Range: bytes */\(size)"], body: "")
    XCTAssertEqual(asked.status, 308)
    XCTAssertEqual(asked.header("Range"), "bytes=0-\((256 << 10) - 1)")
    XCTAssertNil(server.store.object("r"), "nothing stored before the last byte")

    // Overlap with what is held is taken from where the session stands.
    let last = try await curl(
      session, method: "PUT", headers: ["Content-Range: bytes \((256 << 10) - 2)-\(size - 1)/\(size)"],
      body: "aa12345")
    XCTAssertEqual(last.status, 200, last.text)
    XCTAssertEqual(last.json["size"] as? String, String(size))
    XCTAssertEqual(server.store.data("r"), Array((chunk + "12345").utf8))
    XCTAssertEqual(server.store.object("r")?.contentType, "text/plain")

    let after = try await curl(session, method: "PUT", headers: ["Content-Range: bytes */\(size)"], body: "")
    XCTAssertEqual(after.status, 200, "a finished session answers with its object")

    let unknown = try await curl(
      uploads + "?uploadType=resumable&upload_id=nope", method: "PUT", headers: ["Content-Range: bytes */1"],
      body: "")
    XCTAssertEqual(unknown.status, 404)
  }

  func testResumablePreconditionAtStartAndAtTheEnd() async throws {
    server.store.put("r", data: [1])
    let refused = try await curl(
      uploads + "?uploadType=resumable&ifGenerationMatch=0", method: "POST",
      headers: ["Content-Type: application/json"],
      body: #"{"name":"r"}"#)
    XCTAssertEqual(refused.status, 412)

    let start = try await curl(
      uploads + "?uploadType=resumable&ifGenerationMatch=0", method: "POST",
      headers: ["Content-Type: application/json"],
      body: #"{"name":"s"}"#)
    let session = try XCTUnwrap(start.header("Location"))
    server.store.put("s", data: Array("theirs".utf8))
    let last = try await curl(session, method: "PUT", headers: ["Content-Range: bytes 0-2/3"], body: "abc")
    XCTAssertEqual(last.status, 412)
    XCTAssertEqual(server.store.data("s"), Array("theirs".utf8))
  }

  func testRewriteTokensDeleteAndMove() async throws {
    server.rewriteBytesPerCall = 4
    let source = server.store.put("a", data: Array("0123456789".utf8), contentType: "text/plain")
    var token: String?
    var calls = 0
    var answer: CurlResult
    repeat {
      calls += 1
      var url = objects + "/a/rewriteTo/b/bkt/o/b?sourceGeneration=\(source.generation)&ifGenerationMatch=0"
      if let token { url += "&rewriteToken=" + encodeName(token) }
      answer = try await curl(url, method: "POST", body: "")
      XCTAssertEqual(answer.status, 200, answer.text)
      XCTAssertEqual(answer.json["kind"] as? String, "storage#rewriteResponse")
      token = answer.json["rewriteToken"] as? String
    } while answer.json["done"] as? Bool == false
    XCTAssertEqual(calls, 3)
    XCTAssertEqual((answer.json["resource"] as? [String: Any])?["name"] as? String, "b")
    XCTAssertEqual(server.store.data("b"), Array("0123456789".utf8))
    XCTAssertEqual(server.store.object("b")?.contentType, "text/plain")

    let stale = try await curl(objects + "/b?ifGenerationMatch=1", method: "DELETE")
    XCTAssertEqual(stale.status, 412)
    let gone = try await curl(objects + "/b", method: "DELETE")
    XCTAssertEqual(gone.status, 204)
    XCTAssertNil(server.store.object("b"))
    let missing = try await curl(objects + "/b", method: "DELETE")
    XCTAssertEqual(missing.status, 404)

    let moved = try await curl(
      objects + "/a/moveTo/o/c%2Fd?ifSourceGenerationMatch=\(source.generation)&ifGenerationMatch=0",
      method: "POST",
      headers: ["Content-Type: application/json"], body: "{}")
    XCTAssertEqual(moved.status, 200, moved.text)
    XCTAssertEqual(moved.json["name"] as? String, "c/d")
    XCTAssertEqual(server.store.names, ["c/d"])

    server.store.supportsMove = false
    let refused = try await curl(
      objects + "/c%2Fd/moveTo/o/e", method: "POST", headers: ["Content-Type: application/json"], body: "{}")
    XCTAssertEqual(refused.status, 400, refused.text)
    XCTAssertEqual(server.store.names, ["c/d"])
    XCTAssertEqual(
      server.requests.map(\.kind), [.rewrite, .rewrite, .rewrite, .delete, .delete, .delete, .move, .move])
  }
}

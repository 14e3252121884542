import Foundation
import ObjectStore
import StorageFake
import XCTest

/// The fake's compose spoken to raw (curl), with the service's rules: at most
/// 32 sources, each present at its generation, the sources' and the
/// destination's preconditions, and a result with a crc32c, a componentCount
/// and no md5Hash.
final class FakeServerComposeTests: XCTestCase {
  var server: FakeStorageServer!
  var objects: String { server.endpoint + "/storage/v1/b/bkt/o" }
  let json = ["Content-Type: application/json"]

  override func setUp() async throws {
    server = FakeStorageServer(bucket: "bkt")
    try await server.start()
  }

  override func tearDown() async throws {
    try await server.stop()
    server = nil
  }

  func compose(_ destination: String, _ sources: [String], query: String = "", destinationJSON: String? = nil)
    async throws -> CurlResult
  {
    let body =
      #"{"sourceObjects":["# + sources.joined(separator: ",") + "]"
      + (destinationJSON.map { #","destination":"# + $0 } ?? "") + "}"
    return try await curl(
      objects + "/" + destination + "/compose" + query, method: "POST", headers: json, body: body)
  }

  func testComposeConcatenatesWithCRCAndNoMD5() async throws {
    let a = server.store.put("p/a", data: Array("hello ".utf8))
    server.store.put("p/b", data: Array("world".utf8))
    let answer = try await compose(
      "out%2Fx", [#"{"name":"p/a","generation":"\#(a.generation)"}"#, #"{"name":"p/b"}"#],
      query: "?ifGenerationMatch=0",
      destinationJSON: #"{"contentType":"text/plain","cacheControl":"no-cache","metadata":{"k":"v"}}"#)
    XCTAssertEqual(answer.status, 200, answer.text)
    XCTAssertEqual(server.store.data("out/x"), Array("hello world".utf8))
    XCTAssertNil(answer.json["md5Hash"])
    XCTAssertEqual(answer.json["componentCount"] as? Int, 2)
    XCTAssertEqual(
      answer.json["crc32c"] as? String, server.store.put("ref", data: Array("hello world".utf8)).crc32c)
    let meta = try XCTUnwrap(server.store.object("out/x"))
    XCTAssertNil(meta.md5Hash)
    XCTAssertEqual(meta.contentType, "text/plain")
    XCTAssertEqual(meta.cacheControl, "no-cache")
    XCTAssertEqual(meta.custom, ["k": "v"])
    // A composite of composites counts every component; ranged reads of it work.
    let again = try await compose("y", [#"{"name":"out/x"}"#, #"{"name":"p/a"}"#])
    XCTAssertEqual(again.json["componentCount"] as? Int, 3)
    let range = try await curl(objects + "/y?alt=media", headers: ["Range: bytes=6-10"])
    XCTAssertEqual(range.status, 206)
    XCTAssertEqual(range.text, "world")
    XCTAssertEqual(server.requests(.compose).count, 2)
  }

  func testSourceRules() async throws {
    let a = server.store.put("a", data: [1])
    let missing = try await compose("d", [#"{"name":"a"}"#, #"{"name":"nope"}"#])
    XCTAssertEqual(missing.status, 404, missing.text)
    let stale = try await compose("d", [#"{"name":"a","generation":"\#(a.generation + 1)"}"#])
    XCTAssertEqual(stale.status, 404, "a generation that is not live")
    let unmet = try await compose("d", [#"{"name":"a","objectPreconditions":{"ifGenerationMatch":"1"}}"#])
    XCTAssertEqual(unmet.status, 412, unmet.text)
    let met = try await compose(
      "d", [#"{"name":"a","objectPreconditions":{"ifGenerationMatch":"\#(a.generation)"}}"#])
    XCTAssertEqual(met.status, 200, met.text)
    let tooMany = try await compose("e", Array(repeating: #"{"name":"a"}"#, count: 33))
    XCTAssertEqual(tooMany.status, 400, "at most 32 sources")
    let none = try await compose("e", [])
    XCTAssertEqual(none.status, 400)
    let thirtyTwo = try await compose("e", Array(repeating: #"{"name":"a"}"#, count: 32))
    XCTAssertEqual(thirtyTwo.status, 200, thirtyTwo.text)
    XCTAssertEqual(server.store.object("e")?.size, 32)
  }

  func testDestinationPreconditions() async throws {
    server.store.put("a", data: [1])
    let live = server.store.put("d", data: [9])
    let taken = try await compose("d", [#"{"name":"a"}"#], query: "?ifGenerationMatch=0")
    XCTAssertEqual(taken.status, 412)
    let wrongMeta = try await compose(
      "d", [#"{"name":"a"}"#], query: "?ifGenerationMatch=\(live.generation)&ifMetagenerationMatch=2")
    XCTAssertEqual(wrongMeta.status, 412)
    XCTAssertEqual(server.store.data("d"), [9], "nothing changed")
    let ok = try await compose(
      "d", [#"{"name":"a"}"#], query: "?ifGenerationMatch=\(live.generation)&ifMetagenerationMatch=1")
    XCTAssertEqual(ok.status, 200, ok.text)
    XCTAssertEqual(server.store.data("d"), [1])
  }
}

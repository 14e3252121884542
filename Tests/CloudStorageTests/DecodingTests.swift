import Foundation
import NIOCore
import ObjectStore
import StorageFake
import Synchronization
import XCTest

@testable import CloudStorage

/// How object resources and list pages are decoded.
final class DecodingTests: XCTestCase {
  func testMetadataFromTheFakeMatchesTheModel() async throws {
    try await withFakeServer { server, client in
      let stored = server.store.put(
        "docs/report.pdf", data: Array(repeating: 7, count: 1234), contentType: "application/pdf",
        cacheControl: "no-cache", contentDisposition: "attachment", contentEncoding: "identity",
        contentLanguage: "en", custom: ["owner": "ana", "ключ": "значение", "empty": ""])
      let meta = try await client.metadata(of: "docs/report.pdf")
      // The fake sends int64 fields as JSON strings, as the service does.
      XCTAssertEqual(meta.size, 1234)
      XCTAssertEqual(meta.generation, stored.generation)
      XCTAssertGreaterThan(meta.generation, Int64(Int32.max), "generations need 64 bits")
      XCTAssertEqual(meta.metageneration, 1)
      XCTAssertEqual(meta.bucket, "bkt")
      XCTAssertEqual(meta.timeCreated, stored.timeCreated)
      XCTAssertEqual(meta.updated, stored.updated)
      XCTAssertEqual(meta.md5Hash, stored.md5Hash)
      XCTAssertEqual(meta.crc32c, stored.crc32c)
      XCTAssertEqual(meta.etag, stored.etag)
      XCTAssertEqual(meta.storageClass, "STANDARD")
      XCTAssertEqual(meta.contentType, "application/pdf")
      XCTAssertEqual(meta.cacheControl, "no-cache")
      XCTAssertEqual(meta.contentDisposition, "attachment")
      XCTAssertEqual(meta.contentEncoding, "identity")
      XCTAssertEqual(meta.contentLanguage, "en")
      XCTAssertEqual(meta.custom, ["owner": "ana", "ключ": "значение", "empty": ""])
      XCTAssertEqual(meta, stored)
    }
  }

  func testUnsetPropertiesAreNil() async throws {
    try await withFakeServer { server, client in
      server.store.put("bare", data: [])
      let meta = try await client.metadata(of: "bare")
      XCTAssertEqual(meta.size, 0)
      XCTAssertNil(meta.contentType)
      XCTAssertNil(meta.cacheControl)
      XCTAssertNil(meta.contentDisposition)
      XCTAssertNil(meta.contentEncoding)
      XCTAssertNil(meta.contentLanguage)
      XCTAssertEqual(meta.custom, [:])
    }
  }

  func testListItemsDecodeLikeMetadata() async throws {
    try await withFakeServer { server, client in
      let stored = server.store.put("d/x", data: [1, 2, 3], contentType: "text/plain", custom: ["k": "v"])
      let page = try await client.list(ListRequest(prefix: "d/", delimiter: "/", pageSize: 100))
      XCTAssertEqual(page.items, [stored])
      XCTAssertNil(page.nextPageToken)
    }
  }

  /// The service sends int64 as strings, but numbers are accepted too; absent, empty and null
  /// properties are all "unset".
  func testLenientDecodingOfHandWrittenResources() async throws {
    let object = """
      {"kind":"storage#object","name":"n","bucket":"bkt","size":42,"generation":1700000000000001,
       "metageneration":"3","timeCreated":"2024-05-01T12:34:56.789Z","updated":"2024-05-02T00:00:00.000Z",
       "contentType":"","cacheControl":null,"contentLanguage":"fr",
       "metadata":{"a":"1","gone":null,"":"empty key"}}
      """
    try await withCannedServer(handler: { _ in .json(200, object) }) { _, client in
      let meta = try await client.metadata(of: "n")
      XCTAssertEqual(meta.size, 42)
      XCTAssertEqual(meta.generation, 1_700_000_000_000_001)
      XCTAssertEqual(meta.metageneration, 3)
      XCTAssertEqual(meta.timeCreated, "2024-05-01T12:34:56.789Z")
      XCTAssertEqual(meta.updated, "2024-05-02T00:00:00.000Z")
      XCTAssertNil(meta.contentType, "an empty property is unset")
      XCTAssertNil(meta.cacheControl, "a null property is unset")
      XCTAssertNil(meta.md5Hash)
      XCTAssertNil(meta.etag)
      XCTAssertEqual(meta.contentLanguage, "fr")
      XCTAssertEqual(meta.custom, ["a": "1", "": "empty key"])
    }
  }

  func testListPageWithEmptyNextPageTokenAndNoItems() async throws {
    let body = #"{"kind":"storage#objects","prefixes":["p/a/","p/b/"],"nextPageToken":""}"#
    try await withCannedServer(handler: { _ in .json(200, body) }) { _, client in
      let page = try await client.list(ListRequest(prefix: "p/", delimiter: "/", pageSize: 10))
      XCTAssertEqual(page.items, [])
      XCTAssertEqual(page.prefixes, ["p/a/", "p/b/"])
      XCTAssertNil(page.nextPageToken, "an empty token means the end")
    }
  }

  /// The token goes to the caller before the page is decoded, and only the
  /// top-level one: keys of that name inside items are not it.
  func testNextPageTokenIsHandedOverBeforeThePageIsDecoded() async throws {
    let item =
      #"{"name":"p/a","bucket":"bkt","generation":"1","metageneration":"1","size":"1","#
      + #""metadata":{"nextPageToken":"inside","odd \"key\" {":"}"}}"#
    let tokenLast = #"{"kind":"storage#objects","items":["# + item + #"],"nextPageToken":"real-token"}"#
    let tokenFirst = #"{"nextPageToken":"first-token", "items":["# + item + "]}"
    for (body, token) in [(tokenLast, "real-token"), (tokenFirst, "first-token")] {
      try await withCannedServer(handler: { _ in .json(200, body) }) { _, client in
        let events = Events()
        let page = try await client.list(
          ListRequest(
            prefix: "p/", delimiter: "/", pageSize: 10, onNextPageToken: { events.add("token \($0)") }))
        events.add("page \(page.nextPageToken ?? "-") \(page.items.map(\.name))")
        XCTAssertEqual(events.all, ["token \(token)", "page \(token) [\"p/a\"]"])
      }
    }
  }

  /// A token that leads the answer (the service's documented order) is
  /// handed over from the first bytes, before the rest of the page arrives:
  /// here the rest is held back until the token's taker lets it go.
  func testALeadingTokenIsHandedOverBeforeThePageArrives() async throws {
    let items = (0..<200).map {
      #"{"name":"p/f\#($0)","bucket":"bkt","generation":"1","metageneration":"1","size":"1"}"#
    }
    let body =
      #"{"kind":"storage#objects","nextPageToken":"next","items":["# + items.joined(separator: ",") + "]}"
    let gate = CannedHTTPServer.Gate()
    var held = CannedHTTPServer.Response.json(200, body)
    held.gate = (gate, 64)
    let response = held
    try await withCannedServer(handler: { _ in response }) { _, client in
      let events = Events()
      let page = try await client.list(
        ListRequest(
          prefix: "p/", delimiter: "/", pageSize: 1000,
          onNextPageToken: {
            events.add("token \($0)")
            gate.open()
          }))
      events.add("page of \(page.items.count)")
      XCTAssertEqual(events.all, ["token next", "page of 200"])
      XCTAssertFalse(gate.wasTimedOut, "the token waited for the whole page")
    }
  }

  func testLeadingTokenScan() {
    func scan(_ text: String) -> ObjectList.LeadingToken {
      ObjectList.leadingNextPageToken(in: ByteBuffer(string: text))
    }
    XCTAssertEqual(scan(#"{"kind":"storage#objects","nextPageToken":"t","items":[{"#), .found("t"))
    XCTAssertEqual(scan(#"{"kind":"storage#objects","nextPageToken":null,"#), .found(nil))
    XCTAssertEqual(scan(#"{"kind":"storage#objects","nextPageTo"#), .incomplete)
    XCTAssertEqual(
      scan(#"{"kind":"storage#objects","nextPageToken":"t"#), .incomplete, "cut inside the token")
    XCTAssertEqual(scan(#"{"kind":"storage#objects","items":[],"nextPageToken":"t"}"#), .notFirst)
    XCTAssertEqual(scan(#"{"prefixes":["a/"],"nextPageToken":"t"}"#), .notFirst)
    XCTAssertEqual(scan(#"{"kind":"storage#objects"}"#), .notFirst, "a whole answer without one")
    XCTAssertEqual(scan("<html>"), .incomplete, "not JSON: left to the decode, which fails")
  }

  func testNoTokenIsHandedOverForALastOrBrokenPage() async throws {
    let bodies = [
      #"{"kind":"storage#objects","prefixes":["p/a/"]}"#,
      #"{"kind":"storage#objects","prefixes":["p/a/"],"nextPageToken":""}"#,
      #"{"kind":"storage#objects","nextPageToken":null}"#,
    ]
    for body in bodies {
      try await withCannedServer(handler: { _ in .json(200, body) }) { _, client in
        let events = Events()
        let page = try await client.list(
          ListRequest(prefix: "p/", delimiter: "/", pageSize: 10, onNextPageToken: { events.add($0) }))
        XCTAssertNil(page.nextPageToken)
        XCTAssertEqual(events.all, [], body)
      }
    }
    // Truncated before the token: nothing handed over, and the page fails.
    let broken = #"{"kind":"storage#objects","items":[{"name":"p/a"#
    try await withCannedServer(handler: { _ in .json(200, broken) }) { _, client in
      let events = Events()
      let error = await storageError {
        try await client.list(
          ListRequest(prefix: "p/", delimiter: "/", pageSize: 10, onNextPageToken: { events.add($0) }))
      }
      guard case .invalidResponse = error else {
        return XCTFail("expected invalidResponse, got \(String(describing: error))")
      }
      XCTAssertEqual(events.all, [])
    }
  }

  /// A page whose next token is the token it was asked with would be
  /// listed forever: no answer, and the token is not handed over.
  func testAPageNamingItsOwnTokenAsTheNextIsInvalidResponse() async throws {
    try await withFakeServer { server, client in
      server.store.put("p/a", data: [1])
      let body = #"{"prefixes":["p/b/"],"nextPageToken":"again"}"#
      server.injectFaults([.raw(.json(body)), .raw(.json(body))], for: .list)
      let events = Events()
      let error = await storageError {
        try await client.list(
          ListRequest(
            prefix: "p/", delimiter: "/", pageSize: 10, pageToken: "again",
            onNextPageToken: { events.add($0) }))
      }
      guard case .invalidResponse = error else {
        return XCTFail("expected invalidResponse, got \(String(describing: error))")
      }
      XCTAssertEqual(events.all, [])
      // Asked with another token, the same answer is a page like any other.
      let page = try await client.list(
        ListRequest(prefix: "p/", delimiter: "/", pageSize: 10, pageToken: "first"))
      XCTAssertEqual(page.nextPageToken, "again")
    }
  }

  func testEmptyListPage() async throws {
    try await withFakeServer { _, client in
      let page = try await client.list(ListRequest(prefix: "nothing/", delimiter: "/", pageSize: 10))
      XCTAssertEqual(page, ListPage(items: [], prefixes: [], nextPageToken: nil))
    }
  }
}

/// What a callback saw, in order.
final class Events: Sendable {
  private let seen = Mutex<[String]>([])
  func add(_ event: String) { seen.withLock { $0.append(event) } }
  var all: [String] { seen.withLock { $0 } }
}

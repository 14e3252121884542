import CloudStorage
import Foundation
import ObjectStore
import StorageFake
import XCTest

/// What the client puts on the wire: paths, query parameters and their encoding.
final class RequestShapeTests: XCTestCase {
  func testListSendsPrefixDelimiterMaxResultsAndFields() async throws {
    try await withFakeServer { server, client in
      server.store.put("dir/a", data: [1])
      _ = try await client.list(ListRequest(prefix: "dir/", delimiter: "/", pageSize: 7))

      let requests = server.requests(.list)
      XCTAssertEqual(requests.count, 1)
      let request = try XCTUnwrap(requests.first)
      XCTAssertEqual(request.method, "GET")
      XCTAssertEqual(request.path, "/storage/v1/b/bkt/o")
      XCTAssertEqual(request.query["prefix"], "dir/")
      XCTAssertEqual(request.query["delimiter"], "/")
      XCTAssertEqual(request.query["maxResults"], "7")
      XCTAssertNil(request.query["pageToken"], "no pageToken on a first page")
      let fields = try XCTUnwrap(request.query["fields"])
      XCTAssertTrue(fields.contains("nextPageToken"), fields)
      XCTAssertTrue(fields.contains("prefixes"), fields)
      XCTAssertTrue(fields.contains("items("), fields)
      for field in ["name", "size", "generation", "metageneration", "metadata", "contentType", "updated"] {
        XCTAssertTrue(fields.contains(field), "fields= lacks \(field): \(fields)")
      }
      XCTAssertNotNil(request.header("User-Agent"))
      XCTAssertNil(request.header("Authorization"), "anonymous client sends no token")
    }
  }

  func testListAsksForTrailingDelimiterItemsOnlyWhenTold() async throws {
    try await withFakeServer { server, client in
      server.store.put("d/s/", data: [], custom: ["goog-reserved-posix-mode": "700"])
      server.store.put("d/s/f", data: [1])
      let page = try await client.list(
        ListRequest(
          prefix: "d/", delimiter: "/", includeTrailingDelimiter: true, pageSize: 10))
      XCTAssertEqual(page.prefixes, ["d/s/"])
      XCTAssertEqual(page.items.map(\.name), ["d/s/"])
      XCTAssertEqual(page.items.first?.custom["goog-reserved-posix-mode"], "700", "fields= keeps metadata")
      _ = try await client.list(ListRequest(prefix: "d/", delimiter: "/", pageSize: 10))
      // Without a delimiter it would mean nothing: not sent.
      _ = try await client.list(
        ListRequest(
          prefix: "d/", includeTrailingDelimiter: true, pageSize: 10))
      XCTAssertEqual(
        server.requests(.list).map { $0.query["includeTrailingDelimiter"] }, ["true", nil, nil])
    }
  }

  func testListWithoutDelimiterOmitsIt() async throws {
    try await withFakeServer { server, client in
      server.store.put("d/a/b", data: [1])
      let page = try await client.list(ListRequest(prefix: "d/", pageSize: 10))
      XCTAssertEqual(page.items.map(\.name), ["d/a/b"])
      XCTAssertEqual(page.prefixes, [])
      XCTAssertNil(server.requests(.list).first?.query["delimiter"])
    }
  }

  func testListSendsPageTokenWhenGiven() async throws {
    try await withFakeServer { server, client in
      for name in ["p/1", "p/2", "p/3"] { server.store.put(name, data: []) }
      let first = try await client.list(ListRequest(prefix: "p/", delimiter: "/", pageSize: 1))
      let token = try XCTUnwrap(first.nextPageToken)
      let second = try await client.list(
        ListRequest(prefix: "p/", delimiter: "/", pageSize: 1, pageToken: token))
      XCTAssertEqual(first.items.map(\.name), ["p/1"])
      XCTAssertEqual(second.items.map(\.name), ["p/2"])
      let requests = server.requests(.list)
      XCTAssertEqual(requests.count, 2)
      XCTAssertNil(requests[0].query["pageToken"])
      XCTAssertEqual(requests[1].query["pageToken"], token, "the token travels verbatim")
    }
  }

  /// A directory paged two entries at a time: every entry exactly once, in the service's order,
  /// with one request per page and no extra one after the last.
  func testPagingThroughADirectoryWithATinyPageSize() async throws {
    try await withFakeServer { server, client in
      let files = ["dir/a", "dir/b.txt", "dir/c", "dir/z z", "dir/ä", "dir/Ω", "dir/~tilde"]
      let subdirs = ["dir/m/x", "dir/m/y", "dir/q/deep/er", "dir/sub/1"]
      let outside = ["dir", "dir0", "other/dir/a", "a"]
      for name in files + subdirs + outside { server.store.put(name, data: Array(name.utf8)) }
      // The service's order: items and prefixes merged, compared as UTF-8 bytes.
      let expected = (files + ["dir/m/", "dir/q/", "dir/sub/"]).sorted {
        Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8))
      }

      var seen: [String] = []
      var token: String?
      var pages = 0
      repeat {
        let page = try await client.list(
          ListRequest(prefix: "dir/", delimiter: "/", pageSize: 2, pageToken: token))
        pages += 1
        XCTAssertLessThanOrEqual(page.items.count + page.prefixes.count, 2)
        // Within a page, merge items and prefixes back into byte order.
        let entries = (page.items.map(\.name) + page.prefixes).sorted {
          Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8))
        }
        seen += entries
        token = page.nextPageToken
        XCTAssertLessThan(pages, 50, "paging does not end")
      } while token != nil && pages < 50

      XCTAssertEqual(seen, expected)
      XCTAssertEqual(Set(seen).count, seen.count, "an entry came back twice")
      XCTAssertEqual(pages, (expected.count + 1) / 2)
      XCTAssertEqual(server.requests(.list).count, pages)
    }
  }

  /// Names with characters that mean something in a URL are one encoded path segment.
  func testAwkwardObjectNamesRoundTripThroughMetadataAndReads() async throws {
    let names = [
      "with space", "ünïcødé/ファイル", "100%", "100%25", "a+b", "what?x=1", "#fragment", "dir/sub/file",
      "all: %2F+?#&=;@$,[]'\"\\", "trailing/", " leading", "tab\tand\nnewline", "emoji 😀",
    ]
    try await withFakeServer { server, client in
      for name in names { server.store.put(name, data: Array("data of \(name)".utf8)) }
      for name in names {
        let meta = try await client.metadata(of: name)
        XCTAssertEqual(meta.name, name)
        let expected = Array("data of \(name)".utf8)
        XCTAssertEqual(meta.size, Int64(expected.count))
        let bytes = try await client.read(
          name, generation: meta.generation, range: 3..<Int64(expected.count), reusing: nil
        )
        .array
        XCTAssertEqual(bytes, Array(expected[3...]), name)
      }
      let objectRequests = server.requests.filter { $0.kind == .metadata || $0.kind == .media }
      XCTAssertEqual(objectRequests.count, names.count * 2)
      for request in objectRequests {
        let name = try XCTUnwrap(request.objectName)
        // The fake decodes the path without treating `+` as a space; the name must survive.
        XCTAssertTrue(names.contains(name), "server saw \(name.debugDescription)")
        XCTAssertEqual(request.path, "/storage/v1/b/bkt/o/" + rfc3986Encoded(name))
      }
    }
  }

  func testPrefixWithReservedCharactersIsEncodedAsAQueryValue() async throws {
    let prefix = "a+b & c=d?#%/ü/"
    try await withFakeServer { server, client in
      server.store.put(prefix + "file", data: [1])
      server.store.put("a b & c=d?#%/ü/file", data: [2])  // what a `+` decoded as a space would hit
      let page = try await client.list(ListRequest(prefix: prefix, delimiter: "/", pageSize: 10))
      XCTAssertEqual(page.items.map(\.name), [prefix + "file"])
      XCTAssertEqual(server.requests(.list).first?.query["prefix"], prefix)
    }
  }

  func testMetadataAndReadQueryParameters() async throws {
    try await withFakeServer { server, client in
      let meta = server.store.put("f", data: Array(0..<100))
      _ = try await client.metadata(of: "f")
      _ = try await client.read("f", generation: meta.generation, range: 10..<20, reusing: nil)
      let get = try XCTUnwrap(server.requests(.metadata).first)
      XCTAssertEqual(get.method, "GET")
      XCTAssertNotNil(get.query["fields"])
      XCTAssertNil(get.query["alt"])
      let media = try XCTUnwrap(server.requests(.media).first)
      XCTAssertEqual(media.query["alt"], "media")
      XCTAssertEqual(media.query["generation"], String(meta.generation))
      XCTAssertEqual(media.header("Range"), "bytes=10-19")
    }
  }

  func testEmptyRangeSendsNothing() async throws {
    try await withFakeServer { server, client in
      let meta = server.store.put("f", data: [1, 2, 3])
      let bytes = try await client.read("f", generation: meta.generation, range: 2..<2, reusing: nil).array
      XCTAssertEqual(bytes, [])
      XCTAssertEqual(server.requests.count, 0)
    }
  }
}

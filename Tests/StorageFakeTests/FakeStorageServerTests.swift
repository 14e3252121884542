import Foundation
import ObjectStore
import StorageFake
import XCTest

/// The answer to one curl invocation.
struct CurlResult {
  var exitCode: Int32
  var status: Int
  var headers: [(String, String)]
  var body: [UInt8]
  var text: String { String(decoding: body, as: UTF8.self) }

  func header(_ name: String) -> String? {
    headers.first { $0.0.lowercased() == name.lowercased() }?.1
  }

  func headerValues(_ name: String) -> [String] {
    headers.filter { $0.0.lowercased() == name.lowercased() }.map(\.1)
  }

  /// The body as a JSON object.
  var json: [String: Any] {
    (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:]
  }
}

/// Runs /usr/bin/curl off the cooperative pool and parses `-i` output.
func curl(
  _ url: String, method: String = "GET", headers: [String] = [], body: String? = nil, maxTime: Double = 10,
  extraURLs: [String] = []
) async throws -> CurlResult {
  try await withCheckedThrowingContinuation { continuation in
    DispatchQueue.global().async {
      let process = Process()
      process.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
      var arguments = ["-s", "-i", "-X", method, "--max-time", String(maxTime), "-H", "Expect:"]
      for header in headers { arguments += ["-H", header] }
      if body != nil { arguments += ["--data-binary", "@-"] }
      arguments.append(url)
      arguments += extraURLs
      process.arguments = arguments
      let output = Pipe()
      let input = Pipe()
      process.standardOutput = output
      process.standardInput = input
      do {
        try process.run()
        input.fileHandleForWriting.write(Data((body ?? "").utf8))
        try? input.fileHandleForWriting.close()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        continuation.resume(returning: parseCurl([UInt8](data), exitCode: process.terminationStatus))
      } catch {
        continuation.resume(throwing: error)
      }
    }
  }
}

private func parseCurl(_ raw: [UInt8], exitCode: Int32) -> CurlResult {
  let separator: [UInt8] = [13, 10, 13, 10]
  var headEnd = raw.count
  var i = 0
  while i + 4 <= raw.count {
    if Array(raw[i..<(i + 4)]) == separator {
      headEnd = i
      break
    }
    i += 1
  }
  let head = String(decoding: raw[0..<headEnd], as: UTF8.self)
  let body = headEnd + 4 <= raw.count ? Array(raw[(headEnd + 4)...]) : []
  var lines = head.components(separatedBy: "\r\n")
  let statusLine = lines.isEmpty ? "" : lines.removeFirst()
  let parts = statusLine.split(separator: " ")
  let status = parts.count > 1 ? Int(parts[1]) ?? 0 : 0
  let headers = lines.compactMap { line -> (String, String)? in
    guard let colon = line.firstIndex(of: ":") else { return nil }
    return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
  }
  return CurlResult(exitCode: exitCode, status: status, headers: headers, body: body)
}

/// Percent-encodes every byte outside the unreserved set, as clients do for object names.
func encodeName(_ name: String) -> String {
  var out = ""
  for byte in name.utf8 {
    if (byte >= 0x41 && byte <= 0x5a) || (byte >= 0x61 && byte <= 0x7a) || (byte >= 0x30 && byte <= 0x39)
      || byte == 0x2d || byte == 0x2e || byte == 0x5f || byte == 0x7e
    {
      out.unicodeScalars.append(Unicode.Scalar(byte))
    } else {
      out += String(format: "%%%02X", byte)
    }
  }
  return out
}

final class FakeStorageServerTests: XCTestCase {
  var server: FakeStorageServer!
  var store: InMemoryObjectStore { server.store }
  var base: String { server.endpoint + "/storage/v1/b/bkt" }

  override func setUp() async throws {
    server = FakeStorageServer(bucket: "bkt")
    for name in ["d/e", "c", "d/b/2", "d/", "d/d/x", "d/a", "e/z", "d/b/1", "d/c", "d/f/"] {
      server.store.put(name, data: Array(name.utf8))
    }
    try await server.start()
  }

  override func tearDown() async throws {
    try await server.stop()
    server = nil
  }

  func testListJSONShapeAndPaging() async throws {
    XCTAssertGreaterThan(server.port, 0)
    var names: [[String]] = []
    var token: String?
    repeat {
      var url =
        base + "/o?prefix=d%2F&delimiter=%2F&maxResults=2&fields=items(name,size),prefixes,nextPageToken"
      if let token { url += "&pageToken=" + encodeName(token) }
      let result = try await curl(url)
      XCTAssertEqual(result.status, 200, result.text)
      XCTAssertEqual(result.header("Content-Type"), "application/json; charset=UTF-8")
      let json = result.json
      XCTAssertEqual(json["kind"] as? String, "storage#objects")
      let items = json["items"] as? [[String: Any]]
      let prefixes = json["prefixes"] as? [String]
      // Empty arrays are omitted, like the service does.
      XCTAssertTrue(items.map { !$0.isEmpty } ?? true)
      XCTAssertTrue(prefixes.map { !$0.isEmpty } ?? true)
      for item in items ?? [] {
        XCTAssertTrue(item["size"] is String, "size must be a JSON string")
        XCTAssertTrue(item["generation"] is String)
        XCTAssertTrue(item["metageneration"] is String)
        XCTAssertEqual(item["bucket"] as? String, "bkt")
        XCTAssertEqual(item["storageClass"] as? String, "STANDARD")
        XCTAssertNotNil(item["md5Hash"] as? String)
        XCTAssertNotNil(item["crc32c"] as? String)
        XCTAssertNil(item["metadata"], "no custom metadata: no map")
      }
      let itemNames: [String] = (items ?? []).map { $0["name"] as? String ?? "?" }
      let prefixNames: [String] = (prefixes ?? []).map { "P:" + $0 }
      names.append(itemNames + prefixNames)
      token = json["nextPageToken"] as? String
    } while token != nil && names.count < 10
    XCTAssertEqual(names, [["d/", "d/a"], ["d/c", "P:d/b/"], ["d/e", "P:d/d/"], ["P:d/f/"]])
    let lists = server.requests(.list)
    XCTAssertEqual(lists.count, 4)
    XCTAssertEqual(lists[0].query["fields"], "items(name,size),prefixes,nextPageToken")
    XCTAssertEqual(lists[0].query["prefix"], "d/")
    XCTAssertEqual(store.calls(.list).count, 4)
  }

  func testObjectMetadataWithAwkwardNames() async throws {
    let name = "dir/hello wörld 100%+?#.txt"
    store.put(name, data: [1, 2, 3], contentType: "text/plain", custom: ["k": "v \"quoted\""])
    let result = try await curl(base + "/o/" + encodeName(name))
    XCTAssertEqual(result.status, 200, result.text)
    XCTAssertEqual(result.json["name"] as? String, name)
    XCTAssertEqual(result.json["size"] as? String, "3")
    XCTAssertEqual(result.json["contentType"] as? String, "text/plain")
    XCTAssertEqual(result.json["metadata"] as? [String: String], ["k": "v \"quoted\""])
    XCTAssertNil(result.json["cacheControl"])
    XCTAssertEqual(server.requests.last?.objectName, name)

    let generation = store.object(name)!.generation
    let exact = try await curl(base + "/o/" + encodeName(name) + "?generation=\(generation)")
    XCTAssertEqual(exact.status, 200)
    let older = try await curl(base + "/o/" + encodeName(name) + "?generation=\(generation - 1)")
    XCTAssertEqual(older.status, 404)

    // Two requests on one keep-alive connection.
    let twice = try await curl(base + "/o/c", extraURLs: [base + "/o/d%2F"])
    XCTAssertEqual(twice.exitCode, 0)
    XCTAssertEqual(twice.status, 200)

    let missing = try await curl(base + "/o/" + encodeName("no such"))
    XCTAssertEqual(missing.status, 404)
    let errorBody = missing.json["error"] as? [String: Any]
    XCTAssertEqual(errorBody?["code"] as? Int, 404)
    XCTAssertEqual(errorBody?["message"] as? String, "No such object: no such")
    XCTAssertNotNil(errorBody?["errors"] as? [[String: Any]])
  }

  func testBucketAndUnknownRoutes() async throws {
    let bucket = try await curl(base)
    XCTAssertEqual(bucket.status, 200)
    XCTAssertEqual(bucket.json["kind"] as? String, "storage#bucket")
    XCTAssertEqual(bucket.json["name"] as? String, "bkt")
    for url in [
      server.endpoint + "/storage/v1/b/other", server.endpoint + "/storage/v1/b/other/o",
      server.endpoint + "/storage/v1/b/other/o/c", server.endpoint + "/nothing/here",
    ] {
      let result = try await curl(url)
      XCTAssertEqual(result.status, 404, url)
      XCTAssertEqual((result.json["error"] as? [String: Any])?["code"] as? Int, 404, url)
    }
    let badEscape = try await curl(base + "/o/bad%ZZname")
    XCTAssertEqual(badEscape.status, 400)
    let notUTF8 = try await curl(base + "/o/%FF%FE")
    XCTAssertEqual(notUTF8.status, 400)
    let badMax = try await curl(base + "/o?maxResults=lots")
    XCTAssertEqual(badMax.status, 400)
    let badToken = try await curl(base + "/o?pageToken=%21%21")
    XCTAssertEqual(badToken.status, 400)
  }

  func testMalformedHTTPGets400AndServerLivesOn() async throws {
    // Raw garbage over a socket, via bash's /dev/tcp.
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/bash")
    process.arguments = [
      "-c",
      "exec 3<>/dev/tcp/127.0.0.1/\(server.port); printf 'THIS IS NOT HTTP\\r\\n\\r\\n' >&3; "
        + "timeout 5 head -c 12 <&3",
    ]
    let output = Pipe()
    process.standardOutput = output
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    XCTAssertEqual(String(decoding: data, as: UTF8.self), "HTTP/1.1 400")
    let after = try await curl(base + "/o/c")
    XCTAssertEqual(after.status, 200)
  }

  func testMediaRangesAndGenerations() async throws {
    let meta = store.put("f", data: Array("0123456789".utf8), contentType: "text/plain")
    let media = base + "/o/f?alt=media&generation=\(meta.generation)"

    let whole = try await curl(media)
    XCTAssertEqual(whole.status, 200)
    XCTAssertEqual(whole.text, "0123456789")
    XCTAssertNil(whole.header("Content-Range"))
    XCTAssertEqual(whole.header("X-Goog-Generation"), String(meta.generation))
    XCTAssertEqual(
      whole.headerValues("X-Goog-Hash").sorted(), ["crc32c=\(meta.crc32c!)", "md5=\(meta.md5Hash!)"])

    let part = try await curl(media, headers: ["Range: bytes=2-4"])
    XCTAssertEqual(part.status, 206)
    XCTAssertEqual(part.text, "234")
    XCTAssertEqual(part.header("Content-Range"), "bytes 2-4/10")

    let clamped = try await curl(media, headers: ["Range: bytes=8-100"])
    XCTAssertEqual(clamped.status, 206)
    XCTAssertEqual(clamped.text, "89")
    XCTAssertEqual(clamped.header("Content-Range"), "bytes 8-9/10")

    let open = try await curl(media, headers: ["Range: bytes=7-"])
    XCTAssertEqual(open.text, "789")
    let suffix = try await curl(media, headers: ["Range: bytes=-3"])
    XCTAssertEqual(suffix.status, 206)
    XCTAssertEqual(suffix.text, "789")
    XCTAssertEqual(suffix.header("Content-Range"), "bytes 7-9/10")

    let beyond = try await curl(media, headers: ["Range: bytes=10-20"])
    XCTAssertEqual(beyond.status, 416)
    XCTAssertEqual(beyond.header("Content-Range"), "bytes */10")

    let download = try await curl(
      server.endpoint + "/download/storage/v1/b/bkt/o/f?alt=media&generation=\(meta.generation)",
      headers: ["Range: bytes=0-0"])
    XCTAssertEqual(download.status, 206)
    XCTAssertEqual(download.text, "0")

    let stale = try await curl(base + "/o/f?alt=media&generation=\(meta.generation - 1)")
    XCTAssertEqual(stale.status, 404)
    store.put("f", data: Array("new".utf8))
    let replaced = try await curl(media)
    XCTAssertEqual(replaced.status, 404)
    let latest = try await curl(base + "/o/f?alt=media")
    XCTAssertEqual(latest.text, "new")
    XCTAssertEqual(store.calls(.read).first, .read("f", 0..<Int64.max))
  }

  func testPatchNullRemovalAndPrecondition() async throws {
    store.put(
      "p", data: [], contentType: "text/plain", cacheControl: "no-store", custom: ["k1": "v1", "k2": "v2"])
    let url = base + "/o/p?ifMetagenerationMatch=1"
    let body = #"{"contentType":null,"contentLanguage":"de","metadata":{"k1":null,"k3":"v3"}}"#
    let patched = try await curl(
      url, method: "PATCH", headers: ["Content-Type: application/json"], body: body)
    XCTAssertEqual(patched.status, 200, patched.text)
    XCTAssertNil(patched.json["contentType"])
    XCTAssertEqual(patched.json["contentLanguage"] as? String, "de")
    XCTAssertEqual(patched.json["cacheControl"] as? String, "no-store")
    XCTAssertEqual(patched.json["metadata"] as? [String: String], ["k2": "v2", "k3": "v3"])
    XCTAssertEqual(patched.json["metageneration"] as? String, "2")
    XCTAssertNil(store.object("p")?.contentType)

    let stale = try await curl(url, method: "PATCH", headers: ["Content-Type: application/json"], body: body)
    XCTAssertEqual(stale.status, 412)
    XCTAssertEqual((stale.json["error"] as? [String: Any])?["code"] as? Int, 412)
    XCTAssertEqual(store.object("p")?.metageneration, 2)

    let cleared = try await curl(base + "/o/p", method: "PATCH", body: #"{"metadata":null}"#)
    XCTAssertEqual(cleared.status, 200)
    XCTAssertNil(cleared.json["metadata"])
    XCTAssertEqual(store.object("p")?.custom, [:])

    let tooBig = #"{"metadata":{"big":""# + String(repeating: "x", count: 5000) + #""}}"#
    let refused = try await curl(base + "/o/p", method: "PATCH", body: tooBig)
    XCTAssertEqual(refused.status, 400)
    let message = (refused.json["error"] as? [String: Any])?["message"] as? String ?? ""
    XCTAssertTrue(message.lowercased().contains("metadata"), message)

    for bad in ["{not json", "[1,2]", #"{"contentType":5}"#, #"{"metadata":"x"}"#] {
      let result = try await curl(base + "/o/p", method: "PATCH", body: bad)
      XCTAssertEqual(result.status, 400, bad)
    }
    let badPrecondition = try await curl(base + "/o/p?ifMetagenerationMatch=x", method: "PATCH", body: "{}")
    XCTAssertEqual(badPrecondition.status, 400)
    let missing = try await curl(base + "/o/none", method: "PATCH", body: "{}")
    XCTAssertEqual(missing.status, 404)
    XCTAssertEqual(server.requests(.patch).first?.body, Array(body.utf8))
  }

  func testScriptedFaults() async throws {
    server.injectFaults([.status(503), .status(429, retryAfter: 1)], for: .metadata)
    let first = try await curl(base + "/o/c")
    XCTAssertEqual(first.status, 503)
    XCTAssertEqual((first.json["error"] as? [String: Any])?["code"] as? Int, 503)
    let second = try await curl(base + "/o/c")
    XCTAssertEqual(second.status, 429)
    XCTAssertEqual(second.header("Retry-After"), "1")
    let third = try await curl(base + "/o/c")
    XCTAssertEqual(third.status, 200)
    // Scripted answers never reach the store.
    XCTAssertEqual(store.calls(.metadata).count, 1)

    server.injectFaults([.resetConnection]) { $0.objectName == "d/a" }
    let reset = try await curl(base + "/o/d%2Fa")
    XCTAssertNotEqual(reset.exitCode, 0)
    XCTAssertEqual(reset.status, 0)
    let afterReset = try await curl(base + "/o/d%2Fa")
    XCTAssertEqual(afterReset.status, 200)

    server.injectFaults([.stall(.milliseconds(400))], for: .list)
    let clock = ContinuousClock()
    let start = clock.now
    let stalled = try await curl(base + "/o")
    XCTAssertEqual(stalled.status, 200)
    XCTAssertGreaterThanOrEqual(clock.now - start, .milliseconds(400))

    // A client that gives up before the stall ends; the server drops the request and lives on.
    server.injectFaults([.stall(.seconds(30))], for: .list)
    let gaveUp = try await curl(base + "/o", maxTime: 0.3)
    XCTAssertEqual(gaveUp.exitCode, 28)
    let fine = try await curl(base + "/o")
    XCTAssertEqual(fine.status, 200)

    // Store-level faults come out as the service's statuses.
    store.injectFaults([.unavailable("backend")], for: .list)
    let storeFault = try await curl(base + "/o")
    XCTAssertEqual(storeFault.status, 503)
  }

  func testBearerToken() async throws {
    server.requireBearerToken = "secret"
    let anonymous = try await curl(base + "/o/c")
    XCTAssertEqual(anonymous.status, 401)
    XCTAssertEqual((anonymous.json["error"] as? [String: Any])?["code"] as? Int, 401)
    let wrong = try await curl(base + "/o/c", headers: ["Authorization: Bearer nope"])
    XCTAssertEqual(wrong.status, 401)
    let right = try await curl(base + "/o/c", headers: ["Authorization: Bearer secret"])
    XCTAssertEqual(right.status, 200)
    XCTAssertEqual(server.requests.count, 3)
    XCTAssertEqual(server.requests.last?.header("authorization"), "Bearer secret")
    server.resetRequests()
    XCTAssertTrue(server.requests.isEmpty)
  }
}

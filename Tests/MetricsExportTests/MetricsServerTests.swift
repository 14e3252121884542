import AsyncHTTPClient
import CoreMetrics
import Foundation
import MetricsExport
import NIOCore
import NIOHTTP1
import XCTest

/// The `/metrics` endpoint: what it answers, the address it takes, and that
/// stopping it leaves no port or thread behind.
final class MetricsServerTests: XCTestCase {
  func testAddressesAreHostColonPort() {
    XCTAssertEqual(MetricsAddress("127.0.0.1:9100"), MetricsAddress(host: "127.0.0.1", port: 9100))
    XCTAssertEqual(MetricsAddress("localhost:1"), MetricsAddress(host: "localhost", port: 1))
    XCTAssertEqual(MetricsAddress("[::1]:9100"), MetricsAddress(host: "::1", port: 9100))
    XCTAssertEqual(MetricsAddress("[::1]:9100")?.description, "[::1]:9100")
    XCTAssertEqual(MetricsAddress("0.0.0.0:65535")?.description, "0.0.0.0:65535")
    for bad in [
      "", "9100", ":9100", "host:", "host:0", "host:65536", "host:12a", "::1:9100", "[::1]9100", "[::1]:",
      "a b:9100", "host:+80",
    ] {
      XCTAssertNil(MetricsAddress(bad), bad)
    }
  }

  func testServesPrometheusTextAtMetrics() async throws {
    let registry = MetricsRegistry()
    Counter(label: "test_requests_total", dimensions: [("kind", "get")], factory: registry.factory)
      .increment(by: 3)
    Timer(label: "test_duration_seconds", factory: registry.factory).recordMicroseconds(1500)
    let server = try MetricsServer.start(at: MetricsAddress(host: "127.0.0.1", port: 0), registry: registry)
    defer { server.stop() }
    try await withClient { http in
      let (status, headers, body) = try await get(http, "http://127.0.0.1:\(server.port)/metrics")
      XCTAssertEqual(status, 200)
      XCTAssertEqual(headers.first(name: "Content-Type"), "text/plain; version=0.0.4; charset=utf-8")
      XCTAssertTrue(body.contains("# TYPE test_requests_total counter\n"), body)
      XCTAssertTrue(body.contains("test_requests_total{kind=\"get\"} 3\n"), body)
      // Seconds, with the buckets below 5 ms that FUSE answers need.
      XCTAssertTrue(body.contains("test_duration_seconds_bucket{le=\"0.001\"} 0\n"), body)
      XCTAssertTrue(body.contains("test_duration_seconds_bucket{le=\"0.0025\"} 1\n"), body)
      XCTAssertTrue(body.contains("test_duration_seconds_sum 0.0015\n"), body)
      XCTAssertTrue(body.contains("test_duration_seconds_count 1\n"), body)

      let (missing, _, _) = try await get(http, "http://127.0.0.1:\(server.port)/other")
      XCTAssertEqual(missing, 404)
      let (posted, postedHeaders, _) = try await get(
        http, "http://127.0.0.1:\(server.port)/metrics", method: .POST)
      XCTAssertEqual(posted, 405)
      XCTAssertEqual(postedHeaders.first(name: "Allow"), "GET, HEAD")
      let (headStatus, headHeaders, headBody) = try await get(
        http, "http://127.0.0.1:\(server.port)/metrics", method: .HEAD)
      XCTAssertEqual(headStatus, 200)
      XCTAssertEqual(headBody, "")
      XCTAssertNotEqual(headHeaders.first(name: "Content-Length"), "0")
    }
  }

  func testATakenPortIsAnErrorAndStopLeavesNothingBehind() async throws {
    let registry = MetricsRegistry()
    let first = try MetricsServer.start(at: MetricsAddress(host: "127.0.0.1", port: 0), registry: registry)
    let port = first.port
    try await withClient { http in _ = try await get(http, "http://127.0.0.1:\(port)/metrics") }
    let threads = try threadCount()

    do {
      let second = try MetricsServer.start(
        at: MetricsAddress(host: "127.0.0.1", port: port), registry: registry)
      second.stop()
      XCTFail("a second server bound a taken port")
    } catch {
      XCTAssertEqual(
        error.description,
        "cannot serve metrics at 127.0.0.1:\(port): \(String(cString: strerror(EADDRINUSE)))")
    }
    let unchanged = try await settles { try threadCount() == threads }
    XCTAssertTrue(unchanged, "the failed start left a thread")

    first.stop()
    let ended = try await settles { try threadCount() == threads - 1 }
    XCTAssertTrue(ended, "stop left the server's thread")
    // The port is free again: the same address binds.
    let again = try MetricsServer.start(at: MetricsAddress(host: "127.0.0.1", port: port), registry: registry)
    again.stop()
  }

  func testAnUnknownHostIsAnError() {
    XCTAssertThrowsError(
      try MetricsServer.start(
        at: MetricsAddress(host: "no-such-host.invalid", port: 9), registry: MetricsRegistry())
    ) { error in
      XCTAssertTrue("\(error)".hasPrefix("cannot serve metrics at no-such-host.invalid:9: "), "\(error)")
    }
  }

  // MARK: - Support

  private func withClient(_ body: (HTTPClient) async throws -> Void) async throws {
    let http = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup)
    do {
      try await body(http)
    } catch {
      try await http.shutdown()
      throw error
    }
    try await http.shutdown()
  }

  private func get(_ http: HTTPClient, _ url: String, method: HTTPMethod = .GET) async throws
    -> (Int, HTTPHeaders, String)
  {
    var request = HTTPClientRequest(url: url)
    request.method = method
    let response = try await http.execute(request, timeout: .seconds(10))
    let body = try await response.body.collect(upTo: 1 << 20)
    return (Int(response.status.code), response.headers, String(buffer: body))
  }

  /// Event-loop threads of groups like the server's: the process's other
  /// threads (the concurrency pool, Dispatch workers) come and go on their own.
  private func threadCount() throws -> Int {
    try FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").filter { task in
      let name = (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)) ?? ""
      return name.hasPrefix("NIO-ELT-")
    }.count
  }

  /// Polls `condition` for up to 5 s.
  private func settles(_ condition: () throws -> Bool) async throws -> Bool {
    for _ in 0..<100 {
      if try condition() { return true }
      try await Task.sleep(nanoseconds: 50_000_000)
    }
    return try condition()
  }
}

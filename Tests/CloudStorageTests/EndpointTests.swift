import CloudStorage
import Foundation
import ServiceAccess
import XCTest

/// Parsing `--endpoint` / STORAGE_EMULATOR_HOST.
final class EndpointTests: XCTestCase {
  func testLoopbackHTTPWithPort() throws {
    let endpoint = try Endpoint("http://127.0.0.1:4443")
    XCTAssertEqual(endpoint.scheme, "http")
    XCTAssertEqual(endpoint.host, "127.0.0.1")
    XCTAssertEqual(endpoint.port, 4443)
    XCTAssertEqual(endpoint.basePath, "")
    XCTAssertTrue(endpoint.isLoopback)
    XCTAssertEqual(endpoint.description, "http://127.0.0.1:4443")
  }

  func testBareHostPortMeansHTTP() throws {
    let endpoint = try Endpoint("localhost:9023")
    XCTAssertEqual(endpoint.scheme, "http")
    XCTAssertEqual(endpoint.host, "localhost")
    XCTAssertEqual(endpoint.port, 9023)
    XCTAssertEqual(endpoint.description, "http://localhost:9023")
  }

  func testProduction() throws {
    let endpoint = try Endpoint("https://storage.googleapis.com")
    XCTAssertEqual(endpoint.scheme, "https")
    XCTAssertEqual(endpoint.host, "storage.googleapis.com")
    XCTAssertNil(endpoint.port)
    XCTAssertFalse(endpoint.isLoopback)
    XCTAssertEqual(endpoint.description, Endpoint.production)
    XCTAssertEqual(try Endpoint(Endpoint.production), endpoint)
  }

  func testIPv6LoopbackWithPort() throws {
    let endpoint = try Endpoint("[::1]:8080")
    XCTAssertEqual(endpoint.scheme, "http")
    XCTAssertEqual(endpoint.port, 8080)
    XCTAssertTrue(endpoint.isLoopback)
    XCTAssertEqual(endpoint.description, "http://[::1]:8080")
    XCTAssertEqual(try Endpoint("http://[::1]").description, "http://[::1]")
  }

  func testCaseSpacesAndTrailingSlashes() throws {
    XCTAssertEqual(
      try Endpoint("  HTTPS://storage.googleapis.com/  ").description, "https://storage.googleapis.com")
    let withPath = try Endpoint("http://localhost:4443/gcs/")
    XCTAssertEqual(withPath.basePath, "/gcs")
    XCTAssertEqual(withPath.description, "http://localhost:4443/gcs")
  }

  func testPlainHTTPToARemoteHostIsRefused() throws {
    for text in [
      "http://storage.example.com", "storage.example.com:80", "http://10.0.0.5:4443",
      "http://[2001:db8::1]:80",
    ] {
      XCTAssertThrowsError(try Endpoint(text), text)
      let forced = try Endpoint(text, allowInsecure: true)
      XCTAssertEqual(forced.scheme, "http", text)
      XCTAssertFalse(forced.isLoopback, text)
    }
    XCTAssertNoThrow(try Endpoint("https://storage.example.com"))
    XCTAssertNoThrow(try Endpoint("http://127.0.0.2:80"))
  }

  func testGarbageIsRefused() {
    let garbage = [
      "", "   ", "ftp://storage.googleapis.com", "file:///tmp/x", "http://", "https://", "http://:8080",
      "localhost:", "localhost:port", "localhost:0", "localhost:65536", "localhost:-1", "[::1", "[::1]:",
      "[::1]:x", "[::1]:0", "[::1]:70000", "[::1]junk", "://localhost",
    ]
    for text in garbage {
      XCTAssertThrowsError(try Endpoint(text, allowInsecure: true), text.debugDescription)
      XCTAssertThrowsError(try Endpoint(text), text.debugDescription)
    }
  }
}

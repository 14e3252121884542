import XCTest

@testable import TraceExport

/// `--otlp-endpoint` and the `OTEL_EXPORTER_OTLP_*` variables: which wins,
/// how the traces URL is made, and what is refused.
final class OTLPConfigurationTests: XCTestCase {
  private func resolve(_ flag: String?, _ environment: [String: String] = [:]) throws(OTLPConfigurationError)
    -> OTLPConfiguration?
  {
    try OTLPConfiguration.resolve(flag: flag, environment: environment)
  }

  private func refusal(_ flag: String?, _ environment: [String: String] = [:]) -> String? {
    do {
      _ = try resolve(flag, environment)
      return nil
    } catch {
      return error.message
    }
  }

  func testNothingConfiguredIsOff() throws {
    XCTAssertNil(try resolve(nil))
    XCTAssertNil(try resolve("", ["OTEL_EXPORTER_OTLP_ENDPOINT": " "]))
    // The protocol and headers alone configure nothing, and are not checked then.
    XCTAssertNil(
      try resolve(nil, ["OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_HEADERS": "bad"]))
  }

  func testFlagIsABaseURL() throws {
    XCTAssertEqual(try resolve("http://127.0.0.1:4318")?.tracesURL, "http://127.0.0.1:4318/v1/traces")
    XCTAssertEqual(try resolve("https://collector/otlp/")?.tracesURL, "https://collector/otlp/v1/traces")
  }

  func testFlagWinsOverTheVariables() throws {
    let environment = [
      "OTEL_EXPORTER_OTLP_ENDPOINT": "http://base:4318",
      "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4318/custom",
    ]
    XCTAssertEqual(try resolve("http://flag:1", environment)?.tracesURL, "http://flag:1/v1/traces")
  }

  func testTracesVariableIsTheFullURLAndWinsOverTheBase() throws {
    XCTAssertEqual(
      try resolve(
        nil,
        [
          "OTEL_EXPORTER_OTLP_ENDPOINT": "http://base:4318",
          "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:9/x",
        ]
      )?.tracesURL, "http://t:9/x")
    XCTAssertEqual(
      try resolve(nil, ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://base:4318/"])?.tracesURL,
      "http://base:4318/v1/traces")
  }

  func testOnlyHTTPURLsWithAHost() {
    XCTAssertEqual(
      refusal("grpc://127.0.0.1:4317"),
      "--otlp-endpoint must be an http:// or https:// URL, not 'grpc://127.0.0.1:4317'")
    XCTAssertEqual(
      refusal("127.0.0.1:4318"), "--otlp-endpoint must be an http:// or https:// URL, not '127.0.0.1:4318'")
    XCTAssertEqual(
      refusal("http://"), "--otlp-endpoint must be an http:// or https:// URL with a host, not 'http://'")
    XCTAssertEqual(
      refusal("http://:4318/"),
      "--otlp-endpoint must be an http:// or https:// URL with a host, not 'http://:4318/'")
    XCTAssertEqual(
      refusal(nil, ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://x"]),
      "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT must be an http:// or https:// URL, not 'ftp://x'")
    XCTAssertNotNil(try? resolve("HTTPS://Collector.example:443"))
  }

  func testProtocol() throws {
    XCTAssertEqual(try resolve("http://c", ["OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"])?.warnings, [])
    XCTAssertEqual(
      try resolve("http://c", ["OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"])?.warnings,
      [
        "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf: bucketfs sends OTLP/HTTP as JSON (http/json) to the same endpoint"
      ])
    XCTAssertEqual(
      refusal("http://c", ["OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"]),
      "OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported: bucketfs exports traces only as http/json")
    // The traces-specific variable is the one that applies.
    XCTAssertEqual(
      try resolve(
        "http://c",
        ["OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"])?
        .warnings, [])
  }

  func testHeaders() throws {
    let configuration = try resolve(
      "http://c",
      [
        "OTEL_EXPORTER_OTLP_HEADERS": "api-key=secret%20one, x-tenant = a=b ,Authorization=Basic%3D",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "X-Tenant=traces",
      ])
    XCTAssertEqual(
      configuration?.headers,
      [.init("api-key", "secret one"), .init("Authorization", "Basic="), .init("X-Tenant", "traces")])
    XCTAssertEqual(
      refusal("http://c", ["OTEL_EXPORTER_OTLP_HEADERS": "novalue"]),
      "OTEL_EXPORTER_OTLP_HEADERS: 'novalue' is not name=value")
    XCTAssertEqual(
      refusal("http://c", ["OTEL_EXPORTER_OTLP_HEADERS": "bad name=1"]),
      "OTEL_EXPORTER_OTLP_HEADERS: 'bad name' is not a header name")
    XCTAssertEqual(
      refusal("http://c", ["OTEL_EXPORTER_OTLP_HEADERS": "k=%zz"]),
      "OTEL_EXPORTER_OTLP_HEADERS: the value of 'k' is not valid percent-encoding")
    XCTAssertEqual(
      refusal("http://c", ["OTEL_EXPORTER_OTLP_HEADERS": "k=a%0D%0Ab"]),
      "OTEL_EXPORTER_OTLP_HEADERS: the value of 'k' is not valid percent-encoding")
  }
}

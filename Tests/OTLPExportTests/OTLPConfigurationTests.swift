import XCTest

@testable import OTLPExport

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
    XCTAssertEqual(try resolve("http://127.0.0.1:4318")?.url, "http://127.0.0.1:4318/v1/traces")
    XCTAssertEqual(try resolve("https://collector/otlp/")?.url, "https://collector/otlp/v1/traces")
  }

  func testFlagWinsOverTheVariables() throws {
    let environment = [
      "OTEL_EXPORTER_OTLP_ENDPOINT": "http://base:4318",
      "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4318/custom",
    ]
    XCTAssertEqual(try resolve("http://flag:1", environment)?.url, "http://flag:1/v1/traces")
  }

  func testTracesVariableIsTheFullURLAndWinsOverTheBase() throws {
    XCTAssertEqual(
      try resolve(
        nil,
        [
          "OTEL_EXPORTER_OTLP_ENDPOINT": "http://base:4318",
          "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:9/x",
        ]
      )?.url, "http://t:9/x")
    XCTAssertEqual(
      try resolve(nil, ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://base:4318/"])?.url,
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
    let refused = [
      "novalue": "'novalue' is not name=value",
      "bad name=1": "'bad name' is not a header name",
      "k=%zz": "the value of 'k' is not valid percent-encoding",
      "k=a%0D%0Ab": "the value of 'k' is not valid percent-encoding",
    ]
    for (headers, reason) in refused {
      XCTAssertEqual(
        refusal("http://c", ["OTEL_EXPORTER_OTLP_HEADERS": headers]), "OTEL_EXPORTER_OTLP_HEADERS: \(reason)")
    }
  }

  func testMetricsHaveTheirOwnPathAndVariables() throws {
    XCTAssertEqual(
      try OTLPConfiguration.resolve(.metrics, flag: "http://c:4318/", environment: [:])?.url,
      "http://c:4318/v1/metrics")
    let environment = [
      "OTEL_EXPORTER_OTLP_ENDPOINT": "http://base:4318",
      "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://m:9/custom",
      "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "k=metrics",
      "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "k=traces",
    ]
    let metrics = try OTLPConfiguration.resolve(.metrics, flag: nil, environment: environment)
    XCTAssertEqual(metrics?.url, "http://m:9/custom")
    XCTAssertEqual(metrics?.headers, [.init("k", "metrics")])
    XCTAssertEqual(try resolve(nil, environment)?.url, "http://base:4318/v1/traces")
    XCTAssertEqual(try resolve(nil, environment)?.headers, [.init("k", "traces")])
  }

  func testAnExporterOfNoneTurnsThatSignalOff() throws {
    let environment = ["OTEL_METRICS_EXPORTER": "none"]
    XCTAssertNil(try OTLPConfiguration.resolve(.metrics, flag: "http://c", environment: environment))
    XCTAssertNotNil(try resolve("http://c", environment))
    XCTAssertNil(try resolve("http://c", ["OTEL_TRACES_EXPORTER": "none"]))
    XCTAssertEqual(
      refusal("http://c", ["OTEL_TRACES_EXPORTER": "zipkin"]),
      "OTEL_TRACES_EXPORTER=zipkin is not supported: bucketfs exports traces only over otlp (or none)")
  }

  func testMetricExportInterval() throws {
    XCTAssertEqual(try OTLPConfiguration.metricExportInterval(environment: [:]), .seconds(60))
    XCTAssertEqual(
      try OTLPConfiguration.metricExportInterval(environment: ["OTEL_METRIC_EXPORT_INTERVAL": "500"]),
      .milliseconds(500))
    for bad in ["50", "soon", "-1"] {
      XCTAssertThrowsError(
        try OTLPConfiguration.metricExportInterval(environment: ["OTEL_METRIC_EXPORT_INTERVAL": bad]))
    }
  }
}

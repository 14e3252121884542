import CoreMetrics
import Foundation
import XCTest

@testable import OTLPExport

/// The OTLP metrics backend: series kept per label and dimensions, read as
/// OTLP's kinds, and the export request's JSON mapping.
final class OTLPMetricsTests: XCTestCase {
  private let factory = OTLPMetricsFactory(
    durationBounds: [.milliseconds(1), .milliseconds(10), .seconds(1)], startNanoseconds: 1_000)

  private func family(_ name: String) -> MetricFamily? {
    factory.snapshot().first { $0.name == name }
  }

  func testTheSameLabelAndDimensionsAreOneSeries() {
    Counter(label: "c_total", dimensions: [("op", "read"), ("a", "1")], factory: factory).increment(by: 2)
    // Dimensions in another order name the same series.
    Counter(label: "c_total", dimensions: [("a", "1"), ("op", "read")], factory: factory).increment(by: 3)
    Counter(label: "c_total", dimensions: [("op", "write")], factory: factory).increment()
    let found = family("c_total")
    XCTAssertEqual(found?.kind, .sum)
    XCTAssertEqual(
      found?.points.map { $0.dimensions.map(\.value) + [String(describing: $0.value)] },
      [["1", "read", "integer(5)"], ["write", "integer(1)"]])
  }

  func testMetersAreGauges() {
    let meter = Meter(label: "bytes", factory: factory)
    meter.set(10)
    meter.increment(by: 5)
    meter.decrement(by: 2)
    XCTAssertEqual(family("bytes")?.kind, .gauge)
    XCTAssertEqual(family("bytes")?.points.first?.value, .number(13))
  }

  func testTimersAreHistogramsInSecondsUpToAndIncludingEachBound() {
    let timer = Timer(label: "d_seconds", factory: factory)
    timer.recordNanoseconds(1_000_000)  // exactly the first bound: in its bucket
    timer.recordNanoseconds(5_000_000)
    timer.recordNanoseconds(2_000_000_000)  // above every bound
    XCTAssertEqual(family("d_seconds")?.kind, .histogram(unit: "s"))
    XCTAssertEqual(
      family("d_seconds")?.points.first?.value,
      .histogram(count: 3, sum: 2.006, min: 0.001, max: 2, bounds: [0.001, 0.01, 1], counts: [1, 1, 0, 1]))
  }

  func testADestroyedSeriesIsNoLongerExported() {
    let counter = Counter(label: "gone_total", factory: factory)
    counter.increment()
    XCTAssertNotNil(family("gone_total")?.points.first)
    counter.destroy()
    XCTAssertEqual(family("gone_total")?.points.count ?? 0, 0)
  }

  func testALabelAskedForAsAnotherKindDoesNotChangeTheFamily() {
    Counter(label: "mixed", factory: factory).increment()
    Meter(label: "mixed", factory: factory).set(99)
    XCTAssertEqual(family("mixed")?.kind, .sum)
    XCTAssertEqual(family("mixed")?.points.map(\.value), [.integer(1)])
  }

  func testTheRequestIsOTLPJSON() throws {
    Counter(label: "c_total", dimensions: [("op", "read")], factory: factory).increment(by: 7)
    Meter(label: "g", factory: factory).set(1.5)
    Timer(label: "t_seconds", factory: factory).recordNanoseconds(20_000_000)
    let text = MetricsRequestJSON.encode(
      factory.snapshot(), resource: TraceResource(serviceVersion: "1.2.3"), startNanoseconds: 1_000,
      nowNanoseconds: 2_000)
    let request = try XCTUnwrap(
      try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    let resource = try XCTUnwrap((request["resourceMetrics"] as? [[String: Any]])?.first)
    let scope = try XCTUnwrap((resource["scopeMetrics"] as? [[String: Any]])?.first)
    XCTAssertEqual((scope["scope"] as? [String: Any])?["version"] as? String, "1.2.3")
    let metrics = try XCTUnwrap(scope["metrics"] as? [[String: Any]])
    let byName = Dictionary(uniqueKeysWithValues: metrics.map { ($0["name"] as? String ?? "", $0) })

    let sum = try XCTUnwrap(byName["c_total"]?["sum"] as? [String: Any])
    XCTAssertEqual(sum["aggregationTemporality"] as? Int, 2)
    XCTAssertEqual(sum["isMonotonic"] as? Bool, true)
    let point = try XCTUnwrap((sum["dataPoints"] as? [[String: Any]])?.first)
    XCTAssertEqual(point["asInt"] as? String, "7")
    XCTAssertEqual(point["startTimeUnixNano"] as? String, "1000")
    XCTAssertEqual(point["timeUnixNano"] as? String, "2000")
    let attribute = try XCTUnwrap((point["attributes"] as? [[String: Any]])?.first)
    XCTAssertEqual(attribute["key"] as? String, "op")
    XCTAssertEqual((attribute["value"] as? [String: Any])?["stringValue"] as? String, "read")

    let gauge = try XCTUnwrap(byName["g"]?["gauge"] as? [String: Any])
    XCTAssertEqual((gauge["dataPoints"] as? [[String: Any]])?.first?["asDouble"] as? Double, 1.5)

    XCTAssertEqual(byName["t_seconds"]?["unit"] as? String, "s")
    let histogram = try XCTUnwrap(byName["t_seconds"]?["histogram"] as? [String: Any])
    let bars = try XCTUnwrap((histogram["dataPoints"] as? [[String: Any]])?.first)
    XCTAssertEqual(bars["count"] as? String, "1")
    XCTAssertEqual(bars["bucketCounts"] as? [String], ["0", "0", "1", "0"])
    XCTAssertEqual(bars["explicitBounds"] as? [Double], [0.001, 0.01, 1])
    XCTAssertEqual(bars["sum"] as? Double, 0.02)
  }

  func testCountingFromManyThreadsLosesNothing() {
    let counter = Counter(label: "busy_total", factory: factory)
    let timer = Timer(label: "busy_seconds", factory: factory)
    DispatchQueue.concurrentPerform(iterations: 8) { _ in
      for _ in 0..<10_000 {
        counter.increment()
        timer.recordNanoseconds(1)
      }
    }
    XCTAssertEqual(family("busy_total")?.points.first?.value, .integer(80_000))
    guard case .histogram(let count, _, _, _, _, let counts)? = family("busy_seconds")?.points.first?.value
    else { return XCTFail("no histogram") }
    XCTAssertEqual(count, 80_000)
    XCTAssertEqual(counts.first, 80_000)
  }
}

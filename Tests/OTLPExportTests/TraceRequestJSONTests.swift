import Foundation
import Logging
import Tracing
import XCTest

@testable import OTLPExport

/// A batch of spans as OTLP/JSON (the ExportTraceServiceRequest mapping), and
/// the tracer's trees: a child shares its parent's trace and names it.
final class TraceRequestJSONTests: XCTestCase {
  private func parsed(_ spans: [FinishedSpan]) throws -> [String: Any] {
    let text = TraceRequestJSON.encode(spans, resource: TraceResource(serviceVersion: "1.2.3"))
    return try XCTUnwrap(JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
  }

  private func encodedSpans(of request: [String: Any]) throws -> [[String: Any]] {
    let resourceSpans = try XCTUnwrap(request["resourceSpans"] as? [[String: Any]])
    XCTAssertEqual(resourceSpans.count, 1)
    let scopeSpans = try XCTUnwrap(resourceSpans[0]["scopeSpans"] as? [[String: Any]])
    XCTAssertEqual(scopeSpans.count, 1)
    XCTAssertEqual((scopeSpans[0]["scope"] as? [String: Any])?["name"] as? String, "bucketfs")
    return try XCTUnwrap(scopeSpans[0]["spans"] as? [[String: Any]])
  }

  /// key → AnyValue, from OTLP's list of key/value pairs.
  private func attributeMap(_ value: Any?) throws -> [String: [String: Any]] {
    let list = try XCTUnwrap(value as? [[String: Any]])
    var result: [String: [String: Any]] = [:]
    for pair in list { result[try XCTUnwrap(pair["key"] as? String)] = pair["value"] as? [String: Any] }
    return result
  }

  func testBatchEncoding() throws {
    let identity = SpanIdentity(traceHigh: 0x0123_4567_89ab_cdef, traceLow: 1, spanID: 0xff)
    var attributes: SpanAttributes = [:]
    attributes.set("fuse.inode", value: .int64(42))
    attributes.set("name", value: .string("a \"quoted\"\nline\u{1}"))
    attributes.set("ratio", value: .double(0.5))
    attributes.set("cached", value: .bool(false))
    attributes.set("sizes", value: .int64Array([1, 2]))
    let root = FinishedSpan(
      name: "FUSE read", kind: .server, identity: identity, parentSpanID: nil,
      startNanoseconds: 1_700_000_000_000_000_001, endNanoseconds: 1_700_000_000_500_000_000,
      attributes: attributes)
    let child = FinishedSpan(
      name: "GET download", kind: .client,
      identity: SpanIdentity(traceHigh: identity.traceHigh, traceLow: identity.traceLow, spanID: 7),
      parentSpanID: identity.spanID, startNanoseconds: 5, endNanoseconds: 9,
      events: [SpanEvent(name: "exception", at: DefaultTracerClock.Instant(nanosecondsSinceEpoch: 8))],
      status: SpanStatus(code: .error, message: "unavailable: HTTP 503"))

    let request = try parsed([root, child])
    let resource = try XCTUnwrap(
      (request["resourceSpans"] as? [[String: Any]])?.first?["resource"] as? [String: Any])
    let resourceAttributes = try attributeMap(resource["attributes"])
    XCTAssertEqual(resourceAttributes["service.name"]?["stringValue"] as? String, "bucketfs")
    XCTAssertEqual(resourceAttributes["service.version"]?["stringValue"] as? String, "1.2.3")

    let encoded = try encodedSpans(of: request)
    XCTAssertEqual(encoded.count, 2)
    let first = encoded[0]
    XCTAssertEqual(first["traceId"] as? String, "0123456789abcdef0000000000000001")
    XCTAssertEqual(first["spanId"] as? String, "00000000000000ff")
    XCTAssertNil(first["parentSpanId"])
    XCTAssertEqual(first["name"] as? String, "FUSE read")
    XCTAssertEqual(first["kind"] as? Int, 2)
    // 64-bit times are strings in the JSON mapping: no precision lost to doubles.
    XCTAssertEqual(first["startTimeUnixNano"] as? String, "1700000000000000001")
    XCTAssertEqual(first["endTimeUnixNano"] as? String, "1700000000500000000")
    XCTAssertNil(first["status"])
    let values = try attributeMap(first["attributes"])
    XCTAssertEqual(values["fuse.inode"]?["intValue"] as? String, "42")
    XCTAssertEqual(values["name"]?["stringValue"] as? String, "a \"quoted\"\nline\u{1}")
    XCTAssertEqual(values["ratio"]?["doubleValue"] as? Double, 0.5)
    XCTAssertEqual(values["cached"]?["boolValue"] as? Bool, false)
    let array = try XCTUnwrap(
      (values["sizes"]?["arrayValue"] as? [String: Any])?["values"] as? [[String: Any]])
    XCTAssertEqual(array.map { $0["intValue"] as? String }, ["1", "2"])

    let second = encoded[1]
    XCTAssertEqual(second["traceId"] as? String, first["traceId"] as? String)
    XCTAssertEqual(second["parentSpanId"] as? String, "00000000000000ff")
    XCTAssertEqual(second["kind"] as? Int, 3)
    let status = try XCTUnwrap(second["status"] as? [String: Any])
    XCTAssertEqual(status["code"] as? Int, 2)
    XCTAssertEqual(status["message"] as? String, "unavailable: HTTP 503")
    let events = try XCTUnwrap(second["events"] as? [[String: Any]])
    XCTAssertEqual(events.first?["name"] as? String, "exception")
    XCTAssertEqual(events.first?["timeUnixNano"] as? String, "8")
  }

  func testEmptyBatchIsStillARequest() throws {
    XCTAssertEqual(try encodedSpans(of: try parsed([])).count, 0)
  }

  func testTracerMakesTrees() async throws {
    let finished = CollectedSpans()
    let tracer = OTLPTracer(finished: { finished.append($0) })
    let root = tracer.startSpan("FUSE read", context: .topLevel, ofKind: .server)
    let child = tracer.startSpan("GET download", context: root.context, ofKind: .client)
    child.attributes.set("storage.attempts", value: .int64(2))
    child.setStatus(SpanStatus(code: .error, message: "HTTP 503"))
    child.end()
    child.end()  // once only
    let other = tracer.startSpan("FUSE lookup", context: .topLevel, ofKind: .server)
    other.end()
    root.end()
    let spans = finished.all
    XCTAssertEqual(spans.map(\.name), ["GET download", "FUSE lookup", "FUSE read"])
    let (childSpan, otherSpan, rootSpan) = (spans[0], spans[1], spans[2])
    XCTAssertNil(rootSpan.parentSpanID)
    XCTAssertEqual(childSpan.parentSpanID, rootSpan.identity.spanID)
    XCTAssertEqual(childSpan.identity.traceIDHex, rootSpan.identity.traceIDHex)
    XCTAssertNotEqual(childSpan.identity.spanID, rootSpan.identity.spanID)
    XCTAssertNotEqual(otherSpan.identity.traceIDHex, rootSpan.identity.traceIDHex)
    XCTAssertEqual(childSpan.attributes.get("storage.attempts"), .int64(2))
    XCTAssertEqual(childSpan.status, SpanStatus(code: .error, message: "HTTP 503"))
    XCTAssertGreaterThanOrEqual(rootSpan.endNanoseconds, rootSpan.startNanoseconds)
    // The JSON of this batch names the parent as the tracer made it.
    let encoded = try encodedSpans(of: try parsed(spans))
    XCTAssertEqual(encoded[0]["parentSpanId"] as? String, rootSpan.identity.spanIDHex)
  }

  func testFullQueueDropsAndNeverWaits() async {
    var settings = SpanExporter.Settings()
    settings.capacity = 10
    settings.batchSize = 100  // no batch is due before shutdown
    settings.interval = .seconds(3600)
    settings.requestTimeout = .seconds(2)
    // Port 9 on loopback: nothing listens, so the one export at shutdown fails.
    let exporter = SpanExporter(
      configuration: OTLPConfiguration(url: "http://127.0.0.1:9/v1/traces"),
      resource: TraceResource(serviceVersion: "test"), settings: settings, logger: Logger(label: "test"))
    let span = FinishedSpan(
      name: "FUSE getattr", kind: .server, identity: SpanIdentity(traceHigh: 1, traceLow: 2, spanID: 3),
      parentSpanID: nil, startNanoseconds: 1, endNanoseconds: 2)
    for _ in 0..<15 { exporter.add(span) }
    XCTAssertEqual(exporter.droppedSpans, 5)
    let sentAll = await exporter.shutdown(patience: .seconds(10))
    XCTAssertFalse(sentAll)
    XCTAssertEqual(exporter.sentSpans, 0)
    XCTAssertEqual(exporter.droppedSpans, 15)
  }
}

/// Spans collected from the tracer's callback, in the order they ended.
private final class CollectedSpans: @unchecked Sendable {
  private let lock = NSLock()
  private var spans: [FinishedSpan] = []

  func append(_ span: FinishedSpan) { lock.withLock { spans.append(span) } }
  var all: [FinishedSpan] { lock.withLock { spans } }
}

import Tracing

/// Who sends the spans: OTLP's resource (`service.name`, `service.version`) and scope.
public struct TraceResource: Sendable, Equatable {
  public var serviceName: String
  public var serviceVersion: String

  public init(serviceName: String = "bucketfs", serviceVersion: String) {
    self.serviceName = serviceName
    self.serviceVersion = serviceVersion
  }
}

/// An `ExportTraceServiceRequest` in OTLP's JSON mapping (the protobuf JSON
/// mapping with hex ids): one resource, one scope, the batch's spans. 64-bit
/// integers are strings, enums are numbers, as the mapping writes them.
public enum TraceRequestJSON {
  public static func encode(_ spans: [FinishedSpan], resource: TraceResource) -> String {
    var out = "{\"resourceSpans\":[{\"resource\":{\"attributes\":["
    out += keyValue("service.name", .string(resource.serviceName))
    out += ","
    out += keyValue("service.version", .string(resource.serviceVersion))
    out += "]},\"scopeSpans\":[{\"scope\":{\"name\":\"bucketfs\",\"version\":"
    out += OTLPJSON.quoted(resource.serviceVersion)
    out += "},\"spans\":["
    for (index, span) in spans.enumerated() {
      if index > 0 { out += "," }
      append(span, to: &out)
    }
    out += "]}]}]}"
    return out
  }

  static func append(_ span: FinishedSpan, to out: inout String) {
    out += "{\"traceId\":\"\(span.identity.traceIDHex)\",\"spanId\":\"\(span.identity.spanIDHex)\""
    if let parent = span.parentSpanID { out += ",\"parentSpanId\":\"\(hex(parent))\"" }
    out += ",\"name\":" + OTLPJSON.quoted(span.name)
    out += ",\"kind\":\(kindNumber(span.kind))"
    out +=
      ",\"startTimeUnixNano\":\"\(span.startNanoseconds)\",\"endTimeUnixNano\":\"\(span.endNanoseconds)\""
    out += ",\"attributes\":" + attributes(span.attributes)
    if !span.events.isEmpty {
      out += ",\"events\":["
      for (index, event) in span.events.enumerated() {
        if index > 0 { out += "," }
        out += "{\"timeUnixNano\":\"\(event.nanosecondsSinceEpoch)\",\"name\":" + OTLPJSON.quoted(event.name)
        out += ",\"attributes\":" + attributes(event.attributes) + "}"
      }
      out += "]"
    }
    if !span.links.isEmpty {
      out += ",\"links\":["
      for (index, link) in span.links.enumerated() {
        if index > 0 { out += "," }
        out += "{\"traceId\":\"\(link.identity.traceIDHex)\",\"spanId\":\"\(link.identity.spanIDHex)\""
        out += ",\"attributes\":" + attributes(link.attributes) + "}"
      }
      out += "]"
    }
    if let status = span.status {
      out += ",\"status\":{\"code\":\(status.code == .ok ? 1 : 2)"
      if let message = status.message { out += ",\"message\":" + OTLPJSON.quoted(message) }
      out += "}"
    }
    out += "}"
  }

  /// OTLP's SpanKind: SERVER 2, CLIENT 3, PRODUCER 4, CONSUMER 5, INTERNAL 1.
  static func kindNumber(_ kind: SpanKind) -> Int {
    switch kind {
    case .server: 2
    case .client: 3
    case .producer: 4
    case .consumer: 5
    case .internal: 1
    }
  }

  /// Sorted by key, so the same attributes encode the same.
  static func attributes(_ attributes: SpanAttributes) -> String {
    var pairs: [(String, SpanAttribute)] = []
    attributes.forEach { pairs.append(($0, $1)) }
    pairs.sort { $0.0 < $1.0 }
    return "[" + pairs.map { keyValue($0.0, $0.1) }.joined(separator: ",") + "]"
  }

  static func keyValue(_ key: String, _ value: SpanAttribute) -> String {
    "{\"key\":" + OTLPJSON.quoted(key) + ",\"value\":" + anyValue(value) + "}"
  }

  /// OTLP's AnyValue.
  static func anyValue(_ value: SpanAttribute) -> String {
    func array(_ values: [String]) -> String {
      "{\"arrayValue\":{\"values\":[" + values.joined(separator: ",") + "]}}"
    }
    switch value {
    case .int32(let number): return int(Int64(number))
    case .int64(let number): return int(number)
    case .double(let number): return double(number)
    case .bool(let flag): return "{\"boolValue\":\(flag)}"
    case .string(let text): return "{\"stringValue\":" + OTLPJSON.quoted(text) + "}"
    case .int32Array(let numbers): return array(numbers.map { int(Int64($0)) })
    case .int64Array(let numbers): return array(numbers.map(int))
    case .doubleArray(let numbers): return array(numbers.map(double))
    case .boolArray(let flags): return array(flags.map { "{\"boolValue\":\($0)}" })
    case .stringArray(let texts): return array(texts.map { "{\"stringValue\":" + OTLPJSON.quoted($0) + "}" })
    case .stringConvertible(let item): return "{\"stringValue\":" + OTLPJSON.quoted(item.description) + "}"
    case .stringConvertibleArray(let items):
      return array(items.map { "{\"stringValue\":" + OTLPJSON.quoted($0.description) + "}" })
    default: return "{\"stringValue\":" + OTLPJSON.quoted(String(describing: value)) + "}"
    }
  }

  private static func int(_ number: Int64) -> String { "{\"intValue\":\"\(number)\"}" }

  private static func double(_ number: Double) -> String {
    "{\"doubleValue\":" + OTLPJSON.number(number) + "}"
  }
}

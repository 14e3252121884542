/// An `ExportMetricsServiceRequest` in OTLP's JSON mapping: one resource, one
/// scope, every family as a cumulative sum, a gauge or a cumulative
/// histogram. 64-bit integers are strings and enums numbers, as the mapping
/// writes them.
public enum MetricsRequestJSON {
  /// AGGREGATION_TEMPORALITY_CUMULATIVE: every point counts from the mount's start.
  static let cumulative = 2

  public static func encode(
    _ families: [MetricFamily], resource: TraceResource, startNanoseconds: UInt64, nowNanoseconds: UInt64
  ) -> String {
    var out = "{\"resourceMetrics\":[{\"resource\":{\"attributes\":["
    out += TraceRequestJSON.keyValue("service.name", .string(resource.serviceName))
    out += ","
    out += TraceRequestJSON.keyValue("service.version", .string(resource.serviceVersion))
    out += "]},\"scopeMetrics\":[{\"scope\":{\"name\":\"bucketfs\",\"version\":"
    out += OTLPJSON.quoted(resource.serviceVersion)
    out += "},\"metrics\":["
    let times = "\"startTimeUnixNano\":\"\(startNanoseconds)\",\"timeUnixNano\":\"\(nowNanoseconds)\""
    for (index, family) in families.enumerated() {
      if index > 0 { out += "," }
      out += "{\"name\":" + OTLPJSON.quoted(family.name)
      let points = family.points.map { point in
        "{\"attributes\":" + attributes(point.dimensions) + "," + times + "," + value(point.value) + "}"
      }.joined(separator: ",")
      switch family.kind {
      case .sum:
        out +=
          ",\"sum\":{\"dataPoints\":[\(points)],\"aggregationTemporality\":\(cumulative),\"isMonotonic\":true}"
      case .gauge:
        out += ",\"gauge\":{\"dataPoints\":[\(points)]}"
      case .histogram(let unit):
        if let unit { out += ",\"unit\":" + OTLPJSON.quoted(unit) }
        out += ",\"histogram\":{\"dataPoints\":[\(points)],\"aggregationTemporality\":\(cumulative)}"
      }
      out += "}"
    }
    out += "]}]}]}"
    return out
  }

  static func attributes(_ dimensions: [Dimension]) -> String {
    "[" + dimensions.map { TraceRequestJSON.keyValue($0.name, .string($0.value)) }.joined(separator: ",")
      + "]"
  }

  /// A data point's value fields (after its times).
  static func value(_ reading: MetricReading) -> String {
    switch reading {
    case .integer(let number):
      return "\"asInt\":\"\(number)\""
    case .number(let number):
      return "\"asDouble\":" + OTLPJSON.number(number)
    case .histogram(let count, let sum, let min, let max, let bounds, let counts):
      var out = "\"count\":\"\(count)\",\"sum\":" + OTLPJSON.number(sum)
      out += ",\"bucketCounts\":[" + counts.map { "\"\($0)\"" }.joined(separator: ",") + "]"
      out += ",\"explicitBounds\":[" + bounds.map(OTLPJSON.number).joined(separator: ",") + "]"
      if let min { out += ",\"min\":" + OTLPJSON.number(min) }
      if let max { out += ",\"max\":" + OTLPJSON.number(max) }
      return out
    }
  }
}

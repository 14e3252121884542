import JSONText
import Logging

#if canImport(Glibc)
  import Glibc
#endif

/// How a log line is written (`--log-format`): text for people, or one JSON
/// object a line with the fields Cloud Logging, journald and Loki read.
enum LogLineFormat: String, Sendable, CaseIterable {
  case text, json

  /// Fields every JSON line has; a metadata key with one of these names is
  /// written as `field.NAME` so it cannot hide them.
  static let reserved: Set<String> = ["time", "severity", "message", "component"]

  /// Cloud Logging's severity names (trace has none below DEBUG).
  static func severity(_ level: Logger.Level) -> String {
    switch level {
    case .trace, .debug: "DEBUG"
    case .info: "INFO"
    case .notice: "NOTICE"
    case .warning: "WARNING"
    case .error: "ERROR"
    case .critical: "CRITICAL"
    }
  }

  /// One JSON object: time, severity, message, component, then the metadata in key order.
  static func json(
    time: String, level: Logger.Level, message: String, component: String, metadata: Logger.Metadata
  ) -> String {
    var fields = [
      ("time", quoted(time)), ("severity", quoted(severity(level))), ("message", quoted(message)),
      ("component", quoted(component)),
    ]
    for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
      fields.append((reserved.contains(key) ? "field.\(key)" : key, encode(value)))
    }
    return "{" + fields.map { quoted($0.0) + ":" + $0.1 }.joined(separator: ",") + "}"
  }

  private static func encode(_ value: Logger.Metadata.Value) -> String {
    switch value {
    case .string(let text): return quoted(text)
    case .stringConvertible(let value): return quoted(value.description)
    case .array(let values): return "[" + values.map(encode).joined(separator: ",") + "]"
    case .dictionary(let entries):
      return "{"
        + entries.sorted(by: { $0.key < $1.key }).map { quoted($0.key) + ":" + encode($0.value) }
        .joined(separator: ",") + "}"
    }
  }

  static func quoted(_ text: String) -> String { JSONText.quoted(text) }

  /// Now in RFC 3339, UTC: 2026-12-01T21:06:06Z, or 2026-12-01T21:06:06.123Z with milliseconds.
  static func timestamp(milliseconds: Bool = true) -> String {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    var parts = tm()
    var seconds = now.tv_sec
    gmtime_r(&seconds, &parts)
    return padded(Int(parts.tm_year) + 1900, 4) + "-" + padded(Int(parts.tm_mon) + 1, 2) + "-"
      + padded(Int(parts.tm_mday), 2) + "T" + padded(Int(parts.tm_hour), 2) + ":"
      + padded(Int(parts.tm_min), 2) + ":" + padded(Int(parts.tm_sec), 2)
      + (milliseconds ? "." + padded(Int(now.tv_nsec / 1_000_000), 3) : "") + "Z"
  }

  private static func padded(_ value: Int, _ width: Int) -> String {
    let digits = "\(value)"
    return String(repeating: "0", count: Swift.max(0, width - digits.count)) + digits
  }
}

/// What OTLP carries: each is sent to its own path and may be configured apart.
public enum OTLPSignal: String, Sendable, CaseIterable {
  case traces, metrics

  /// The signal's part of a variable's name: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`.
  var variablePart: String { rawValue.uppercased() }
}

/// Where one signal goes and with which extra headers: `--otlp-endpoint`, or
/// the standard `OTEL_EXPORTER_OTLP_*` variables (docs/SEMANTICS.md, "Traces"
/// and "Metrics").
public struct OTLPConfiguration: Sendable, Equatable {
  /// The full URL batches are POSTed to (`…/v1/traces`, `…/v1/metrics`).
  public var url: String
  /// Sent with every export (`OTEL_EXPORTER_OTLP_HEADERS`), in order.
  public var headers: [Header]
  /// Said once at mount when the environment asks for something bucketfs does
  /// not do but can stand in for (`http/protobuf`: JSON to the same endpoint).
  public var warnings: [String]

  public struct Header: Sendable, Equatable {
    public var name: String
    public var value: String

    public init(_ name: String, _ value: String) {
      self.name = name
      self.value = value
    }
  }

  public init(url: String, headers: [Header] = [], warnings: [String] = []) {
    self.url = url
    self.headers = headers
    self.warnings = warnings
  }

  /// The configuration of `signal` for a mount, or nil when no endpoint is
  /// given or `OTEL_<SIGNAL>_EXPORTER=none` (then nothing of it is exported
  /// and no connection is made). The flag is a base URL like
  /// `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` or `/v1/metrics` is
  /// appended) and wins over the variables; `OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT`
  /// is used as it is, per the OpenTelemetry specification. Empty variables
  /// count as unset.
  public static func resolve(
    _ signal: OTLPSignal = .traces, flag: String?, environment: [String: String]
  ) throws(OTLPConfigurationError) -> OTLPConfiguration? {
    func variable(_ name: String) -> String? {
      guard let value = environment[name]?.trimmed, !value.isEmpty else { return nil }
      return value
    }
    let part = signal.variablePart
    let exporterName = "OTEL_\(part)_EXPORTER"
    switch variable(exporterName)?.lowercased() {
    case nil, "otlp": break
    case "none": return nil
    case let other?:
      throw OTLPConfigurationError(
        message:
          "\(exporterName)=\(other) is not supported: bucketfs exports \(signal.rawValue) only over otlp (or none)"
      )
    }
    let url: String
    if let flag = flag?.trimmed, !flag.isEmpty {
      try checkURL(flag, source: "--otlp-endpoint")
      url = appendingPath(of: signal, to: flag)
    } else if let full = variable("OTEL_EXPORTER_OTLP_\(part)_ENDPOINT") {
      try checkURL(full, source: "OTEL_EXPORTER_OTLP_\(part)_ENDPOINT")
      url = full
    } else if let base = variable("OTEL_EXPORTER_OTLP_ENDPOINT") {
      try checkURL(base, source: "OTEL_EXPORTER_OTLP_ENDPOINT")
      url = appendingPath(of: signal, to: base)
    } else {
      return nil
    }
    var warnings: [String] = []
    for name in ["OTEL_EXPORTER_OTLP_\(part)_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"] {
      guard let value = variable(name) else { continue }
      switch value {
      case "http/json": break
      case "http/protobuf":
        // Every OTLP/HTTP receiver takes JSON at the same path.
        warnings.append(
          "\(name)=http/protobuf: bucketfs sends OTLP/HTTP as JSON (http/json) to the same endpoint")
      default:
        throw OTLPConfigurationError(
          message: "\(name)=\(value) is not supported: bucketfs exports \(signal.rawValue) only as http/json")
      }
      break  // the signal's own variable, when set, is the one that applies
    }
    var headers = try parseHeaders(
      variable("OTEL_EXPORTER_OTLP_HEADERS"), source: "OTEL_EXPORTER_OTLP_HEADERS")
    let specific = try parseHeaders(
      variable("OTEL_EXPORTER_OTLP_\(part)_HEADERS"), source: "OTEL_EXPORTER_OTLP_\(part)_HEADERS")
    // The signal's own variable's value wins for a name both give.
    headers.removeAll { header in specific.contains { $0.name.lowercased() == header.name.lowercased() } }
    headers += specific
    return OTLPConfiguration(url: url, headers: headers, warnings: warnings)
  }

  /// How often metrics are pushed: `OTEL_METRIC_EXPORT_INTERVAL` in
  /// milliseconds, 60 s when unset (the specification's default), at least 100 ms.
  public static func metricExportInterval(environment: [String: String]) throws(OTLPConfigurationError)
    -> Duration
  {
    let name = "OTEL_METRIC_EXPORT_INTERVAL"
    guard let text = environment[name]?.trimmed, !text.isEmpty else { return .seconds(60) }
    guard let milliseconds = Int(text), milliseconds >= 100, milliseconds <= 86_400_000 else {
      throw OTLPConfigurationError(
        message: "\(name)=\(text) must be a whole number of milliseconds from 100 to 86400000")
    }
    return .milliseconds(milliseconds)
  }

  /// `http://host:4318` → `http://host:4318/v1/traces`; a trailing slash is not doubled.
  static func appendingPath(of signal: OTLPSignal, to base: String) -> String {
    var base = base
    while base.hasSuffix("/") { base.removeLast() }
    return base + "/v1/" + signal.rawValue
  }

  /// An http or https URL with a host; anything else is refused in one line.
  static func checkURL(_ url: String, source: String) throws(OTLPConfigurationError) {
    let lower = url.lowercased()
    guard let scheme = ["http://", "https://"].first(where: { lower.hasPrefix($0) }) else {
      throw OTLPConfigurationError(message: "\(source) must be an http:// or https:// URL, not '\(url)'")
    }
    let rest = url.dropFirst(scheme.count)
    let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
    let host = authority.split(separator: "@").last.map(String.init) ?? ""
    guard !host.isEmpty, !host.hasPrefix(":"), !url.contains(where: { $0 == " " || $0 == "\t" }) else {
      throw OTLPConfigurationError(
        message: "\(source) must be an http:// or https:// URL with a host, not '\(url)'")
    }
  }

  /// `name1=value1,name2=value2`, values percent-decoded (W3C baggage format, as the specification says).
  static func parseHeaders(_ text: String?, source: String) throws(OTLPConfigurationError) -> [Header] {
    guard let text else { return [] }
    var headers: [Header] = []
    for entry in text.split(separator: ",", omittingEmptySubsequences: true) {
      guard let equals = entry.firstIndex(of: "=") else {
        throw OTLPConfigurationError(message: "\(source): '\(entry.trimmed)' is not name=value")
      }
      let name = entry[..<equals].trimmed
      guard !name.isEmpty,
        name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-_.".contains($0)) })
      else {
        throw OTLPConfigurationError(message: "\(source): '\(name)' is not a header name")
      }
      guard let value = percentDecoded(entry[entry.index(after: equals)...].trimmed),
        !value.unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" })
      else {
        throw OTLPConfigurationError(
          message: "\(source): the value of '\(name)' is not valid percent-encoding")
      }
      headers.append(Header(name, value))
    }
    return headers
  }

  static func percentDecoded(_ text: String) -> String? {
    var bytes: [UInt8] = []
    var iterator = Array(text.utf8).makeIterator()
    while let byte = iterator.next() {
      guard byte == UInt8(ascii: "%") else {
        bytes.append(byte)
        continue
      }
      guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
        return nil
      }
      bytes.append(high << 4 | low)
    }
    return String(validating: bytes, as: UTF8.self)
  }

  private static func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
    default: nil
    }
  }
}

/// A refused OTLP setting, in one line.
public struct OTLPConfigurationError: Error, Equatable, CustomStringConvertible {
  public let message: String
  public var description: String { message }
}

extension StringProtocol {
  fileprivate var trimmed: String {
    String(drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
  }
}

/// Where `--metrics-addr` serves: `HOST:PORT`, `[IPv6]:PORT`. The server
/// binds that host only; there is no default host.
public struct MetricsAddress: Sendable, Equatable, CustomStringConvertible {
  public let host: String
  public let port: Int

  public init(host: String, port: Int) {
    self.host = host
    self.port = port
  }

  /// Parses `HOST:PORT` (an IPv6 host in brackets); nil when it is not one.
  public init?(_ text: String) {
    let host: Substring
    let portText: Substring
    if text.hasPrefix("[") {
      guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
        return nil
      }
      host = text[text.index(after: text.startIndex)..<close]
      portText = text[text.index(close, offsetBy: 2)...]
    } else {
      guard let colon = text.lastIndex(of: ":") else { return nil }
      host = text[..<colon]
      portText = text[text.index(after: colon)...]
      // A bare IPv6 address would be ambiguous: its last group could be the port.
      if host.contains(":") { return nil }
    }
    guard !host.isEmpty, !host.contains(where: \.isWhitespace), !portText.isEmpty,
      portText.allSatisfy({ $0.isASCII && $0.isNumber }), let port = Int(portText), (1...65535).contains(port)
    else { return nil }
    self.host = String(host)
    self.port = port
  }

  public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

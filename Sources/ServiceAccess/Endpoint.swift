/// Where the JSON API lives: `https://storage.googleapis.com` or an emulator.
public struct Endpoint: Sendable, Equatable, CustomStringConvertible {
  public static let production = "https://storage.googleapis.com"

  public let scheme: String
  public let host: String
  public let port: Int?
  public let basePath: String

  public struct Invalid: Error, CustomStringConvertible {
    public let description: String
  }

  /// Parses `scheme://host[:port][/path]`; a bare `host:port` (the form of
  /// STORAGE_EMULATOR_HOST) means plain HTTP. Plain HTTP is refused unless the
  /// host is loopback or `allowInsecure` is set: tokens must not travel in clear.
  public init(_ text: String, allowInsecure: Bool = false) throws(Invalid) {
    var rest = Substring(text.trimmingSpaces)
    var scheme = "http"
    if let range = rest.firstRange(of: "://") {
      scheme = rest[..<range.lowerBound].lowercased()
      rest = rest[range.upperBound...]
    }
    guard scheme == "http" || scheme == "https" else {
      throw Invalid(description: "endpoint \(text): only http and https are supported")
    }
    let hostPort = rest.prefix { $0 != "/" }
    var path = String(rest.dropFirst(hostPort.count))
    while path.hasSuffix("/") { path.removeLast() }
    var host = String(hostPort)
    var port: Int?
    if host.hasPrefix("[") {  // [::1]:port
      guard let close = host.firstIndex(of: "]") else {
        throw Invalid(description: "endpoint \(text): bad IPv6 host")
      }
      let after = host[host.index(after: close)...]
      if !after.isEmpty {
        // Only `:port` may follow the brackets, with the same range as for other hosts.
        guard after.hasPrefix(":"), let value = Int(after.dropFirst()), (1...65535).contains(value) else {
          throw Invalid(description: "endpoint \(text): bad port")
        }
        port = value
      }
      host = String(host[...close])
    } else if let colon = host.lastIndex(of: ":") {
      guard let value = Int(host[host.index(after: colon)...]), (1...65535).contains(value) else {
        throw Invalid(description: "endpoint \(text): bad port")
      }
      port = value
      host = String(host[..<colon])
    }
    guard !host.isEmpty else { throw Invalid(description: "endpoint \(text): no host") }
    self.scheme = scheme
    self.host = host
    self.port = port
    self.basePath = path
    if scheme == "http" && !isLoopback && !allowInsecure {
      throw Invalid(
        description: "endpoint \(text): plain http is only allowed to loopback (use https, or force it)")
    }
  }

  public var isLoopback: Bool {
    let name = host.lowercased()
    return name == "localhost" || name.hasPrefix("127.") || name == "[::1]" || name == "::1"
  }

  /// `host[:port]`, as in a URL.
  public var authority: String { host + (port.map { ":\($0)" } ?? "") }

  public var description: String {
    "\(scheme)://\(host)" + (port.map { ":\($0)" } ?? "") + basePath
  }
}

extension String {
  var trimmingSpaces: String {
    String(self.drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
  }

  /// Percent-encodes everything but RFC 3986's unreserved characters, so an
  /// object name (which may hold `/`, `?`, `%`, spaces, any Unicode) is one
  /// path segment or query value.
  public var percentEncoded: String {
    var out = ""
    out.reserveCapacity(utf8.count)
    for byte in utf8 {
      switch byte {
      case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
        UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
        UInt8(ascii: "~"):
        out.unicodeScalars.append(Unicode.Scalar(byte))
      default:
        let hex = Array("0123456789ABCDEF".utf8)
        out.unicodeScalars.append("%")
        out.unicodeScalars.append(Unicode.Scalar(hex[Int(byte >> 4)]))
        out.unicodeScalars.append(Unicode.Scalar(hex[Int(byte & 15)]))
      }
    }
    return out
  }
}

import ServiceAccess

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

/// A JSON document as a tree, for the credentials files whose members nest
/// (`credential_source`, `source_credentials`, …).
enum JSONValue: Decodable, Sendable, Equatable {
  case string(String)
  case number(Double)
  case bool(Bool)
  case object([String: JSONValue])
  case array([JSONValue])
  case null

  init(from decoder: any Decoder) throws {
    let container = try decoder.singleValueContainer()
    if container.decodeNil() {
      self = .null
    } else if let value = try? container.decode(Bool.self) {
      self = .bool(value)
    } else if let value = try? container.decode(Double.self) {
      self = .number(value)
    } else if let value = try? container.decode(String.self) {
      self = .string(value)
    } else if let value = try? container.decode([String: JSONValue].self) {
      self = .object(value)
    } else {
      self = .array(try container.decode([JSONValue].self))
    }
  }

  /// Parses `bytes`; nil when they are not JSON (the decoder's message, which may quote
  /// a secret, is dropped).
  static func parse<Bytes: Sequence>(_ bytes: Bytes) -> JSONValue? where Bytes.Element == UInt8 {
    try? JSONDecoder().decode(JSONValue.self, from: Data(bytes))
  }

  var object: [String: JSONValue]? {
    if case .object(let members) = self { return members }
    return nil
  }

  var string: String? {
    if case .string(let text) = self { return text }
    return nil
  }

  var number: Double? {
    if case .number(let value) = self { return value }
    return nil
  }
}

/// Reads the members of one JSON object of a credentials file, with errors that name the
/// member (by its path, such as `credential_source.url`) and never quote its value.
struct JSONFields {
  let members: [String: JSONValue]
  /// The member's path prefix in messages: "" at the top, "credential_source." inside it.
  let prefix: String
  let path: String

  init(_ members: [String: JSONValue], prefix: String = "", path: String) {
    self.members = members
    self.prefix = prefix
    self.path = path
  }

  func invalid(_ reason: String) -> CredentialsError { .invalidFile(path: path, reason: reason) }

  /// A string member; nil when absent, null or empty; an error when it is another type.
  func string(_ key: String) throws -> String? {
    switch members[key] {
    case nil, .null: return nil
    case .string(let text): return text.isEmpty ? nil : text
    default: throw invalid("field \(prefix)\(key) is not a string")
    }
  }

  func required(_ key: String) throws -> String {
    guard let value = try string(key) else { throw invalid("field \(prefix)\(key) is missing") }
    return value
  }

  func number(_ key: String) throws -> Double? {
    switch members[key] {
    case nil, .null: return nil
    case .number(let value): return value
    // Some tools write numbers as strings.
    case .string(let text) where Double(text) != nil: return Double(text)
    default: throw invalid("field \(prefix)\(key) is not a number")
    }
  }

  func object(_ key: String) throws -> JSONFields? {
    switch members[key] {
    case nil, .null: return nil
    case .object(let inner): return JSONFields(inner, prefix: prefix + key + ".", path: path)
    default: throw invalid("field \(prefix)\(key) is not a JSON object")
    }
  }

  func strings(_ key: String) throws -> [String] {
    switch members[key] {
    case nil, .null: return []
    case .array(let items):
      return try items.map {
        guard case .string(let text) = $0, !text.isEmpty else {
          throw invalid("field \(prefix)\(key) is not a list of strings")
        }
        return text
      }
    default: throw invalid("field \(prefix)\(key) is not a list of strings")
    }
  }

  /// A URL member that secrets are sent to (or tokens come from): https, or plain http
  /// only to loopback, so nothing travels in clear over a network.
  func secureURL(_ key: String, required isRequired: Bool = true) throws -> String? {
    guard let url = isRequired ? try required(key) : try string(key) else { return nil }
    try SecureURL.check(url, field: prefix + key, path: path)
    return url
  }
}

enum SecureURL {
  static func check(_ url: String, field: String, path: String) throws {
    let lower = url.lowercased()
    guard lower.hasPrefix("https://") || lower.hasPrefix("http://"),
      let endpoint = try? Endpoint(url, allowInsecure: true),
      endpoint.scheme == "https" || endpoint.isLoopback
    else {
      throw CredentialsError.invalidFile(path: path, reason: "field \(field) is not an https URL")
    }
  }
}

/// The universe Google's public services live in.
let defaultUniverseDomain = "googleapis.com"

extension JSONFields {
  /// `universe_domain`, checked to be a plain domain name (it becomes part of URLs).
  func universeDomain() throws -> String {
    guard let domain = try string("universe_domain") else { return defaultUniverseDomain }
    let allowed = domain.utf8.allSatisfy {
      ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z"))
        || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9"))
        || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".")
        || ($0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z"))
    }
    guard allowed, domain.contains("."), !domain.hasPrefix("."), !domain.hasSuffix("."), domain.count <= 253
    else { throw invalid("field \(prefix)universe_domain is not a domain name") }
    return domain.lowercased()
  }
}

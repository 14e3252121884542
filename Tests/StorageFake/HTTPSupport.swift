import JSONText
import ObjectStore

// MARK: - URL encoding

enum URLText {
  /// Percent-decodes `text` into UTF-8 bytes; `plusIsSpace` for query components (form encoding,
  /// which Google's front ends accept). Nil on a bad escape or bytes that are not UTF-8.
  static func decode<S: StringProtocol>(_ text: S, plusIsSpace: Bool) -> String? {
    let bytes = Array(text.utf8)
    var out: [UInt8] = []
    out.reserveCapacity(bytes.count)
    var i = 0
    while i < bytes.count {
      let b = bytes[i]
      if b == UInt8(ascii: "%") {
        guard i + 2 < bytes.count, let high = hexValue(bytes[i + 1]), let low = hexValue(bytes[i + 2])
        else { return nil }
        out.append(high << 4 | low)
        i += 3
      } else {
        out.append(plusIsSpace && b == UInt8(ascii: "+") ? UInt8(ascii: " ") : b)
        i += 1
      }
    }
    return String(validating: out, as: UTF8.self)
  }

  /// Encodes everything but RFC 3986 unreserved characters, as clients encode object names.
  static func encode(_ text: String) -> String {
    var out = ""
    for b in text.utf8 {
      switch b {
      case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
        UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
        UInt8(ascii: "~"):
        out.unicodeScalars.append(Unicode.Scalar(b))
      default:
        let hex = Array("0123456789ABCDEF".unicodeScalars)
        out.unicodeScalars.append("%")
        out.unicodeScalars.append(hex[Int(b >> 4)])
        out.unicodeScalars.append(hex[Int(b & 0xf)])
      }
    }
    return out
  }

  /// `a=1&b=x%20y` → ["a": "1", "b": "x y"]; the last of repeated keys wins. Nil if malformed.
  static func parseQuery(_ query: Substring) -> [String: String]? {
    var result: [String: String] = [:]
    for pair in query.split(separator: "&", omittingEmptySubsequences: true) {
      let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
      guard let key = decode(parts[0], plusIsSpace: true),
        let value = parts.count > 1 ? decode(parts[1], plusIsSpace: true) : ""
      else { return nil }
      result[key] = value
    }
    return result
  }

  private static func hexValue(_ b: UInt8) -> UInt8? {
    switch b {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): b - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): b - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): b - UInt8(ascii: "A") + 10
    default: nil
    }
  }
}

// MARK: - Range header

enum ByteRangeSpec: Equatable {
  /// `bytes=first-last`; `last` nil for `bytes=first-`.
  case from(Int64, through: Int64?)
  /// `bytes=-count`: the last `count` bytes.
  case suffix(Int64)

  /// Parses a single-range `Range` header. Nil when it is absent, malformed or multi-range: like
  /// any HTTP server may, the fake then ignores it and sends the whole object.
  init?(header: String?) {
    guard let header, header.hasPrefix("bytes=") else { return nil }
    let spec = header.dropFirst("bytes=".count).trimmingSpaces
    guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return nil }
    let first = spec[..<dash]
    let last = spec[spec.index(after: dash)...]
    if first.isEmpty {
      guard let count = Int64(last), count >= 0 else { return nil }
      self = .suffix(count)
    } else {
      guard let start = Int64(first), start >= 0 else { return nil }
      if last.isEmpty {
        self = .from(start, through: nil)
      } else {
        guard let end = Int64(last), end >= start else { return nil }
        self = .from(start, through: end)
      }
    }
  }

  /// The half-open range asked for, given the object's size (needed for suffixes only).
  /// Nil when unsatisfiable (`bytes=-0`).
  func resolved(size: Int64) -> Range<Int64>? {
    switch self {
    case .from(let start, let end):
      let upper = end.map { $0 == Int64.max ? Int64.max : $0 + 1 } ?? Int64.max
      return start..<upper
    case .suffix(let count):
      guard count > 0 else { return nil }
      return max(0, size - count)..<Int64.max
    }
  }
}

extension StringProtocol {
  var trimmingSpaces: Substring {
    var s = Substring(self)
    while s.first == " " { s.removeFirst() }
    while s.last == " " { s.removeLast() }
    return s
  }
}

// MARK: - JSON output

/// A tiny JSON writer: key order as written (the service's order), strings escaped per RFC 8259.
struct JSONWriter {
  private(set) var text = ""

  static func quote(_ value: String) -> String { JSONText.quoted(value) }

  static func object(_ members: [(String, String?)]) -> String {
    let parts = members.compactMap { key, raw in raw.map { quote(key) + ":" + $0 } }
    return "{" + parts.joined(separator: ",") + "}"
  }

  static func array(_ elements: [String]) -> String { "[" + elements.joined(separator: ",") + "]" }
}

enum Resources {
  /// The object resource, with int64 fields as JSON strings as in the real API, and absent
  /// optional properties (and an empty `metadata` map) omitted as the service does.
  static func object(_ meta: ObjectMetadata, endpoint: String) -> String {
    let encodedName = URLText.encode(meta.name)
    let encodedBucket = URLText.encode(meta.bucket)
    let q = JSONWriter.quote
    let custom: String? =
      meta.custom.isEmpty
      ? nil
      : JSONWriter.object(
        meta.custom.sorted { Array($0.key.utf8).precedes(Array($1.key.utf8)) }.map { ($0.key, q($0.value)) })
    return JSONWriter.object([
      ("kind", q("storage#object")),
      ("id", q("\(meta.bucket)/\(meta.name)/\(meta.generation)")),
      ("selfLink", q("\(endpoint)/storage/v1/b/\(encodedBucket)/o/\(encodedName)")),
      (
        "mediaLink",
        q(
          "\(endpoint)/download/storage/v1/b/\(encodedBucket)/o/\(encodedName)"
            + "?generation=\(meta.generation)&alt=media")
      ),
      ("name", q(meta.name)),
      ("bucket", q(meta.bucket)),
      ("generation", q(String(meta.generation))),
      ("metageneration", q(String(meta.metageneration))),
      ("contentType", meta.contentType.map(q)),
      ("storageClass", meta.storageClass.map(q)),
      ("size", q(String(meta.size))),
      ("md5Hash", meta.md5Hash.map(q)),
      ("cacheControl", meta.cacheControl.map(q)),
      ("contentDisposition", meta.contentDisposition.map(q)),
      ("contentEncoding", meta.contentEncoding.map(q)),
      ("contentLanguage", meta.contentLanguage.map(q)),
      ("crc32c", meta.crc32c.map(q)),
      ("etag", meta.etag.map(q)),
      ("timeCreated", q(meta.timeCreated)),
      ("updated", q(meta.updated)),
      ("timeStorageClassUpdated", q(meta.timeCreated)),
      ("metadata", custom),
    ])
  }

  static func list(_ page: ListPage, endpoint: String) -> String {
    JSONWriter.object([
      ("kind", JSONWriter.quote("storage#objects")),
      ("nextPageToken", page.nextPageToken.map(JSONWriter.quote)),
      ("prefixes", page.prefixes.isEmpty ? nil : JSONWriter.array(page.prefixes.map(JSONWriter.quote))),
      (
        "items",
        page.items.isEmpty ? nil : JSONWriter.array(page.items.map { object($0, endpoint: endpoint) })
      ),
    ])
  }

  static func bucket(_ name: String, endpoint: String) -> String {
    let q = JSONWriter.quote
    return JSONWriter.object([
      ("kind", q("storage#bucket")),
      ("selfLink", q("\(endpoint)/storage/v1/b/\(URLText.encode(name))")),
      ("id", q(name)),
      ("name", q(name)),
      ("projectNumber", q("0")),
      ("metageneration", q("1")),
      ("location", q("US")),
      ("storageClass", q("STANDARD")),
      ("etag", q("CAE=")),
      ("timeCreated", q("2020-01-01T00:00:00.000Z")),
      ("updated", q("2020-01-01T00:00:00.000Z")),
      ("locationType", q("multi-region")),
    ])
  }

  /// The service's error shape: `{"error":{"code":..,"message":..,"errors":[{..}]}}`.
  static func error(code: Int, message: String, reason: String) -> String {
    let q = JSONWriter.quote
    let detail = JSONWriter.object([
      ("message", q(message)), ("domain", q("global")), ("reason", q(reason)),
    ])
    return JSONWriter.object([
      (
        "error",
        JSONWriter.object([
          ("code", String(code)), ("message", q(message)), ("errors", JSONWriter.array([detail])),
        ])
      )
    ])
  }
}

import Crypto

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// AWS Signature Version 4 for one request with the signature in headers
/// (https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html).
/// Used to sign the `GetCallerIdentity` request that is an AWS workload's subject token.
struct AWSSignatureV4: Sendable {
  struct Credentials: Sendable {
    var accessKeyID: String
    var secretAccessKey: String
    var sessionToken: String?
  }

  /// What signing produced, each step kept so that it can be checked against AWS's test suite.
  struct Signed: Sendable {
    var canonicalRequest: String
    var stringToSign: String
    var authorization: String
    /// `yyyyMMddTHHmmssZ`, as sent in `x-amz-date`.
    var amzDate: String
  }

  var region: String
  var service: String

  /// Signs `method` on `host` + `path` + `query` (as written in the URL, still percent-encoded)
  /// with `headers` and `payload`, at `time` (seconds since 1970). `headers` should hold `host`
  /// and `x-amz-date` (and `x-amz-security-token` when there is one): all of them are signed.
  func sign(
    method: String, path: String, query: String, headers: [(String, String)], payload: [UInt8],
    credentials: Credentials, time: Int64
  ) -> Signed {
    let amzDate = Self.amzDate(time)
    let dateStamp = String(amzDate.prefix(8))
    // Canonical headers: lower-case names in order, values trimmed with inner runs of spaces
    // made one, repeated names joined by commas.
    var grouped: [String: [String]] = [:]
    for (name, value) in headers { grouped[name.lowercased(), default: []].append(Self.trimmed(value)) }
    let names = grouped.keys.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
    let canonicalHeaders = names.map { "\($0):\(grouped[$0]!.joined(separator: ","))\n" }.joined()
    let signedHeaders = names.joined(separator: ";")
    let canonicalRequest = [
      method, Self.canonicalPath(path), Self.canonicalQuery(query), canonicalHeaders, signedHeaders,
      Self.hex(SHA256.hash(data: payload)),
    ].joined(separator: "\n")
    let scope = "\(dateStamp)/\(region)/\(service)/aws4_request"
    let stringToSign = [
      "AWS4-HMAC-SHA256", amzDate, scope, Self.hex(SHA256.hash(data: Array(canonicalRequest.utf8))),
    ].joined(separator: "\n")
    var key = SymmetricKey(data: Array(("AWS4" + credentials.secretAccessKey).utf8))
    for part in [dateStamp, region, service, "aws4_request"] {
      key = SymmetricKey(data: Array(HMAC<SHA256>.authenticationCode(for: Array(part.utf8), using: key)))
    }
    let signature = Self.hex(HMAC<SHA256>.authenticationCode(for: Array(stringToSign.utf8), using: key))
    let authorization =
      "AWS4-HMAC-SHA256 Credential=\(credentials.accessKeyID)/\(scope), SignedHeaders=\(signedHeaders), "
      + "Signature=\(signature)"
    return Signed(
      canonicalRequest: canonicalRequest, stringToSign: stringToSign, authorization: authorization,
      amzDate: amzDate)
  }

  /// `time` as `yyyyMMddTHHmmssZ` (UTC).
  static func amzDate(_ time: Int64) -> String {
    var seconds = time_t(time)
    var parts = tm()
    gmtime_r(&seconds, &parts)
    func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
    return "\(parts.tm_year + 1900)\(two(parts.tm_mon + 1))\(two(parts.tm_mday))T"
      + "\(two(parts.tm_hour))\(two(parts.tm_min))\(two(parts.tm_sec))Z"
  }

  /// The path with `.` and `..` segments resolved (as Google's signer does); `/` when empty.
  static func canonicalPath(_ path: String) -> String {
    var segments: [Substring] = []
    for segment in path.split(separator: "/", omittingEmptySubsequences: true) {
      switch segment {
      case ".": continue
      case "..": _ = segments.popLast()
      default: segments.append(segment)
      }
    }
    let joined = "/" + segments.joined(separator: "/")
    return path.hasSuffix("/") && !segments.isEmpty ? joined + "/" : joined
  }

  /// Parameters decoded, encoded again with only RFC 3986's unreserved characters left bare,
  /// and sorted by name, then value.
  static func canonicalQuery(_ query: String) -> String {
    let pairs = query.split(separator: "&", omittingEmptySubsequences: true).map { pair -> (String, String) in
      let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
      let name = percentDecoded(parts[0]).percentEncodedForSigning
      let value = parts.count > 1 ? percentDecoded(parts[1]).percentEncodedForSigning : ""
      return (name, value)
    }
    return
      pairs
      .sorted { ($0.0, $0.1) < ($1.0, $1.1) }
      .map { "\($0.0)=\($0.1)" }
      .joined(separator: "&")
  }

  static func percentDecoded(_ text: Substring) -> String {
    var bytes: [UInt8] = []
    var iterator = Array(text.utf8).makeIterator()
    while let byte = iterator.next() {
      if byte == UInt8(ascii: "%"), let high = iterator.next(), let low = iterator.next(),
        let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16)
      {
        bytes.append(value)
      } else {
        bytes.append(byte)
      }
    }
    return String(decoding: bytes, as: UTF8.self)
  }

  static func trimmed(_ value: String) -> String {
    value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
  }

  static func hex<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
    let digits = Array("0123456789abcdef".utf8)
    var out: [UInt8] = []
    for byte in bytes {
      out.append(digits[Int(byte >> 4)])
      out.append(digits[Int(byte & 15)])
    }
    return String(decoding: out, as: UTF8.self)
  }
}

extension String {
  /// Every byte but RFC 3986's unreserved characters as `%XX` (upper-case), as SigV4 wants.
  var percentEncodedForSigning: String { percentEncoded(keeping: []) }

  /// Like Python's `urllib.parse.quote(text, safe=...)`: unreserved characters and `keeping` bare.
  func percentEncoded(keeping: Set<UInt8>) -> String {
    let digits = Array("0123456789ABCDEF".utf8)
    var out: [UInt8] = []
    for byte in utf8 {
      switch byte {
      case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
        UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
        UInt8(ascii: "~"):
        out.append(byte)
      case _ where keeping.contains(byte):
        out.append(byte)
      default:
        out += [UInt8(ascii: "%"), digits[Int(byte >> 4)], digits[Int(byte & 15)]]
      }
    }
    return String(decoding: out, as: UTF8.self)
  }
}

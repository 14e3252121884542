import Foundation

/// A value behind a lock, in a class that closures and tasks can share (a
/// `Mutex` cannot be copied into them), for values that need not be
/// `Sendable`: the test doubles' state, and what a test's handler records.
public final class Locked<Value>: @unchecked Sendable {
  private let lock = NSLock()
  private var value: Value

  public init(_ value: Value) { self.value = value }

  public func withLock<Result, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result)
    throws(Failure)
    -> Result
  {
    lock.lock()
    defer { lock.unlock() }
    return try body(&value)
  }

  public var current: Value { withLock { $0 } }
}

// MARK: - Checksums, as the service reports them (base64 of the raw digest)

enum Checksum {
  /// MD5 (RFC 1321). The service reports `md5Hash` as base64 of the 16 raw bytes.
  static func md5(_ message: [UInt8]) -> [UInt8] {
    let shifts: [UInt32] = [
      7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
      5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20,
      4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
      6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
    ]
    var a0: UInt32 = 0x6745_2301
    var b0: UInt32 = 0xefcd_ab89
    var c0: UInt32 = 0x98ba_dcfe
    var d0: UInt32 = 0x1032_5476

    var padded = message
    padded.append(0x80)
    while padded.count % 64 != 56 { padded.append(0) }
    let bitLength = UInt64(message.count) &* 8
    for i in 0..<8 { padded.append(UInt8(truncatingIfNeeded: bitLength >> (8 * UInt64(i)))) }

    var words = [UInt32](repeating: 0, count: 16)
    for chunk in stride(from: 0, to: padded.count, by: 64) {
      for i in 0..<16 {
        let base = chunk + 4 * i
        words[i] =
          UInt32(padded[base]) | UInt32(padded[base + 1]) << 8 | UInt32(padded[base + 2]) << 16
          | UInt32(padded[base + 3]) << 24
      }
      var a = a0
      var b = b0
      var c = c0
      var d = d0
      for i in 0..<64 {
        var f: UInt32
        let g: Int
        switch i {
        case 0..<16:
          f = (b & c) | (~b & d)
          g = i
        case 16..<32:
          f = (d & b) | (~d & c)
          g = (5 * i + 1) % 16
        case 32..<48:
          f = b ^ c ^ d
          g = (3 * i + 5) % 16
        default:
          f = c ^ (b | ~d)
          g = (7 * i) % 16
        }
        f = f &+ a &+ md5Constants[i] &+ words[g]
        a = d
        d = c
        c = b
        b = b &+ ((f << shifts[i]) | (f >> (32 - shifts[i])))
      }
      a0 = a0 &+ a
      b0 = b0 &+ b
      c0 = c0 &+ c
      d0 = d0 &+ d
    }
    var digest: [UInt8] = []
    for word in [a0, b0, c0, d0] {
      for i in 0..<4 { digest.append(UInt8(truncatingIfNeeded: word >> (8 * UInt32(i)))) }
    }
    return digest
  }

  /// K[i] = floor(|sin(i + 1)| * 2^32), computed rather than typed in.
  private static let md5Constants: [UInt32] = (0..<64).map { i in
    UInt32(truncatingIfNeeded: Int64((abs(sin(Double(i + 1))) * 4_294_967_296).rounded(.down)))
  }

  /// CRC-32C (Castagnoli), reflected, as the service computes `crc32c`.
  static func crc32c(_ data: [UInt8]) -> UInt32 {
    var crc: UInt32 = 0xffff_ffff
    for byte in data { crc = crc32cTable[Int((crc ^ UInt32(byte)) & 0xff)] ^ (crc >> 8) }
    return crc ^ 0xffff_ffff
  }

  private static let crc32cTable: [UInt32] = (0..<256).map { n in
    var c = UInt32(n)
    for _ in 0..<8 { c = (c & 1) != 0 ? (c >> 1) ^ 0x82f6_3b78 : c >> 1 }
    return c
  }

  /// The service's `crc32c` field: base64 of the checksum in big-endian byte order.
  static func crc32cBase64(_ data: [UInt8]) -> String {
    let crc = crc32c(data)
    return Base64.encode([24, 16, 8, 0].map { UInt8(truncatingIfNeeded: crc >> $0) })
  }

  static func md5Base64(_ data: [UInt8]) -> String { Base64.encode(md5(data)) }
}

enum Base64 {
  private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

  static func encode(_ bytes: [UInt8]) -> String {
    var out: [UInt8] = []
    out.reserveCapacity((bytes.count + 2) / 3 * 4)
    var i = 0
    while i < bytes.count {
      let b0 = UInt32(bytes[i])
      let b1 = i + 1 < bytes.count ? UInt32(bytes[i + 1]) : 0
      let b2 = i + 2 < bytes.count ? UInt32(bytes[i + 2]) : 0
      let triple = b0 << 16 | b1 << 8 | b2
      out.append(alphabet[Int(triple >> 18 & 63)])
      out.append(alphabet[Int(triple >> 12 & 63)])
      out.append(i + 1 < bytes.count ? alphabet[Int(triple >> 6 & 63)] : UInt8(ascii: "="))
      out.append(i + 2 < bytes.count ? alphabet[Int(triple & 63)] : UInt8(ascii: "="))
      i += 3
    }
    return String(decoding: out, as: UTF8.self)
  }

  /// Strict decoding (padding required); nil on anything malformed.
  static func decode(_ text: String) -> [UInt8]? {
    let chars = Array(text.utf8)
    guard chars.count % 4 == 0 else { return nil }
    var out: [UInt8] = []
    var i = 0
    while i < chars.count {
      var values: [UInt32] = []
      var padding = 0
      for j in 0..<4 {
        let c = chars[i + j]
        if c == UInt8(ascii: "=") {
          // Padding only in the last group's last two places.
          guard i + 4 == chars.count, j >= 2 else { return nil }
          padding += 1
          values.append(0)
        } else {
          guard padding == 0, let v = alphabet.firstIndex(of: c) else { return nil }
          values.append(UInt32(v))
        }
      }
      let triple = values[0] << 18 | values[1] << 12 | values[2] << 6 | values[3]
      out.append(UInt8(truncatingIfNeeded: triple >> 16))
      if padding < 2 { out.append(UInt8(truncatingIfNeeded: triple >> 8)) }
      if padding < 1 { out.append(UInt8(truncatingIfNeeded: triple)) }
      i += 4
    }
    return out
  }
}

// MARK: - Time

enum Timestamp {
  /// Wall-clock milliseconds since the Unix epoch.
  static func nowMillis() -> Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)) }

  /// RFC 3339 in UTC with milliseconds and `Z`, the form the service uses
  /// (`2024-05-01T12:34:56.789Z`).
  static func rfc3339(millis: Int64) -> String {
    let (days, msOfDay) = floorDivMod(millis, 86_400_000)
    let (year, month, day) = civil(fromDays: days)
    let hour = msOfDay / 3_600_000
    let minute = msOfDay / 60_000 % 60
    let second = msOfDay / 1000 % 60
    let ms = msOfDay % 1000
    return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(hour, 2)):\(pad(minute, 2)):"
      + "\(pad(second, 2)).\(pad(ms, 3))Z"
  }

  private static func floorDivMod(_ a: Int64, _ b: Int64) -> (Int64, Int64) {
    let q = a >= 0 ? a / b : (a - b + 1) / b
    return (q, a - q * b)
  }

  /// Proleptic Gregorian date of a day count since 1970-01-01 (era arithmetic, 400-year cycles).
  private static func civil(fromDays days: Int64) -> (Int64, Int64, Int64) {
    let z = days + 719_468
    let era = (z >= 0 ? z : z - 146_096) / 146_097
    let dayOfEra = z - era * 146_097
    let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
    let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
    let mp = (5 * dayOfYear + 2) / 153
    let day = dayOfYear - (153 * mp + 2) / 5 + 1
    let month = mp < 10 ? mp + 3 : mp - 9
    let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
    return (year, month, day)
  }

  private static func pad(_ value: Int64, _ width: Int) -> String {
    let text = String(value)
    return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
  }
}

// MARK: - Byte strings

/// Object names compare and match as UTF-8 byte strings, as in the service: Swift's `String`
/// equality and ordering use Unicode canonical equivalence, which would merge distinct names.
typealias Key = [UInt8]

extension Array where Element == UInt8 {
  func precedes(_ other: [UInt8]) -> Bool { lexicographicallyPrecedes(other) }

  func hasPrefix(_ prefix: [UInt8]) -> Bool {
    count >= prefix.count && self[0..<prefix.count].elementsEqual(prefix)
  }

  /// The index right after the first occurrence of `needle` at or after `start`.
  func endOfFirst(_ needle: [UInt8], from start: Int) -> Int? {
    guard !needle.isEmpty, count >= needle.count else { return nil }
    var i = start
    while i + needle.count <= count {
      if self[i] == needle[0] && self[i..<(i + needle.count)].elementsEqual(needle) {
        return i + needle.count
      }
      i += 1
    }
    return nil
  }
}

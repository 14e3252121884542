/// An RFC 3339 time as Google's APIs write it (`2024-05-01T10:20:30.123Z`,
/// fractional seconds and a numeric offset optional): one parser for the
/// object metadata's times and the token endpoints' expiry times alike.
public struct RFC3339Time: Equatable, Sendable {
  /// Whole seconds since 1970 (UTC) and the nanoseconds past them.
  public let seconds: Int
  public let nanoseconds: Int

  /// The time `text` says, or nil when it is not an RFC 3339 date-time.
  public init?(_ text: String) {
    let bytes = Array(text.utf8)
    func number(_ start: Int, _ count: Int) -> Int? {
      guard start + count <= bytes.count else { return nil }
      var value = 0
      for byte in bytes[start..<start + count] {
        guard byte >= 0x30 && byte <= 0x39 else { return nil }
        value = value * 10 + Int(byte - 0x30)
      }
      return value
    }
    guard bytes.count >= 20, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
      bytes[10] == UInt8(ascii: "T") || bytes[10] == UInt8(ascii: "t"), bytes[13] == UInt8(ascii: ":"),
      bytes[16] == UInt8(ascii: ":"), let year = number(0, 4), let month = number(5, 2),
      let day = number(8, 2), let hour = number(11, 2), let minute = number(14, 2),
      let second = number(17, 2),
      (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second <= 60
    else { return nil }
    var index = 19
    var nanoseconds = 0
    if bytes[index] == UInt8(ascii: ".") {
      index += 1
      let start = index
      var scale = 100_000_000
      while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 {
        nanoseconds += Int(bytes[index] - 0x30) * scale
        scale /= 10
        index += 1
      }
      guard index > start else { return nil }
    }
    var offset = 0
    guard index < bytes.count else { return nil }
    switch bytes[index] {
    case UInt8(ascii: "Z"), UInt8(ascii: "z"):
      guard index + 1 == bytes.count else { return nil }
    case UInt8(ascii: "+"), UInt8(ascii: "-"):
      guard index + 6 == bytes.count, bytes[index + 3] == UInt8(ascii: ":"), let hours = number(index + 1, 2),
        let minutes = number(index + 4, 2)
      else { return nil }
      offset = (hours * 60 + minutes) * 60 * (bytes[index] == UInt8(ascii: "+") ? 1 : -1)
    default:
      return nil
    }
    // Days from the civil date (Howard Hinnant's algorithm): no libc, any year.
    let y = month <= 2 ? year - 1 : year
    let era = (y >= 0 ? y : y - 399) / 400
    let yearOfEra = y - era * 400
    let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
    let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
    let days = era * 146097 + dayOfEra - 719468
    self.seconds = days * 86400 + hour * 3600 + minute * 60 + second - offset
    self.nanoseconds = nanoseconds
  }
}

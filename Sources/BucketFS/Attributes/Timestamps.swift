import FUSE

#if canImport(Glibc)
  import Glibc
#endif

/// RFC 3339 timestamps as the service writes them (`2024-05-01T10:20:30.123Z`).
enum RFC3339 {
  static func parse(_ text: String) -> Timestamp? {
    let b = Array(text.utf8)
    func digits(_ at: Int, _ count: Int) -> Int? {
      guard at + count <= b.count else { return nil }
      var value = 0
      for i in at..<(at + count) {
        guard b[i] >= 48, b[i] <= 57 else { return nil }
        value = value * 10 + Int(b[i] - 48)
      }
      return value
    }
    guard b.count >= 20, let year = digits(0, 4), b[4] == UInt8(ascii: "-"), let month = digits(5, 2),
      b[7] == UInt8(ascii: "-"), let day = digits(8, 2),
      b[10] == UInt8(ascii: "T") || b[10] == UInt8(ascii: "t"),
      let hour = digits(11, 2), b[13] == UInt8(ascii: ":"), let minute = digits(14, 2),
      b[16] == UInt8(ascii: ":"), let second = digits(17, 2)
    else { return nil }
    var index = 19
    var nanos = 0
    if index < b.count, b[index] == UInt8(ascii: ".") {
      index += 1
      var scale = 100_000_000
      while index < b.count, b[index] >= 48, b[index] <= 57 {
        nanos += Int(b[index] - 48) * scale
        scale /= 10
        index += 1
      }
    }
    var offset = 0
    guard index < b.count else { return nil }
    if b[index] == UInt8(ascii: "Z") || b[index] == UInt8(ascii: "z") {
      index += 1
    } else if b[index] == UInt8(ascii: "+") || b[index] == UInt8(ascii: "-") {
      guard let oh = digits(index + 1, 2), b.count > index + 3, b[index + 3] == UInt8(ascii: ":"),
        let om = digits(index + 4, 2)
      else { return nil }
      offset = (oh * 3600 + om * 60) * (b[index] == UInt8(ascii: "+") ? 1 : -1)
      index += 6
    } else {
      return nil
    }
    guard index == b.count, (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60,
      second <= 60
    else { return nil }
    var parts = tm()
    parts.tm_year = Int32(year - 1900)
    parts.tm_mon = Int32(month - 1)
    parts.tm_mday = Int32(day)
    parts.tm_hour = Int32(hour)
    parts.tm_min = Int32(minute)
    parts.tm_sec = Int32(second)
    return Timestamp(seconds: timegm(&parts) - offset, nanoseconds: nanos)
  }

  /// gcsfuse writes RFC 3339; gsutil writes whole seconds since the epoch.
  static func parseMtime(_ text: String) -> Timestamp? {
    if let seconds = Int(text) { return Timestamp(seconds: seconds) }
    return parse(text)
  }
}

extension Timestamp {
  /// Now, truncated to the whole seconds an upload stores as
  /// `goog-reserved-file-mtime`: a staged file shows what it will keep.
  static func wholeSecondsNow() -> Timestamp { Timestamp(seconds: Timestamp.now().seconds) }
}

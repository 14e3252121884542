import FUSE
import TimeFormats

/// RFC 3339 timestamps as the service writes them (`2024-05-01T10:20:30.123Z`).
enum RFC3339 {
  static func parse(_ text: String) -> Timestamp? {
    RFC3339Time(text).map { Timestamp(seconds: $0.seconds, nanoseconds: $0.nanoseconds) }
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

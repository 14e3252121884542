import Logging

#if canImport(Glibc)
  import Glibc
#endif

/// Logs one line per message to a file descriptor, or to syslog for a daemon
/// with nowhere else to write.
struct LineLogHandler: LogHandler {
  enum Sink: Sendable {
    case descriptor(Int32)
    case syslog
  }

  let label: String
  let sink: Sink
  var logLevel: Logger.Level
  var metadata: Logger.Metadata = [:]

  subscript(metadataKey key: String) -> Logger.Metadata.Value? {
    get { metadata[key] }
    set { metadata[key] = newValue }
  }

  func log(event: LogEvent) {
    var text = "\(event.level): \(event.message)"
    let merged = metadata.merging(event.metadata ?? [:]) { $1 }
    if !merged.isEmpty {
      text += " " + merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
    }
    switch sink {
    case .descriptor(let fd):
      var now = timespec()
      clock_gettime(CLOCK_REALTIME, &now)
      var parts = tm()
      var seconds = now.tv_sec
      gmtime_r(&seconds, &parts)
      let stamp =
        padded(Int(parts.tm_year) + 1900, 4) + "-" + padded(Int(parts.tm_mon) + 1, 2) + "-"
        + padded(Int(parts.tm_mday), 2) + "T" + padded(Int(parts.tm_hour), 2) + ":"
        + padded(Int(parts.tm_min), 2) + ":" + padded(Int(parts.tm_sec), 2) + "Z"
      let line = "\(stamp) \(label) \(text)\n"
      line.utf8CString.withUnsafeBufferPointer { buffer in
        _ = write(fd, buffer.baseAddress, buffer.count - 1)
      }
    case .syslog:
      let priority: Int32 =
        switch event.level {
        case .trace, .debug: LOG_DEBUG
        case .info: LOG_INFO
        case .notice: LOG_NOTICE
        case .warning: LOG_WARNING
        case .error: LOG_ERR
        case .critical: LOG_CRIT
        }
      text.withCString { message in withVaList([message]) { vsyslog(priority, "%s", $0) } }
    }
  }
}

private func padded(_ value: Int, _ width: Int) -> String {
  let digits = "\(value)"
  return String(repeating: "0", count: Swift.max(0, width - digits.count)) + digits
}

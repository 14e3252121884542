import Logging

#if canImport(Glibc)
  import Glibc
#endif

/// Logs one line per message to a file descriptor, or to syslog for a daemon
/// with nowhere else to write; as text, or as one JSON object a line
/// (``LogLineFormat``) for log pipelines.
struct LineLogHandler: LogHandler {
  enum Sink: Sendable {
    case descriptor(Int32)
    case syslog
  }

  let label: String
  let sink: Sink
  var format: LogLineFormat = .text
  var logLevel: Logger.Level
  var metadata: Logger.Metadata = [:]

  subscript(metadataKey key: String) -> Logger.Metadata.Value? {
    get { metadata[key] }
    set { metadata[key] = newValue }
  }

  func log(event: LogEvent) {
    let merged = metadata.merging(event.metadata ?? [:]) { $1 }
    let message = "\(event.message)"
    switch (sink, format) {
    case (.descriptor(let fd), .text):
      var text = "\(LogLineFormat.timestamp(milliseconds: false)) \(label) \(event.level): \(message)"
      if !merged.isEmpty {
        text += " " + merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
      }
      Self.write(text + "\n", to: fd)
    case (.descriptor(let fd), .json):
      let line = LogLineFormat.json(
        time: LogLineFormat.timestamp(), level: event.level, message: message, component: label,
        metadata: merged)
      Self.write(line + "\n", to: fd)
    case (.syslog, _):
      let priority: Int32 =
        switch event.level {
        case .trace, .debug: LOG_DEBUG
        case .info: LOG_INFO
        case .notice: LOG_NOTICE
        case .warning: LOG_WARNING
        case .error: LOG_ERR
        case .critical: LOG_CRIT
        }
      var text: String
      if format == .json {
        text = LogLineFormat.json(
          time: LogLineFormat.timestamp(), level: event.level, message: message, component: label,
          metadata: merged)
      } else {
        text = "\(event.level): \(message)"
        if !merged.isEmpty {
          text +=
            " " + merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        }
      }
      text.withCString { message in withVaList([message]) { vsyslog(priority, "%s", $0) } }
    }
  }

  private static func write(_ line: String, to fd: Int32) {
    line.utf8CString.withUnsafeBufferPointer { buffer in
      _ = Glibc.write(fd, buffer.baseAddress, buffer.count - 1)
    }
  }
}

import Tracing

#if canImport(Glibc)
  import Glibc
#endif

/// What request arrived, and when: taken first thing in each callback and
/// handed to the one place that answers it, which counts it
/// (``RequestMetrics``) and ends its span (``startSpan()``).
struct Arrival: Sendable {
  let operation: FUSEOperation
  let instant: ContinuousClock.Instant
  /// The same moment as the tracer's clock counts it: the span's start.
  let started: DefaultTracerClock.Instant
  /// The inode the request names, or the directory a name is looked for in.
  let inode: UInt64?
  let parent: UInt64?
  /// The bytes asked for (read, readdir) or given (write).
  let size: Int?

  init(_ operation: FUSEOperation, inode: UInt64? = nil, parent: UInt64? = nil, size: Int? = nil) {
    self.operation = operation
    self.instant = .now
    self.started = DefaultTracerClock.now
    self.inode = inode
    self.parent = parent
    self.size = size
  }

  /// The request's span, `FUSE read` and so on, from its arrival: a new trace,
  /// whose context the work runs in so the storage requests it makes are its
  /// children. A no-op span unless a tracer is bootstrapped.
  func startSpan() -> any Span {
    let span = Tracing.startSpan(
      "FUSE \(operation.rawValue)", context: .topLevel, ofKind: .server, at: started)
    guard span.isRecording else { return span }
    span.updateAttributes { attributes in
      attributes.set("fuse.operation", value: .string(operation.rawValue))
      if let inode { attributes.set("fuse.inode", value: .int64(Int64(bitPattern: inode))) }
      if let parent { attributes.set("fuse.parent", value: .int64(Int64(bitPattern: parent))) }
      if let size { attributes.set("fuse.size", value: .int64(Int64(size))) }
    }
    return span
  }
}

extension Span {
  /// Ends a request's span with its answer: `error` (0: success) and, for
  /// data, the bytes replied. A missing name or attribute, or a namespace
  /// not offered (ENOENT, ENODATA, EOPNOTSUPP: `ls -l` asks for
  /// `security.selinux`) is an answer, not a failure; any other errno marks
  /// the span an error.
  func answered(error: Int32, bytes: @autoclosure () -> Int?) {
    if isRecording {
      let bytes = bytes()  // only when recording: the reply's cast costs on every request
      updateAttributes { attributes in
        attributes.set("fuse.errno", value: .int64(Int64(error)))
        if error != 0 { attributes.set("fuse.errno.name", value: .string(RequestMetrics.errnoName(error))) }
        if let bytes { attributes.set("fuse.reply.bytes", value: .int64(Int64(bytes))) }
      }
      if error != 0 && error != ENOENT && error != ENODATA && error != EOPNOTSUPP {
        setStatus(SpanStatus(code: .error, message: RequestMetrics.errnoName(error)))
      }
    }
    end()
  }
}

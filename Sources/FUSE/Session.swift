import CFuse
import Logging
import NIOCore
import Synchronization
import Tracing

#if canImport(Glibc)
  import Glibc
#endif

/// How the kernel mount is set up.
public struct MountOptions: Sendable {
  /// Shown as the source in /proc/mounts.
  public var fsName: String
  public var subtype: String
  public var readOnly = false
  public var allowOther = false
  /// A helper process unmounts if this one dies without doing so (kill -9).
  public var autoUnmount = true

  public init(fsName: String, subtype: String) {
    self.fsName = fsName
    self.subtype = subtype
  }

  var arguments: [String] {
    // nosuid,nodev whatever else is asked: a mode bit or a device node
    // stored in the bucket is shown, never honoured (docs/SEMANTICS.md#attributes-security).
    var list = ["fsname=\(fsName)", "subtype=\(subtype)", "default_permissions", "nosuid", "nodev"]
    if readOnly { list.append("ro") }
    if allowOther { list.append("allow_other") }
    if autoUnmount { list.append("auto_unmount") }
    return ["bucketfs", "-o", list.joined(separator: ",")]
  }
}

public struct MountError: Error, CustomStringConvertible {
  public let description: String
}

/// One libfuse session: mounts, runs the request loop on the calling thread,
/// and hands each request to a ``FileSystem`` with an asynchronous reply.
public final class FUSESession: @unchecked Sendable {
  let fileSystem: FileSystem
  let logger: Logger
  let metrics: RequestMetrics
  private var session: OpaquePointer?
  /// The session for notifications and exit requests from other threads,
  /// and how many such calls are under way. Cleared before the session is
  /// destroyed, which waits for the calls under way: none outlives it, and
  /// none runs under the lock (a notification may block in the kernel).
  private let notifyTarget = Mutex<NotifyTarget>(NotifyTarget())
  private let inflight = Mutex<[UInt: InflightRequest]>([:])
  private let loopThread = Mutex<pthread_t?>(nil)
  private let loopRunning = Atomic<Bool>(false)

  public init(fileSystem: FileSystem, logger: Logger, metrics: RequestMetrics = RequestMetrics()) {
    self.fileSystem = fileSystem
    self.logger = logger
    self.metrics = metrics
  }

  /// Creates the session and mounts it at `mountpoint`.
  public func mount(at mountpoint: String, options: MountOptions) throws(MountError) {
    FUSELog.install(logger)
    var operations = makeOperations()
    let arguments = options.arguments
    var cStrings = arguments.map { strdup($0) }
    defer { cStrings.forEach { free($0) } }
    let created: OpaquePointer? = cStrings.withUnsafeMutableBufferPointer { buffer in
      var args = fuse_args(argc: Int32(buffer.count), argv: buffer.baseAddress, allocated: 0)
      defer { fuse_opt_free_args(&args) }
      return cfuse_session_new(&args, &operations, Unmanaged.passUnretained(self).toOpaque())
    }
    guard let created else {
      throw MountError(description: FUSELog.lastError ?? "could not create the FUSE session")
    }
    guard fuse_session_mount(created, mountpoint) == 0 else {
      fuse_session_destroy(created)
      throw MountError(description: FUSELog.lastError ?? "could not mount \(mountpoint)")
    }
    if cfuse_enable_parallel_dirops(created) != 0 {
      logger.warning("could not enable parallel directory operations")
    }
    self.session = created
    notifyTarget.withLock { $0.raw = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(created))) }
  }

  /// Serves requests on the calling thread until unmounted or ``requestExit()``.
  @discardableResult
  public func run() -> Int32 {
    guard let session else { return -1 }
    installWakeHandler()
    loopThread.withLock { $0 = pthread_self() }
    loopRunning.store(true, ordering: .sequentiallyConsistent)
    let result = fuse_session_loop(session)
    loopRunning.store(false, ordering: .sequentiallyConsistent)
    loopThread.withLock { $0 = nil }
    return result
  }

  /// Asks the loop to return; safe from any thread (not a signal handler),
  /// also during and after ``shutdown(grace:)`` (a second SIGINT): the
  /// session is reached only through the lock that shutdown clears it under.
  public func requestExit() {
    guard withSession({ fuse_session_exit($0) }) != nil else { return }
    // The loop thread may sit in read(2) on /dev/fuse: interrupt it until it
    // notices. Repeated because the signal can land just before the read.
    for _ in 0..<100 where loopRunning.load(ordering: .sequentiallyConsistent) {
      if let thread = loopThread.withLock({ $0 }) { pthread_kill(thread, SIGUSR1) }
      usleep(20_000)
    }
  }

  /// Lets in-flight requests finish (cancelling them after `grace` seconds),
  /// unmounts and releases the session.
  public func shutdown(grace: Double) {
    guard let session else { return }
    let start = ContinuousClock.now
    var cancelled = false
    while !inflight.withLock({ $0.isEmpty }) {
      let waited = ContinuousClock.now - start
      if !cancelled && waited >= .milliseconds(Int64(grace * 1000)) {
        inflight.withLock { $0.values.forEach { $0.cancel() } }
        cancelled = true
      }
      if waited >= .milliseconds(Int64(grace * 1000) + 5000) { break }
      usleep(10_000)
    }
    notifyTarget.withLock { $0.raw = 0 }
    fuse_session_unmount(session)
    // A notification under way ends once the kernel connection is gone.
    let unmounted = ContinuousClock.now
    while notifyTarget.withLock({ $0.users > 0 }) && ContinuousClock.now - unmounted < .seconds(5) {
      usleep(1_000)
    }
    if notifyTarget.withLock({ $0.users > 0 }) {
      logger.error(
        "a kernel notification is still under way at shutdown; leaving the session to the process exit")
    } else if inflight.withLock({ $0.isEmpty }) {
      fuse_session_destroy(session)
    } else {
      // A reply after destroy would touch freed memory; leaking is safer.
      logger.error("requests still in flight at shutdown; leaving the session to the process exit")
    }
    self.session = nil
  }

  /// Calls `body` with the live session, outside the lock, or returns nil
  /// once it is shut down.
  func withSession<T>(_ body: (OpaquePointer) -> T) -> T? {
    let pointer = notifyTarget.withLock { target -> OpaquePointer? in
      guard target.raw != 0, let pointer = OpaquePointer(bitPattern: target.raw) else { return nil }
      target.users += 1
      return pointer
    }
    guard let pointer else { return nil }
    defer { notifyTarget.withLock { $0.users -= 1 } }
    return body(pointer)
  }

  /// Runs `operation` in a task and replies with its result through `reply`.
  func serve<T: Sendable>(
    _ raw: fuse_req_t?, _ arrival: Arrival, _ operation: @escaping @Sendable () async throws -> T,
    reply: @escaping @Sendable (Request, T) -> Void
  ) {
    serveWithStatus(raw, arrival, operation) { request, value in
      reply(request, value)
      return 0
    }
  }

  /// Like ``serve(_:_:_:reply:)``, for replies that may answer with an
  /// error of their own (the xattr size protocol's ERANGE): `reply` returns it, or 0.
  func serveWithStatus<T: Sendable>(
    _ raw: fuse_req_t?, _ arrival: Arrival, _ operation: @escaping @Sendable () async throws -> T,
    reply: @escaping @Sendable (Request, T) -> Int32
  ) {
    guard let raw else { return }
    let request = Request(raw: raw)
    let key = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(raw)))
    let record = InflightRequest()
    inflight.withLock { $0[key] = record }
    // Registered before the task exists: the reply frees the request.
    fuse_req_interrupt_func(raw, interruptHook, Unmanaged.passUnretained(self).toOpaque())
    let logger = self.logger
    // Read on the loop thread: the context belongs to the request.
    let context = fuse_req_ctx(raw).pointee
    let caller = Caller(uid: context.uid, gid: context.gid)
    let task = Task {
      let span = arrival.startSpan()
      let result: Result<T, Errno>
      do {
        result = .success(
          try await ServiceContext.withValue(span.context) {
            try await Caller.$current.withValue(caller) { try await operation() }
          })
      } catch let error as Errno {
        result = .failure(error)
      } catch is CancellationError {
        result = .failure(.interrupted)
      } catch {
        logger.error("unexpected error: \(error)")
        result = .failure(.io)
      }
      // Forget the request before replying: after the reply its address may be reused.
      _ = self.inflight.withLock { $0.removeValue(forKey: key) }
      let error: Int32
      switch result {
      case .success(let value): error = reply(request, value)
      case .failure(let errno):
        fuse_reply_err(request.raw, errno.code)
        error = errno.code
      }
      self.metrics.answered(arrival, error: error)
      span.answered(error: error, bytes: error == 0 ? replyBytes(result) : nil)
    }
    record.attach(task)
  }

  /// Counts a request answered on the loop thread (`error` 0: success), and
  /// records its span (no task and no storage request under it). `forget`s
  /// have no answer and no span.
  func answered(_ arrival: Arrival, error: Int32 = 0, bytes: @autoclosure () -> Int? = nil) {
    metrics.answered(arrival, error: error)
    guard arrival.operation != .forget && arrival.operation != .forgetMulti else { return }
    arrival.startSpan().answered(error: error, bytes: bytes())
  }

  func interrupt(_ raw: fuse_req_t) {
    let key = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(raw)))
    inflight.withLock { $0[key]?.cancel() }
  }

  private func installWakeHandler() {
    var action = sigaction()
    action.__sigaction_handler.sa_handler = { _ in }
    sigemptyset(&action.sa_mask)
    action.sa_flags = 0  // no SA_RESTART: the read must fail with EINTR
    sigaction(SIGUSR1, &action, nil)
  }
}

/// The bytes of data a reply carries (a read's), for its span.
func replyBytes<T>(_ result: Result<T, Errno>) -> Int? {
  guard case .success(let value) = result, let pieces = value as? [ByteBuffer] else { return nil }
  return pieces.reduce(0) { $0 + $1.readableBytes }
}

/// The session's address for calls from other threads, and how many are under way.
struct NotifyTarget {
  var raw: UInt = 0
  var users = 0
}

/// A request pointer that may cross into a task; libfuse allows a reply from
/// any thread, once.
struct Request: @unchecked Sendable {
  let raw: fuse_req_t
}

/// The task serving one request, cancellable by a kernel interrupt.
final class InflightRequest: @unchecked Sendable {
  private let state = Mutex<(task: Task<Void, Never>?, cancelled: Bool)>((nil, false))

  func attach(_ task: Task<Void, Never>) {
    let cancelled = state.withLock { state in
      state.task = task
      return state.cancelled
    }
    if cancelled { task.cancel() }
  }

  func cancel() {
    let task = state.withLock { state in
      state.cancelled = true
      return state.task
    }
    task?.cancel()
  }
}

private let interruptHook: @convention(c) (fuse_req_t?, UnsafeMutableRawPointer?) -> Void = { raw, data in
  guard let raw, let data else { return }
  Unmanaged<FUSESession>.fromOpaque(data).takeUnretainedValue().interrupt(raw)
}

/// Routes libfuse's own log lines to swift-log.
enum FUSELog {
  private static let state = Mutex<(logger: Logger?, lastError: String?)>((nil, nil))

  static var lastError: String? { state.withLock { $0.lastError } }

  static func install(_ logger: Logger) {
    state.withLock { $0.logger = logger }
    cfuse_set_log_sink { level, line in
      guard let line else { return }
      let text = String(cString: line)
      let logger = FUSELog.state.withLock { state -> Logger? in
        if level <= 3 { state.lastError = text }
        return state.logger
      }
      logger?.log(level: level <= 3 ? .error : level <= 5 ? .info : .debug, "libfuse: \(text)")
    }
  }
}

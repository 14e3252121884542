import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// SIGINT, SIGTERM and SIGHUP are blocked in every thread from the start and
/// taken by one thread with sigwait, so a signal never lands in a thread that
/// cannot act on it (README.md, Usage: finish in-flight work, unmount, exit 0).
enum Signals {
  private static let handler = Mutex<(@Sendable (Int32) -> Void)?>(nil)
  static let watched = [SIGINT, SIGTERM, SIGHUP]

  static func blockAndWatch() {
    var set = sigset_t()
    sigemptyset(&set)
    for signal in watched { sigaddset(&set, signal) }
    pthread_sigmask(SIG_BLOCK, &set, nil)
    var thread = pthread_t()
    pthread_create(
      &thread, nil,
      { _ in
        var set = sigset_t()
        sigemptyset(&set)
        for signal in Signals.watched { sigaddset(&set, signal) }
        while true {
          var signal: Int32 = 0
          guard sigwait(&set, &signal) == 0 else { continue }
          if let handler = Signals.handler.withLock({ $0 }) {
            handler(signal)
          } else {
            _exit(128 + signal)  // nothing mounted yet: nothing to clean up
          }
        }
      }, nil)
  }

  /// What a signal does from now on.
  static func onSignal(_ action: @escaping @Sendable (Int32) -> Void) {
    handler.withLock { $0 = action }
  }
}

/// systemd's readiness protocol: one datagram to $NOTIFY_SOCKET.
enum ServiceManager {
  static func notify(_ state: String) {
    guard let path = getenv("NOTIFY_SOCKET").map({ String(cString: $0) }), !path.isEmpty else { return }
    let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { return }
    defer { close(fd) }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    var bytes = Array(path.utf8)
    if bytes.first == UInt8(ascii: "@") { bytes[0] = 0 }  // abstract namespace
    let capacity = MemoryLayout.size(ofValue: address.sun_path)
    guard bytes.count < capacity else { return }
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
      for (index, byte) in bytes.enumerated() { raw[index] = byte }
    }
    let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (bytes.first == 0 ? 0 : 1))
    _ = state.withCString { message in
      withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
          sendto(fd, message, strlen(message), Int32(MSG_NOSIGNAL), $0, length)
        }
      }
    }
  }
}

/// How a mount reports its outcome: to the terminal in the foreground, or
/// through a pipe to the parent that daemonized it and waits for one line.
final class Outcome: Sendable {
  private let descriptor: Mutex<Int32?>

  init(readyDescriptor: Int32?) {
    descriptor = Mutex(readyDescriptor)
  }

  func ready() {
    ServiceManager.notify("READY=1")
    send("ready\n")
  }

  /// One clear line, then the caller exits non-zero.
  func fail(_ message: String) {
    let line = "bucketfs: \(message)\n"
    if !send("error: \(message)\n") { writeStandardError(line) }
  }

  @discardableResult
  private func send(_ line: String) -> Bool {
    guard
      let fd = descriptor.withLock({ value -> Int32? in
        defer { value = nil }
        return value
      })
    else { return false }
    line.utf8CString.withUnsafeBufferPointer { _ = write(fd, $0.baseAddress, $0.count - 1) }
    close(fd)
    return true
  }
}

func writeStandardError(_ text: String) {
  text.utf8CString.withUnsafeBufferPointer { _ = write(2, $0.baseAddress, $0.count - 1) }
}

/// Starts this program again in the background with `arguments` and waits for
/// its one-line outcome. Returns the exit status for the foreground process.
func daemonize(arguments: [String], logFile: String?) -> Int32 {
  var fds: [Int32] = [0, 0]
  guard pipe(&fds) == 0 else {
    writeStandardError("bucketfs: cannot create a pipe: \(String(cString: strerror(errno)))\n")
    return 1
  }
  let (readEnd, writeEnd) = (fds[0], fds[1])
  _ = fcntl(readEnd, F_SETFD, FD_CLOEXEC)

  var actions = posix_spawn_file_actions_t()
  posix_spawn_file_actions_init(&actions)
  defer { posix_spawn_file_actions_destroy(&actions) }
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
  let output = logFile ?? "/dev/null"
  posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_APPEND, 0o600)
  posix_spawn_file_actions_adddup2(&actions, 1, 2)

  var attributes = posix_spawnattr_t()
  posix_spawnattr_init(&attributes)
  defer { posix_spawnattr_destroy(&attributes) }
  var empty = sigset_t()
  sigemptyset(&empty)
  posix_spawnattr_setsigmask(&attributes, &empty)
  let setsid: Int16 = 0x80  // POSIX_SPAWN_SETSID: leave the terminal's session
  posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK) | setsid)

  let full = arguments + ["--ready-fd", String(writeEnd)]
  var argv = full.map { strdup($0) } + [nil]
  defer { argv.forEach { free($0) } }
  var pid: pid_t = 0
  let spawned = posix_spawn(&pid, "/proc/self/exe", &actions, &attributes, &argv, environ)
  close(writeEnd)
  guard spawned == 0 else {
    writeStandardError("bucketfs: cannot start in the background: \(String(cString: strerror(spawned)))\n")
    return 1
  }

  var line: [UInt8] = []
  var byte: UInt8 = 0
  while read(readEnd, &byte, 1) == 1, byte != UInt8(ascii: "\n") { line.append(byte) }
  close(readEnd)
  let text = String(decoding: line, as: UTF8.self)
  if text == "ready" { return 0 }
  if text.hasPrefix("error: ") {
    writeStandardError("bucketfs: \(text.dropFirst(7))\n")
  } else {
    var status: Int32 = 0
    waitpid(pid, &status, 0)
    writeStandardError("bucketfs: stopped before the mount was ready (status \(status))\n")
  }
  return 1
}

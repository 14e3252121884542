#if canImport(Glibc)
  import Glibc
#endif

/// Runs a program to its end with its standard output captured, within a time bound, without
/// blocking a thread of Swift's pool: the pipe is read without blocking, between short sleeps.
enum ChildProcess {
  struct Outcome {
    /// The exit status; -1 when a signal ended it.
    var status: Int32
    var output: [UInt8]
    /// Why it failed, in words that quote none of its output.
    var failure: String
  }

  static let outputLimit = 1 << 20

  static func run(
    _ arguments: [String], environment: [String: String], timeoutMilliseconds: Int, name: String
  ) async throws -> Outcome {
    func failure(_ reason: String) -> CredentialsError {
      .subjectTokenUnavailable(source: name, reason: reason)
    }
    var pipeEnds: [Int32] = [0, 0]
    guard pipe(&pipeEnds) == 0 else { throw failure("pipe: \(String(cString: strerror(errno)))") }
    let (reader, writer) = (pipeEnds[0], pipeEnds[1])
    // Not inherited by other children started meanwhile (the child gets a dup2 of `writer`).
    _ = fcntl(reader, F_SETFD, FD_CLOEXEC)
    _ = fcntl(writer, F_SETFD, FD_CLOEXEC)
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_adddup2(&actions, writer, 1)
    // Its errors would go where the daemon's terminal no longer is; they are not read.
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
    let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
    let envp: [UnsafeMutablePointer<CChar>?] =
      environment.sorted { $0.key < $1.key }.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer {
      for pointer in argv { free(pointer) }
      for pointer in envp { free(pointer) }
    }
    var pid: pid_t = 0
    let spawned = posix_spawnp(&pid, arguments[0], &actions, nil, argv, envp)
    close(writer)
    guard spawned == 0 else {
      close(reader)
      throw failure("cannot run it: \(String(cString: strerror(spawned)))")
    }
    _ = fcntl(reader, F_SETFL, fcntl(reader, F_GETFL) | O_NONBLOCK)
    defer { close(reader) }

    let deadline = ContinuousClock.now + .milliseconds(timeoutMilliseconds)
    var output: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 64 << 10)
    var open = true
    var status: Int32?
    while true {
      while open {
        let count = chunk.withUnsafeMutableBytes { read(reader, $0.baseAddress, $0.count) }
        if count > 0 {
          if output.count + count > outputLimit {
            kill(pid, SIGKILL)
            _ = reap(pid, blocking: true)
            throw failure("its output is larger than 1 MiB")
          }
          output += chunk[0..<count]
        } else if count == 0 {
          open = false
        } else if errno != EINTR {
          if errno != EAGAIN && errno != EWOULDBLOCK { open = false }
          break
        }
      }
      if status == nil { status = reap(pid, blocking: false) }
      if let status, !open { return outcome(status, output) }
      if let status {
        // It ended, but something it started keeps the pipe open: what it wrote is enough.
        if ContinuousClock.now > deadline { return outcome(status, output) }
      } else if ContinuousClock.now > deadline {
        kill(pid, SIGKILL)
        _ = reap(pid, blocking: true)
        throw failure("it did not finish within \(timeoutMilliseconds) ms")
      }
      do {
        try await Task.sleep(nanoseconds: 10_000_000)
      } catch {
        kill(pid, SIGKILL)
        _ = reap(pid, blocking: true)
        throw error
      }
    }
  }

  private static func outcome(_ status: Int32, _ output: [UInt8]) -> Outcome {
    let reason =
      status >= 0 ? "it exited with status \(status)" : "it was ended by a signal"
    return Outcome(status: status, output: output, failure: reason)
  }

  /// The exit status once it has ended (-1 for a signal), nil while it runs.
  private static func reap(_ pid: pid_t, blocking: Bool) -> Int32? {
    var raw: Int32 = 0
    while true {
      let result = waitpid(pid, &raw, blocking ? 0 : WNOHANG)
      if result == 0 { return nil }
      if result < 0 {
        if errno == EINTR { continue }
        return -1  // reaped elsewhere (SIGCHLD ignored): its output decides
      }
      // WIFEXITED / WEXITSTATUS, which Swift does not import.
      return raw & 0x7f == 0 ? (raw >> 8) & 0xff : -1
    }
  }
}

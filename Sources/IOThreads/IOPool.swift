import NIOPosix
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// Threads for blocking file work (pread, pwrite, a whole-file CRC-32C), so
/// that none of it runs on Swift's concurrency pool, which has one thread
/// per core and also runs every request of the mount.
///
/// Two kinds of work:
/// - ``run(_:)``: a caller awaits the result (a read served from disk). It
///   goes ahead of all background work.
/// - ``submit(holding:_:)``: background work nobody waits for (writing bytes
///   just read into the cache). Queued only while the background work queued
///   or running holds less than `byteLimit` bytes of memory; else refused, so
///   a disk slower than the network costs the work, never memory or a reader's time.
///
/// Each kind has threads of its own, half of them each. Background threads
/// run at the lowest priority (nice 19): on a machine short of CPU, the
/// cache's file work waits for the requests (and, its queue full, is dropped)
/// instead of taking their time.
///
/// Background work also waits for a pause in the work it would compete
/// with: while ``busy()`` keeps being called (a mount's reads keep coming),
/// a job starts only once `quiet` has passed since the last call, or once it
/// has waited `maxDeferral`. A stream of reads thus runs alone, its fills
/// held in memory (within `byteLimit`, the rest dropped) and written after it.
public final class IOPool: Sendable {
  private struct Job: Sendable {
    let id: UInt64
    let bytes: Int
    /// When it was queued (``IOPool/now()``, nanoseconds).
    let queued: UInt64
    /// Runs the work (true), or says it will not run (false: cancelled before it began).
    let body: @Sendable (Bool) -> Void
  }
  private struct State {
    var awaited: [Job] = []
    var background: [Job] = []
    /// Bytes held by background work queued or running.
    var heldBytes = 0
    /// Worker loops submitted to each kind's threads and not yet finished.
    var awaitedLoops = 0
    var backgroundLoops = 0
    var running = 0
    var accepting = true
    var nextID: UInt64 = 0
    var idle: [CheckedContinuation<Void, Never>] = []

    var isIdle: Bool { awaited.isEmpty && background.isEmpty && running == 0 }

    /// The waiters for idleness, when it has come.
    mutating func takeIdleWaiters() -> [CheckedContinuation<Void, Never>] {
      guard isIdle else { return [] }
      defer { idle = [] }
      return idle
    }
  }

  public let threadCount: Int
  public let byteLimit: Int
  private let quietNanos: UInt64
  private let maxDeferralNanos: UInt64
  /// When ``busy()`` was last called (``now()``, nanoseconds).
  private let lastBusy = Atomic<UInt64>(0)
  private let awaitedThreads: NIOThreadPool
  private let backgroundThreads: NIOThreadPool
  private let awaitedCount: Int
  private let backgroundCount: Int
  private let state = Mutex(State())

  /// Thrown by ``run(_:)`` once ``shutdown()`` has begun.
  public struct Stopped: Error {}

  /// `threadCount` threads (at least 2), half for each kind of work;
  /// background work may hold `byteLimit` bytes at once, and waits for
  /// `quiet` after the last ``busy()``, but no longer than `maxDeferral`.
  public init(threadCount: Int, byteLimit: Int, quiet: Duration = .zero, maxDeferral: Duration = .zero) {
    self.threadCount = max(threadCount, 2)
    self.byteLimit = max(byteLimit, 0)
    quietNanos = Self.nanoseconds(quiet)
    maxDeferralNanos = Self.nanoseconds(maxDeferral)
    awaitedCount = self.threadCount / 2
    backgroundCount = self.threadCount - awaitedCount
    awaitedThreads = NIOThreadPool(numberOfThreads: awaitedCount)
    backgroundThreads = NIOThreadPool(numberOfThreads: backgroundCount)
    awaitedThreads.start()
    backgroundThreads.start()
  }

  /// Runs `body` on a pool thread, ahead of any background work, and
  /// returns what it returns. Cancelled before it begins, it never runs.
  public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    let id = state.withLock { state -> UInt64 in
      state.nextID += 1
      return state.nextID
    }
    return try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
        let job = Job(id: id, bytes: 0, queued: 0) { go in
          guard go else { return continuation.resume(throwing: CancellationError()) }
          continuation.resume(with: Result(catching: body))
        }
        if !enqueue(job, awaited: true) { continuation.resume(throwing: Stopped()) }
      }
    } onCancel: {
      let (job, waiters) = state.withLock { state -> (Job?, [CheckedContinuation<Void, Never>]) in
        guard let index = state.awaited.firstIndex(where: { $0.id == id }) else { return (nil, []) }
        let job = state.awaited.remove(at: index)
        return (job, state.takeIdleWaiters())
      }
      job?.body(false)
      for waiter in waiters { waiter.resume() }
    }
  }

  /// Queues `body` as background work holding `bytes` of memory until it
  /// ends; false (nothing queued) when that would take the work held past
  /// the limit, or the pool is shutting down.
  @discardableResult
  public func submit(holding bytes: Int, _ body: @escaping @Sendable () -> Void) -> Bool {
    let job = Job(id: 0, bytes: max(bytes, 0), queued: Self.now()) { go in if go { body() } }
    return enqueue(job, awaited: false)
  }

  /// Notes work going on that background work should not compete with (a
  /// read): queued background work waits for `quiet` after the last call.
  public func busy() {
    guard quietNanos > 0 else { return }
    lastBusy.store(Self.now(), ordering: .relaxed)
  }

  /// Bytes held by background work queued or running now.
  public var heldBytes: Int { state.withLock { $0.heldBytes } }

  /// Waits until no work is queued or running.
  public func idle() async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
      let now = state.withLock { state -> Bool in
        if state.isIdle { return true }
        state.idle.append(continuation)
        return false
      }
      if now { continuation.resume() }
    }
  }

  /// Refuses new work and waits up to `patience` for the work queued and
  /// running to finish, then stops the threads; false (threads left
  /// running, to end with the process) when the work took longer.
  public func shutdown(patience: Duration) async -> Bool {
    state.withLock { $0.accepting = false }
    let done = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
      let answer = Answer(continuation)
      let timer = Task {
        guard (try? await Task.sleep(for: patience)) != nil else { return }  // cancelled: idle came first
        answer.give(false)
      }
      Task {
        await idle()
        answer.give(true)
        timer.cancel()
      }
    }
    if done {
      try? await awaitedThreads.shutdownGracefully()
      try? await backgroundThreads.shutdownGracefully()
    }
    return done
  }

  private func enqueue(_ job: Job, awaited: Bool) -> Bool {
    let startLoop = state.withLock { state -> Bool? in
      guard state.accepting else { return nil }
      if awaited {
        state.awaited.append(job)
      } else {
        guard state.heldBytes + job.bytes <= byteLimit else { return nil }
        state.heldBytes += job.bytes
        state.background.append(job)
      }
      if awaited {
        guard state.awaitedLoops < awaitedCount else { return false }
        state.awaitedLoops += 1
      } else {
        guard state.backgroundLoops < backgroundCount else { return false }
        state.backgroundLoops += 1
      }
      return true
    }
    guard let startLoop else { return false }
    if startLoop {
      if awaited {
        awaitedThreads.submit { [self] _ in work(awaited: true) }
      } else {
        backgroundThreads.submit { [self] _ in
          // The calling thread only (on Linux nice is per thread, and 0 names the caller); raising it needs no privilege.
          setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)
          work(awaited: false)
        }
      }
    }
    return true
  }

  /// One thread's loop over one kind of work; ends when there is none.
  private func work(awaited: Bool) {
    // What the last job held, once it has ended (the job itself let go first).
    var finished: Int?
    while true {
      let (job, pause, waiters) = state.withLock {
        state -> (Job?, UInt64, [CheckedContinuation<Void, Never>]) in
        if let bytes = finished {
          state.running -= 1
          state.heldBytes -= bytes
        }
        var next: Job?
        if awaited {
          if !state.awaited.isEmpty { next = state.awaited.removeFirst() }
        } else if let first = state.background.first {
          // Shutting down, nothing waits any more: the work left lands now.
          let pause = state.accepting ? self.delay(for: first) : 0
          if pause > 0 { return (nil, pause, []) }
          next = state.background.removeFirst()
        }
        guard let next else {
          if awaited { state.awaitedLoops -= 1 } else { state.backgroundLoops -= 1 }
          return (nil, 0, state.takeIdleWaiters())
        }
        state.running += 1
        return (next, 0, [])
      }
      finished = nil
      for waiter in waiters { waiter.resume() }
      if pause > 0 {
        // A pool thread of its own: sleeping here holds up no request.
        usleep(useconds_t(min(pause / 1000, 50_000)))
        continue
      }
      guard let job else { return }
      finished = job.bytes
      job.body(true)
    }
  }

  /// Nanoseconds a background job must still wait: until `quiet` after
  /// the last ``busy()``, or `maxDeferral` after it was queued, whichever
  /// comes first; 0 when it may start.
  private func delay(for job: Job) -> UInt64 {
    guard quietNanos > 0 else { return 0 }
    let now = Self.now()
    let quietEnd = lastBusy.load(ordering: .relaxed) &+ quietNanos
    let deferralEnd = job.queued &+ maxDeferralNanos
    let end = min(quietEnd, deferralEnd)
    return end > now ? end - now : 0
  }

  /// The monotonic clock, in nanoseconds.
  public static func now() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
  }

  private static func nanoseconds(_ duration: Duration) -> UInt64 {
    let (seconds, attoseconds) = duration.components
    guard seconds >= 0, attoseconds >= 0 else { return 0 }
    return UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
  }
}

/// A continuation resumed by the first of two racers.
private final class Answer: Sendable {
  private let continuation: Mutex<CheckedContinuation<Bool, Never>?>

  init(_ continuation: CheckedContinuation<Bool, Never>) {
    self.continuation = Mutex(continuation)
  }

  func give(_ value: Bool) {
    continuation.withLock { $0.take() }?.resume(returning: value)
  }
}

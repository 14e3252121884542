import Synchronization

/// A lock for async work: waiters resume in order, none is lost. A task
/// cancelled while it waits leaves the line and throws `CancellationError`
/// (one that finds the gate free takes it).
final class AsyncGate: Sendable {
  private struct Waiter {
    let id: UInt64
    let continuation: CheckedContinuation<Void, any Error>
  }
  private struct State {
    var locked = false
    var lastID: UInt64 = 0
    var waiters: [Waiter] = []
  }
  private let state = Mutex(State())

  func lock() async throws {
    let id = state.withLock { s in
      s.lastID += 1
      return s.lastID
    }
    try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
        let outcome = state.withLock { s -> Result<Void, any Error>? in
          if !s.locked {
            s.locked = true
            return .success(())
          }
          // Cancelled before it could queue: the handler below found nothing to take out.
          if Task.isCancelled { return .failure(CancellationError()) }
          s.waiters.append(Waiter(id: id, continuation: continuation))
          return nil
        }
        if let outcome { continuation.resume(with: outcome) }
      }
    } onCancel: {
      let left = state.withLock { s -> Waiter? in
        guard let index = s.waiters.firstIndex(where: { $0.id == id }) else { return nil }
        return s.waiters.remove(at: index)
      }
      left?.continuation.resume(throwing: CancellationError())
    }
  }

  func unlock() {
    let next = state.withLock { s -> Waiter? in
      if s.waiters.isEmpty {
        s.locked = false
        return nil
      }
      return s.waiters.removeFirst()
    }
    next?.continuation.resume()
  }

  /// Tasks waiting for the gate.
  var waiting: Int { state.withLock { $0.waiters.count } }

  func run<T: Sendable>(_ body: () async throws -> T) async throws -> T {
    try await lock()
    defer { unlock() }
    return try await body()
  }
}

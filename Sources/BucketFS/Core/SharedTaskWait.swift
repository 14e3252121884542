import Synchronization

/// Waits for a task others may share (a walk's fetch, a lookup burst's
/// page, a stale read's refresh) without holding a cancelled waiter: it
/// stops waiting at once, and the task runs on for the others. A small
/// task of its own carries the result; it ends with the awaited task.
extension Task where Failure == Never {
  /// The value, or nil once the waiting task is cancelled.
  func valueUnlessCancelled() async -> Success? {
    try? await SharedWait.value { await self.value }
  }
}

extension Task where Failure == any Error {
  /// The value, or `CancellationError` once the waiting task is cancelled.
  func valueUnlessCancelled() async throws -> Success {
    try await SharedWait.value { try await self.value }
  }
}

private enum SharedWait {
  /// Where the first of the result and the cancellation is delivered.
  final class Slot<Value: Sendable>: Sendable {
    private struct State {
      var continuation: CheckedContinuation<Value, any Error>?
      var cancelled = false
    }
    private let state = Mutex(State())

    /// Keeps `continuation` for the result, unless the wait is cancelled already.
    func hold(_ continuation: CheckedContinuation<Value, any Error>) -> Bool {
      state.withLock { s in
        if s.cancelled { return false }
        s.continuation = continuation
        return true
      }
    }

    func deliver(_ result: Result<Value, any Error>) {
      state.withLock { s in
        defer { s.continuation = nil }; return s.continuation
      }?.resume(with: result)
    }

    func cancel() {
      let waiting = state.withLock { s in
        s.cancelled = true
        defer { s.continuation = nil }
        return s.continuation
      }
      waiting?.resume(throwing: CancellationError())
    }
  }

  static func value<Value: Sendable>(of work: @escaping @Sendable () async throws -> Value) async throws
    -> Value
  {
    if Task.isCancelled { throw CancellationError() }
    let slot = Slot<Value>()
    return try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { continuation in
        guard slot.hold(continuation) else { return continuation.resume(throwing: CancellationError()) }
        Task {
          do {
            slot.deliver(.success(try await work()))
          } catch {
            slot.deliver(.failure(error))
          }
        }
      }
    } onCancel: {
      slot.cancel()
    }
  }
}

import Synchronization

/// The owner of every task the mount starts apart from a request's own:
/// fetches several requests share (a walk, a lookup burst's page, a read's
/// segment), prefetches, refreshes, uploads and part deletes. Each is held
/// from its start to its end, and the unmount ends them all
/// (``settle()``): it cancels those that only fill a cache and waits for
/// those whose work must land.
final class BackgroundTasks: Sendable {
  /// What the unmount does with a task.
  enum AtUnmount: Sendable {
    /// Cancel it: it only fills a cache, which the unmount drops anyway.
    case cancel
    /// Wait for it: its work must land (an upload, the deletes of parts).
    case finish
  }

  private struct Entry: Sendable {
    let atUnmount: AtUnmount
    let cancel: @Sendable () -> Void
    let wait: @Sendable () async -> Void
  }

  private struct State {
    var entries: [UInt64: Entry] = [:]
    var nextID: UInt64 = 0
    /// Set once the unmount began: cache work started later is cancelled at once.
    var settling = false
  }

  private let state = Mutex(State())

  /// Runs `body` as a task of its own, held until it ends.
  @discardableResult
  func start<Success: Sendable>(
    _ atUnmount: AtUnmount, priority: TaskPriority? = nil,
    _ body: @escaping @Sendable () async throws -> Success
  ) -> Task<Success, any Error> {
    // Registered under the lock the task takes to leave: never left behind.
    let (task, late) = state.withLock { state in
      let id = state.nextID
      state.nextID += 1
      let task = Task(priority: priority) {
        defer { self.ended(id) }
        return try await body()
      }
      return (task, hold(task, id: id, atUnmount, &state))
    }
    // Outside the lock: cancellation handlers run on the spot.
    if late { task.cancel() }
    return task
  }

  /// ``start(_:priority:_:)`` for work that cannot fail.
  @discardableResult
  func start<Success: Sendable>(
    _ atUnmount: AtUnmount, priority: TaskPriority? = nil, _ body: @escaping @Sendable () async -> Success
  ) -> Task<Success, Never> {
    let (task, late) = state.withLock { state in
      let id = state.nextID
      state.nextID += 1
      let task = Task(priority: priority) {
        defer { self.ended(id) }
        return await body()
      }
      return (task, hold(task, id: id, atUnmount, &state))
    }
    if late { task.cancel() }
    return task
  }

  /// Tasks under way (for tests).
  var count: Int { state.withLock { $0.entries.count } }

  /// Cancels the cache work under way and waits for all of it, and for any
  /// task started meanwhile. From now on cache work is cancelled as it starts.
  func settle() async {
    state.withLock { $0.settling = true }
    await waitForAll(cancelling: true)
  }

  /// Waits for the work that must land (``AtUnmount/finish``) under way,
  /// and any started meanwhile; cache work goes on.
  func finish() async {
    await waitForAll(cancelling: false)
  }

  private func waitForAll(cancelling: Bool) async {
    while true {
      let entries = state.withLock { state in
        state.entries.values.filter { cancelling || $0.atUnmount == .finish }
      }
      if entries.isEmpty { return }
      if cancelling {
        for entry in entries where entry.atUnmount == .cancel { entry.cancel() }
      }
      for entry in entries { await entry.wait() }
    }
  }

  /// Holds `task`; whether it is cache work started once the unmount began
  /// (to be cancelled at once).
  private func hold<Success, Failure>(
    _ task: Task<Success, Failure>, id: UInt64, _ atUnmount: AtUnmount, _ state: inout State
  ) -> Bool {
    state.entries[id] = Entry(
      atUnmount: atUnmount, cancel: { task.cancel() }, wait: { _ = await task.result })
    return state.settling && atUnmount == .cancel
  }

  private func ended(_ id: UInt64) {
    _ = state.withLock { $0.entries.removeValue(forKey: id) }
  }
}

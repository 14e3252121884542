/// Waits for `task` to end, at most `patience`; out of patience it cancels
/// the task (an export under way is abandoned) and returns false.
func awaitEnd(of task: Task<Void, Never>?, patience: Duration) async -> Bool {
  await withTaskGroup(of: Bool.self) { group in
    group.addTask {
      await task?.value
      return true
    }
    group.addTask {
      try? await Task.sleep(for: patience)
      return false
    }
    let first = await group.next() ?? false
    if !first { task?.cancel() }
    group.cancelAll()
    return first
  }
}

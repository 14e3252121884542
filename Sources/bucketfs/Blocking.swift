import Dispatch

/// Waits on the calling (non-async) thread for async work; only used before
/// and after the FUSE loop, never inside a FUSE callback.
func blocking<T: Sendable>(_ work: @escaping @Sendable () async -> T) -> T {
  let semaphore = DispatchSemaphore(value: 0)
  let box = ResultBox<T>()
  Task {
    box.value = await work()
    semaphore.signal()
  }
  semaphore.wait()
  return box.value!
}

private final class ResultBox<T>: @unchecked Sendable {
  var value: T?
}

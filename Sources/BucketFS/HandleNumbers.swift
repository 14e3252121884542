import Synchronization

/// One counter for file, directory and write handles, so a handle names one
/// open whatever component holds it.
final class HandleNumbers: Sendable {
  private let last = Atomic<UInt64>(0)

  func next() -> UInt64 {
    last.add(1, ordering: .relaxed).newValue
  }
}

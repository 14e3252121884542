import StorageFake
import Synchronization
import XCTest

@testable import BucketFS

/// A waiter of a shared task stops waiting when it is cancelled; the task
/// runs on for the others.
final class SharedTaskWaitTests: XCTestCase {
  /// A task that ends when `release` is called.
  private final class Held: Sendable {
    private let gate = AsyncStream<Void>.makeStream()
    let finished = Atomic<Bool>(false)

    func task<T: Sendable>(returning value: T) -> Task<T, any Error> {
      Task {
        for await _ in self.gate.stream { break }
        self.finished.store(true, ordering: .sequentiallyConsistent)
        return value
      }
    }

    func release() { gate.continuation.yield() }
  }

  func testACancelledWaiterStopsAtOnceAndTheTaskRunsOnForTheOthers() async throws {
    let held = Held()
    let shared = held.task(returning: 42)
    let started = Locked(false)
    let ended = Locked(false)
    let cancelled = Task {
      defer { ended.withLock { $0 = true } }
      started.withLock { $0 = true }
      return try await shared.valueUnlessCancelled()
    }
    let other = Task { try await shared.valueUnlessCancelled() }
    let waiting = await eventually { started.current }
    XCTAssertTrue(waiting)
    cancelled.cancel()
    let stopped = await eventually(5) { ended.current }
    XCTAssertTrue(stopped, "the cancelled waiter still waits")
    XCTAssertFalse(held.finished.load(ordering: .sequentiallyConsistent), "the shared task is not cancelled")
    if !stopped { held.release() }
    do {
      _ = try await cancelled.value
      XCTFail("a cancelled waiter got the value")
    } catch {
      XCTAssertTrue(error is CancellationError, "\(error)")
    }
    XCTAssertFalse(shared.isCancelled)
    held.release()
    let value = try await other.value
    XCTAssertEqual(value, 42)
  }

  func testATaskThatCannotFailGivesNilToACancelledWaiter() async throws {
    let (stream, continuation) = AsyncStream<Void>.makeStream()
    let shared = Task<Int, Never> {
      for await _ in stream { break }
      return 7
    }
    let ended = Locked(false)
    let waiter = Task {
      defer { ended.withLock { $0 = true } }
      return await shared.valueUnlessCancelled()
    }
    waiter.cancel()
    let stopped = await eventually(5) { ended.current }
    XCTAssertTrue(stopped, "the cancelled waiter still waits")
    if !stopped { continuation.yield() }
    let answer = await waiter.value
    XCTAssertNil(answer)
    continuation.yield()
    let value = await shared.valueUnlessCancelled()
    XCTAssertEqual(value, 7)
  }

  func testAnErrorOfTheTaskReachesTheWaiter() async throws {
    struct Failure: Error {}
    let shared = Task<Int, any Error> { throw Failure() }
    do {
      _ = try await shared.valueUnlessCancelled()
      XCTFail("no error")
    } catch {
      XCTAssertTrue(error is Failure, "\(error)")
    }
  }
}

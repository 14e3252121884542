import StorageFake
import XCTest

@testable import BucketFS

/// The gate that orders the work on a stage: first come, first served, and
/// a waiter that is cancelled leaves the line.
final class AsyncGateTests: XCTestCase {
  func testACancelledWaiterLeavesTheLineAndTheNextOneGetsTheGate() async throws {
    let gate = AsyncGate()
    try await gate.lock()
    let order = Locked<[String]>([])
    let cancelled = Task {
      do {
        try await gate.lock()
        order.withLock { $0.append("cancelled one got the gate") }
        gate.unlock()
      } catch {
        order.withLock { $0.append(error is CancellationError ? "cancelled" : "\(error)") }
      }
    }
    let queued = await eventually { gate.waiting == 1 }
    XCTAssertTrue(queued)
    let next = Task {
      try await gate.lock()
      order.withLock { $0.append("next") }
      gate.unlock()
    }
    let bothQueued = await eventually { gate.waiting == 2 }
    XCTAssertTrue(bothQueued)
    cancelled.cancel()
    await cancelled.value
    XCTAssertEqual(order.current, ["cancelled"])
    XCTAssertEqual(gate.waiting, 1, "only the cancelled waiter left")
    gate.unlock()
    try await next.value
    XCTAssertEqual(order.current, ["cancelled", "next"])
    // Free again: taken at once.
    try await gate.lock()
    gate.unlock()
  }

  func testATaskCancelledBeforeItWaitsThrowsWithoutQueueing() async throws {
    let gate = AsyncGate()
    try await gate.lock()
    let late = Task {
      withUnsafeCurrentTask { $0?.cancel() }
      try await gate.lock()
    }
    do {
      try await late.value
      XCTFail("a cancelled task took a held gate")
    } catch {
      XCTAssertTrue(error is CancellationError, "\(error)")
    }
    XCTAssertEqual(gate.waiting, 0)
    gate.unlock()
  }

  func testACancelledTaskTakesAFreeGate() async throws {
    let gate = AsyncGate()
    let task = Task {
      withUnsafeCurrentTask { $0?.cancel() }
      try await gate.lock()
      gate.unlock()
    }
    try await task.value
  }
}

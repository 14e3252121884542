import FUSE
import StorageFake
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

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
    let left = await eventually(5) { !order.current.isEmpty }
    // A gate that ignored the cancellation would keep it waiting: let it through to fail below.
    if !left { gate.unlock() }
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
    let ended = Locked(false)
    let late = Task {
      defer { ended.withLock { $0 = true } }
      withUnsafeCurrentTask { $0?.cancel() }
      try await gate.lock()
    }
    let stopped = await eventually(5) { ended.current }
    if !stopped { gate.unlock() }
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

  /// Through the filesystem: a write queued behind another one's download
  /// of the file's bytes is interrupted (FUSE INTERRUPT cancels its task):
  /// it ends at once, changes nothing, and the first write goes on.
  func testAnInterruptedWriteQueuedOnTheGateEndsAtOnce() async throws {
    let base = InMemoryObjectStore(bucket: "demo")
    base.put("f", data: Array("hello world".utf8))
    let store = HeldReadStore(base, holding: true)
    let fs = makeWritingFileSystem(store)
    let inode = try await fs.inode(at: "f")
    let first = try await fs.open(inode: inode, flags: O_RDWR).handle
    let second = try await fs.open(inode: inode, flags: O_RDWR).handle
    let staged = try XCTUnwrap(fs.writer(first))
    // Past the start: the first write downloads the bytes, under the gate.
    let downloading = Task {
      try await fs.write(inode: inode, handle: first, offset: 11, data: Array("!".utf8))
    }
    let held = await eventually { store.waiting == 1 }
    XCTAssertTrue(held)
    let ended = Locked(false)
    let queued = Task {
      defer { ended.withLock { $0 = true } }
      return try await fs.write(inode: inode, handle: second, offset: 0, data: Array("J".utf8))
    }
    let waits = await eventually { staged.waitingForStage == 1 }
    XCTAssertTrue(waits)
    queued.cancel()
    let stopped = await eventually(5) { ended.current }
    // A gate that ignored the interrupt would hold the write until the download ended.
    if !stopped { store.stopHolding() }
    XCTAssertTrue(stopped, "the interrupted write still waits")
    do {
      _ = try await queued.value
      XCTFail("an interrupted write went through")
    } catch {
      XCTAssertTrue(error is CancellationError, "\(error)")
    }
    XCTAssertEqual(staged.waitingForStage, 0)
    store.stopHolding()
    await XCTAssertEqualAsync(try await downloading.value, 1)
    try await fs.flush(inode: inode, handle: first)
    XCTAssertEqual(base.data("f"), Array("hello world!".utf8))
    fs.release(inode: inode, handle: first)
    fs.release(inode: inode, handle: second)
  }
}

import FUSE
import ObjectStore
import StorageFake
import Synchronization
import XCTest

@testable import BucketFS

/// Every task the mount starts apart from a request has an owner: the
/// unmount cancels cache work and waits for work that must land; an
/// interrupted close stops waiting without abandoning its upload.
final class BackgroundTaskTests: XCTestCase {
  /// Uploads wait until opened.
  final class HeldUploads: ForwardingObjectStore, Sendable {
    let base: InMemoryObjectStore
    private let open = Mutex(false)
    private let started = Mutex(0)
    init(_ base: InMemoryObjectStore) { self.base = base }
    var inner: any ObjectStore { base }
    var uploadsStarted: Int { started.withLock { $0 } }
    func letUploadsGo() { open.withLock { $0 = true } }

    func upload(
      _ name: String, from source: any UploadSource, attributes: ObjectAttributes, ifGenerationMatch: Int64?
    ) async throws -> ObjectMetadata {
      started.withLock { $0 += 1 }
      // Not cancellable: the service has the request whatever the caller does.
      while !open.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(2)) }
      return try await base.upload(
        name, from: source, attributes: attributes, ifGenerationMatch: ifGenerationMatch)
    }
  }

  func testSettleCancelsCacheWorkAndWaitsForWorkThatMustLand() async {
    let tasks = BackgroundTasks()
    let landed = Mutex(false)
    let fill = tasks.start(.cancel) { try await Task.sleep(for: .seconds(60)) }
    tasks.start(.finish) {
      try? await Task.sleep(for: .milliseconds(50))
      landed.withLock { $0 = true }
    }
    XCTAssertEqual(tasks.count, 2)
    let start = ContinuousClock.now
    await tasks.settle()
    XCTAssertLessThan(ContinuousClock.now - start, .seconds(10), "the cache work was cancelled, not awaited")
    XCTAssertTrue(landed.withLock { $0 }, "the work that must land was awaited")
    XCTAssertTrue(fill.isCancelled)
    XCTAssertEqual(tasks.count, 0)
    // Cache work started once the unmount began is cancelled at once.
    let late = tasks.start(.cancel) { try await Task.sleep(for: .seconds(60)) }
    XCTAssertTrue(late.isCancelled)
    _ = await late.result
  }

  func testFinishWaitsOnlyForWorkThatMustLand() async {
    let tasks = BackgroundTasks()
    let fill = tasks.start(.cancel) { try await Task.sleep(for: .seconds(60)) }
    tasks.start(.finish) { try? await Task.sleep(for: .milliseconds(10)) }
    await tasks.finish()
    XCTAssertEqual(tasks.count, 1, "the cache work goes on")
    fill.cancel()
    _ = await fill.result
  }

  func testAnInterruptedCloseStopsWaitingAndItsUploadLandsAndTheStageGoes() async throws {
    let base = InMemoryObjectStore(bucket: "demo")
    let store = HeldUploads(base)
    let stages = makeStageDirectory()
    let fs = makeWritingFileSystem(store, stageDirectory: stages)
    let (inode, handle) = try await fs.createFile("new.txt")
    try await fs.writeText(inode, handle, at: 0, "bytes")
    let close = Task { try await fs.flush(inode: inode, handle: handle) }
    let uploading = await eventually { store.uploadsStarted == 1 }
    XCTAssertTrue(uploading)
    close.cancel()
    // Bounded: a close that waited for its upload would wait until this.
    let watchdog = Task {
      try await Task.sleep(for: .seconds(5))
      store.letUploadsGo()
    }
    defer { watchdog.cancel() }
    do {
      try await close.value
      XCTFail("the interrupted close waited for its upload")
    } catch is CancellationError {
      // The FUSE layer answers it EINTR.
    }
    // The kernel releases the handle after the interrupted flush.
    fs.release(inode: inode, handle: handle)
    XCTAssertNil(base.object("new.txt"))
    store.letUploadsGo()
    await fs.tasks.finish()
    XCTAssertEqual(text(base.data("new.txt")), "bytes", "the upload went on")
    let removed = await eventually { filesIn(stages).filter { $0.hasPrefix("stage-") }.isEmpty }
    XCTAssertTrue(removed, "stored bytes are not kept as unstored ones")
  }
}

import CoreMetrics
import MetricsTestKit
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS
@testable import FUSE

#if canImport(Glibc)
  import Glibc
#endif

/// The filesystem's series: FUSE requests by operation and errno, and the
/// gauges of read-ahead and staged bytes (docs/SEMANTICS.md#metrics).
final class MetricsTests: XCTestCase {
  func testRequestsAreCountedByOperationAndErrorsByErrnoName() throws {
    let metrics = TestMetrics()
    let requests = RequestMetrics(factory: metrics)
    requests.answered(Arrival(.getxattr), error: ENODATA)
    requests.answered(Arrival(.getxattr), error: 0)
    requests.answered(Arrival(.forgetMulti), error: 0)
    requests.answered(Arrival(.lookup), error: ENOENT)

    func requestCount(_ op: String) throws -> Int64 {
      try metrics.expectCounter("bucketfs_fuse_requests_total", [("op", op)]).totalValue
    }
    XCTAssertEqual(try requestCount("getxattr"), 2)
    XCTAssertEqual(try requestCount("forget_multi"), 1)
    XCTAssertEqual(try requestCount("lookup"), 1)
    XCTAssertEqual(try requestCount("read"), 0, "every operation's series exists from the start")
    XCTAssertEqual(
      try metrics.expectCounter("bucketfs_fuse_errors_total", [("op", "getxattr"), ("errno", "ENODATA")])
        .totalValue, 1)
    XCTAssertEqual(
      try metrics.expectCounter("bucketfs_fuse_errors_total", [("op", "lookup"), ("errno", "ENOENT")])
        .totalValue, 1)
    XCTAssertEqual(metrics.counterTotal(label: "bucketfs_fuse_errors_total"), 2)
    let durations = try metrics.expectTimer("bucketfs_fuse_request_duration_seconds", [("op", "getxattr")])
    XCTAssertEqual(durations.values.count, 2)
    XCTAssertTrue(durations.values.allSatisfy { $0 >= 0 && $0 < 10_000_000_000 })
  }

  func testErrnoNamesAreGlibcs() {
    XCTAssertEqual(RequestMetrics.errnoName(ENOENT), "ENOENT")
    XCTAssertEqual(RequestMetrics.errnoName(ENODATA), "ENODATA")
    XCTAssertEqual(RequestMetrics.errnoName(EOPNOTSUPP), "EOPNOTSUPP")
    XCTAssertEqual(RequestMetrics.errnoName(ESTALE), "ESTALE")
    XCTAssertEqual(RequestMetrics.errnoName(9999), "9999", "no name: the number")
  }

  func testTheReadAheadGaugeIsWhatTheBudgetHasGranted() throws {
    let metrics = TestMetrics()
    let budget = ReadAheadBudget(capacity: 10, metrics: metrics)
    let gauge = try metrics.expectMeter("bucketfs_read_ahead_bytes")
    XCTAssertEqual(budget.acquire(upTo: 6, atLeast: 1), 6)
    XCTAssertEqual(budget.acquire(upTo: 6, atLeast: 3), 4)
    XCTAssertEqual(budget.acquire(upTo: 6, atLeast: 1), 0)
    XCTAssertEqual(gauge.lastValue, 10)
    budget.release(4)
    XCTAssertEqual(gauge.lastValue, 6)
    budget.release(6)
    XCTAssertEqual(gauge.lastValue, 0)
  }

  func testTheReadAheadGaugeFollowsAReader() async throws {
    let metrics = TestMetrics()
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("big", data: Array(repeating: 3, count: 8 << 20))
    var configuration = Configuration()
    configuration.readAheadBudget = 16 << 20
    let fs = BucketFileSystem(
      store: store, configuration: configuration, logger: quietLogger, metrics: metrics)
    let gauge = try metrics.expectMeter("bucketfs_read_ahead_bytes")
    let inode = try await fs.inode(at: "big")
    let handle = try await fs.open(inode: inode, flags: O_RDONLY).handle
    _ = try await fs.read(inode: inode, handle: handle, offset: 0, size: 128 << 10)
    _ = try await fs.read(inode: inode, handle: handle, offset: 128 << 10, size: 128 << 10)
    XCTAssertGreaterThan(fs.readService.budget.inUse, 0)
    XCTAssertEqual(gauge.lastValue, Double(fs.readService.budget.inUse))
    fs.release(inode: inode, handle: handle)
    let returned = await eventually { gauge.lastValue == 0 && fs.readService.budget.inUse == 0 }
    XCTAssertTrue(returned, "gauge \(gauge.lastValue ?? -1), in use \(fs.readService.budget.inUse)")
  }

  func testTheStagedGaugeIsTheLengthOfLiveStages() async throws {
    let metrics = TestMetrics()
    let store = InMemoryObjectStore(bucket: "demo")
    let files = FailingStageFiles()
    let fs = makeWritingFileSystem(store, stageFiles: files, metrics: metrics)
    let gauge = try metrics.expectMeter("bucketfs_staged_bytes")

    let (inode, handle) = try await fs.createFile("a.bin")
    try await fs.writeText(inode, handle, at: 0, String(repeating: "x", count: 1000))
    XCTAssertEqual(gauge.lastValue, 1000)
    try await fs.writeText(inode, handle, at: 5000, "0123456789")
    XCTAssertEqual(gauge.lastValue, 5010, "a write past the end makes a hole: the file is that long")
    try await fs.writeText(inode, handle, at: 10, "y")
    XCTAssertEqual(gauge.lastValue, 5010)
    _ = try await fs.setattr(inode: inode, handle: handle, changes: AttributeChanges(size: 100))
    XCTAssertEqual(gauge.lastValue, 100)

    let (other, otherHandle) = try await fs.createFile("b.bin")
    try await fs.writeText(other, otherHandle, at: 0, "abc")
    XCTAssertEqual(gauge.lastValue, 103)
    // A failed write may have written part: the file says how long it is.
    files.fail([ENOSPC])
    _ = try? await fs.writeBytes(other, otherHandle, at: 3, [1, 2, 3])
    XCTAssertEqual(gauge.lastValue, 103)

    try await fs.close(inode, handle)
    fs.release(inode: other, handle: otherHandle)
    let released = await eventually { gauge.lastValue == 0 }
    XCTAssertTrue(released, "staged bytes after every release: \(gauge.lastValue ?? -1)")
  }
}

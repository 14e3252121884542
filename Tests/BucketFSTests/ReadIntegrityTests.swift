import FUSE
import MetricsTestKit
import NIOCore
import ObjectStore
import StorageFake
import Synchronization
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// A whole sequential read is checked against the object's CRC-32C, its
/// segments summed as they arrive (docs/SEMANTICS.md#integrity).
final class ReadIntegrityTests: XCTestCase {
  private func bytes(_ count: Int) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: ($0 &* 131) ^ ($0 >> 11)) }
  }

  /// Reads the whole file in the kernel's 128 KiB reads; the error of the
  /// first read that failed, or nil, and what was read.
  private func readThrough(_ fs: BucketFileSystem, _ inode: UInt64, _ handle: UInt64) async -> (
    error: (any Error)?, bytes: [UInt8]
  ) {
    var out: [UInt8] = []
    while true {
      do {
        let chunk = try await fs.read(
          inode: inode, handle: handle, offset: UInt64(out.count), size: 128 << 10
        )
        .array
        if chunk.isEmpty { return (nil, out) }
        out += chunk
      } catch {
        return (error, out)
      }
    }
  }

  func testAByteChangedOnTheWayFailsTheHandleFromTheReadThatEndsTheFileAndANewOpenIsRight() async throws {
    let inner = InMemoryObjectStore(bucket: "demo")
    let data = bytes((3 << 20) + 4321)
    inner.put("big", data: data)
    let store = FlippingReads(inner: inner)
    let metrics = TestMetrics()
    let fs = BucketFileSystem(
      store: store, configuration: Configuration(), logger: quietLogger, metrics: metrics)
    let inode = try await fs.inode(at: "big")
    let opened = try await fs.open(inode: inode, flags: O_RDONLY)
    store.flipNext(at: 1 << 20)
    let first = await readThrough(fs, inode, opened.handle)
    XCTAssertEqual((first.error as? FileSystemError)?.errno.code ?? (first.error as? Errno)?.code, EIO)
    XCTAssertLessThan(first.bytes.count, data.count, "the read that ends the file is not answered")
    XCTAssertEqual(
      try metrics.expectCounter("bucketfs_storage_crc32c_mismatches_total", [("direction", "download")])
        .totalValue, 1)
    // The handle stays failed (the kernel retries a failed page with a read of its own)...
    let retried = await readThrough(fs, inode, opened.handle)
    XCTAssertEqual((retried.error as? FileSystemError)?.errno.code ?? (retried.error as? Errno)?.code, EIO)
    XCTAssertEqual(retried.bytes.count, 0)
    do {
      try await fs.close(inode, opened.handle)
      XCTFail("the close of a handle that read wrong bytes fails")
    } catch {}
    XCTAssertEqual(
      try metrics.expectCounter("bucketfs_storage_crc32c_mismatches_total", [("direction", "download")])
        .totalValue, 1, "counted once")
    // ...and a new open reads anew, right.
    let reopened = try await fs.open(inode: inode, flags: O_RDONLY)
    XCTAssertFalse(reopened.keepCache, "the kernel's pages of the file are dropped at the next open")
    let again = await readThrough(fs, inode, reopened.handle)
    XCTAssertNil(again.error)
    XCTAssertTrue(again.bytes == data)
    try await fs.close(inode, reopened.handle)
  }

  func testARightReadLeavesNoTrace() async throws {
    let inner = InMemoryObjectStore(bucket: "demo")
    let data = bytes((2 << 20) + 17)
    inner.put("f", data: data)
    let metrics = TestMetrics()
    let fs = BucketFileSystem(
      store: inner, configuration: Configuration(), logger: quietLogger, metrics: metrics)
    let inode = try await fs.inode(at: "f")
    let opened = try await fs.open(inode: inode, flags: O_RDONLY)
    let read = await readThrough(fs, inode, opened.handle)
    XCTAssertNil(read.error)
    XCTAssertTrue(read.bytes == data)
    try await fs.close(inode, opened.handle)
    let mismatches = try metrics.expectCounter(
      "bucketfs_storage_crc32c_mismatches_total", [("direction", "download")])
    XCTAssertEqual(mismatches.totalValue, 0)
  }

  func testSegmentsCombineInAnyOrderAndAGapLeavesTheVerdictOpen() {
    let data = bytes(1000)
    let expected = CRC32C.update(0, ByteBuffer(bytes: data))
    func sum(_ range: Range<Int>) -> UInt32 { CRC32C.update(0, ByteBuffer(bytes: data[range])) }
    var inOrder = SequentialSum(size: 1000, expected: expected)
    inOrder.add(600, 1000, sum: sum(600..<1000))
    inOrder.add(200, 600, sum: sum(200..<600))
    XCTAssertEqual(inOrder.verdict, .open)
    inOrder.add(0, 200, sum: sum(0..<200))
    XCTAssertEqual(inOrder.verdict, .matched)

    var wrong = SequentialSum(size: 1000, expected: expected)
    wrong.add(0, 500, sum: sum(0..<500))
    wrong.add(500, 1000, sum: sum(500..<1000) ^ 1)
    guard case .mismatched = wrong.verdict else { return XCTFail("\(wrong.verdict)") }

    var jumped = SequentialSum(size: 1000, expected: expected)
    jumped.add(0, 100, sum: sum(0..<100))
    jumped.add(500, 1000, sum: sum(500..<1000))
    jumped.dropWaiting()
    jumped.add(100, 500, sum: sum(100..<500))
    XCTAssertEqual(jumped.verdict, .open, "the segment past the jump was dropped")
    XCTAssertEqual(jumped.summed, 500)
  }
}

/// Flips one byte of the next read that covers `offset`, as a faulty network would.
private final class FlippingReads: ForwardingObjectStore {
  let inner: any ObjectStore
  private let target = Mutex<Int64?>(nil)

  init(inner: any ObjectStore) { self.inner = inner }

  func flipNext(at offset: Int64) { target.withLock { $0 = offset } }

  func read(_ name: String, generation: Int64, range: Range<Int64>, reusing spare: SpareBuffer?)
    async throws -> ByteBuffer
  {
    var bytes = try await inner.read(name, generation: generation, range: range, reusing: spare)
    let flip = target.withLock { target -> Int64? in
      guard let at = target, range.contains(at) else { return nil }
      target = nil
      return at
    }
    if let flip {
      let index = bytes.readerIndex + Int(flip - range.lowerBound)
      bytes.setInteger(bytes.getInteger(at: index, as: UInt8.self)! ^ 0x5a, at: index)
    }
    return bytes
  }
}

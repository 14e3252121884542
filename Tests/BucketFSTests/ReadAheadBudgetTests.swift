import FUSE
import NIOCore
import ObjectStore
import StorageFake
import Synchronization
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// One read-ahead budget for all open files: smaller segments when short,
/// never a failure, every grant given back.
final class ReadAheadBudgetTests: XCTestCase {
  /// The wrapped store, counting the bytes of reads under way at once.
  final class Measuring: ForwardingObjectStore, Sendable {
    let base: InMemoryObjectStore
    private let bytes = Mutex((now: 0, peak: 0))
    init(_ base: InMemoryObjectStore) { self.base = base }
    var inner: any ObjectStore { base }
    var peak: Int { bytes.withLock { $0.peak } }

    func read(_ name: String, generation: Int64, range: Range<Int64>, reusing spare: SpareBuffer?)
      async throws -> ByteBuffer
    {
      let count = Int(range.count)
      bytes.withLock {
        $0.now += count
        $0.peak = max($0.peak, $0.now)
      }
      defer { bytes.withLock { $0.now -= count } }
      return try await base.read(name, generation: generation, range: range, reusing: spare)
    }
  }

  func pattern(_ count: Int, seed: UInt8) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) }
  }

  /// Reads a whole file as the session does: at hand first, else waiting.
  static func readAll(_ fs: BucketFileSystem, _ inode: UInt64, chunk: Int = 128 << 10) async throws -> [UInt8]
  {
    let handle = try await fs.open(inode: inode, flags: O_RDONLY).handle
    defer { fs.release(inode: inode, handle: handle) }
    var read: [UInt8] = []
    while true {
      let offset = UInt64(read.count)
      let pieces =
        if let hit = fs.readInline(inode: inode, handle: handle, offset: offset, size: chunk) { hit } else {
          try await fs.read(inode: inode, handle: handle, offset: offset, size: chunk)
        }
      let bytes = pieces.array
      if bytes.isEmpty { return read }
      read += bytes
    }
  }

  func testParallelReadersShareOneBudget() async throws {
    let base = InMemoryObjectStore(bucket: "demo")
    base.latency = .milliseconds(5)
    let files = 16
    var contents: [[UInt8]] = []
    for i in 0..<files {
      contents.append(pattern(2 << 20, seed: UInt8(i)))
      base.put("f\(i)", data: contents[i])
    }
    let store = Measuring(base)
    let budget = 2 << 20
    let fs = makeFileSystem(store, readAheadBudget: budget)
    var inodes: [UInt64] = []
    for i in 0..<files { inodes.append(try await fs.inode(at: "f\(i)")) }

    let held = inodes
    let read = try await withThrowingTaskGroup(of: (Int, [UInt8]).self) { group in
      for i in 0..<files {
        group.addTask {
          let bytes = try await Self.readAll(fs, held[i])
          return (i, bytes)
        }
      }
      var read: [Int: [UInt8]] = [:]
      for try await (i, bytes) in group { read[i] = bytes }
      return read
    }
    for i in 0..<files { XCTAssertTrue(read[i] == contents[i], "file \(i) read exactly") }
    XCTAssertGreaterThan(store.peak, 0, "the reads went through the measure")
    // Read-ahead within the budget; beyond it only the kernel-sized reads of refused readers.
    XCTAssertLessThanOrEqual(store.peak, budget + files * (128 << 10), "peak bytes under way")
    XCTAssertEqual(fs.readService.budget.inUse, 0, "every grant given back")
  }

  func testAShortBudgetMeansSmallerSegmentsNotFailures() async throws {
    let base = InMemoryObjectStore(bucket: "demo")
    base.latency = .milliseconds(2)
    let data = pattern(5 << 20 + 999, seed: 7)
    base.put("big", data: data)
    let store = Measuring(base)
    let fs = makeFileSystem(store, readAheadBudget: 1 << 20)
    let inode = try await fs.inode(at: "big")
    base.resetCalls()
    let read = try await Self.readAll(fs, inode)
    XCTAssertTrue(read == data)
    XCTAssertGreaterThan(store.peak, 0, "the reads went through the measure")
    XCTAssertLessThanOrEqual(store.peak, (1 << 20) + (128 << 10), "peak bytes under way")
    let sizes = base.calls(.read).compactMap { call -> Int64? in
      if case .read(_, let range) = call { return Int64(range.count) }
      return nil
    }
    XCTAssertLessThanOrEqual(sizes.max() ?? 0, 1 << 20)
    XCTAssertLessThan(sizes.count, 5 << 20 / (128 << 10), "still fetched ahead, in smaller segments")
    XCTAssertEqual(fs.readService.budget.inUse, 0)
  }

  func testJumpsAndFailuresGiveTheirGrantsBack() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    let data = pattern(8 << 20, seed: 3)
    store.put("big", data: data)
    let fs = makeFileSystem(store, readAheadBudget: 16 << 20)
    let inode = try await fs.inode(at: "big")
    let handle = try await fs.open(inode: inode, flags: O_RDONLY).handle
    _ = try await fs.read(inode: inode, handle: handle, offset: 0, size: 128 << 10)
    XCTAssertGreaterThan(fs.readService.budget.inUse, 0)
    _ = try await fs.read(inode: inode, handle: handle, offset: 6 << 20, size: 128 << 10)  // a jump
    store.injectFaults([.unavailable("503")], for: .read)
    _ = try? await fs.read(inode: inode, handle: handle, offset: 0, size: 128 << 10)
    let chunk = try await fs.read(inode: inode, handle: handle, offset: 0, size: 128 << 10).array
    XCTAssertTrue(chunk == Array(data[0..<(128 << 10)]))
    fs.release(inode: inode, handle: handle)
    let returned = await eventually { fs.readService.budget.inUse == 0 }
    XCTAssertTrue(returned, "in use after release: \(fs.readService.budget.inUse)")
  }

  func testGrantsAreWhatIsFreeDownToAMinimum() {
    let budget = ReadAheadBudget(capacity: 10)
    XCTAssertEqual(budget.acquire(upTo: 6, atLeast: 1), 6)
    XCTAssertEqual(budget.acquire(upTo: 6, atLeast: 3), 4)
    XCTAssertEqual(budget.acquire(upTo: 6, atLeast: 1), 0)
    budget.release(4)
    XCTAssertEqual(budget.acquire(upTo: 6, atLeast: 5), 0, "less than the minimum is no grant")
    XCTAssertEqual(budget.inUse, 6)
    budget.release(6)
    XCTAssertEqual(budget.available, 10)
  }
}

import FUSE
import NIOCore
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// Small files read one after another are fetched ahead, from the evidence
/// of reads only, never a large one, within the read-ahead budget.
final class PrefetchTests: XCTestCase {
  /// d/f00 … d/f19 of a few bytes, and d/f10 of 2 MiB.
  func seed(_ store: InMemoryObjectStore) {
    for i in 0..<20 {
      let name = String(format: "d/f%02d", i)
      store.put(name, data: i == 10 ? [UInt8](repeating: 7, count: 2 << 20) : bytes(name))
    }
  }

  func readWhole(_ fs: BucketFileSystem, _ name: String) async throws -> [UInt8] {
    let inode = try await fs.inode(at: name)
    let opened = try await fs.open(inode: inode, flags: O_RDONLY)
    defer { fs.release(inode: inode, handle: opened.handle) }
    let pieces = try await fs.read(inode: inode, handle: opened.handle, offset: 0, size: 4096)
    return pieces.flatMap { Array($0.readableBytesView) }
  }

  func reads(_ store: InMemoryObjectStore, of name: String) -> Int {
    store.calls(.read).filter { if case .read(name, _) = $0 { true } else { false } }.count
  }

  func testFilesReadOneAfterAnotherAreFetchedAheadButNotALargeOne() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    seed(store)
    let fs = makeFileSystem(store)
    _ = try await fs.names(of: try await fs.inode(at: "d"))
    // A listing alone starts nothing; nor does the first file.
    await XCTAssertEqualAsync(try await readWhole(fs, "d/f00"), bytes("d/f00"))
    XCTAssertEqual(fs.readService.prefetch.held, 0)
    XCTAssertEqual(store.calls(.read).count, 1)
    // f00 read to its end, then f01 opened: f02 … f09 and f11, f12 (not the 2 MiB f10) come ahead.
    await XCTAssertEqualAsync(try await readWhole(fs, "d/f01"), bytes("d/f01"))
    XCTAssertEqual(fs.readService.prefetch.held, 8)
    let settled = await eventually { store.calls(.read).count == 2 + 8 }
    XCTAssertTrue(settled, "\(store.calls(.read))")
    XCTAssertEqual(reads(store, of: "d/f10"), 0)
    for i in 2..<10 {
      let name = String(format: "d/f%02d", i)
      await XCTAssertEqualAsync(try await readWhole(fs, name), bytes(name))
      XCTAssertEqual(reads(store, of: name), 1, name)
    }
    // The large file is read only once opened, by its own reader (with its own read-ahead).
    XCTAssertEqual(reads(store, of: "d/f10"), 0)
    _ = try await readWhole(fs, "d/f10")
    XCTAssertGreaterThan(reads(store, of: "d/f10"), 0)
    XCTAssertLessThanOrEqual(fs.readService.prefetch.held, 8)
  }

  func testADirectoryListedTwiceIsNotFetchedTwice() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    seed(store)
    let fs = makeFileSystem(store)
    let d = try await fs.inode(at: "d")
    _ = try await fs.names(of: d)  // ls
    _ = try await fs.names(of: d)  // the shell's glob
    for i in 0..<20 {
      _ = try await readWhole(fs, String(format: "d/f%02d", i))
    }
    let settled = await eventually { fs.readService.prefetch.held == 0 }
    XCTAssertTrue(settled)
    // Each small file once; the large one by its own reader only.
    XCTAssertEqual(store.calls(.read).count - reads(store, of: "d/f10"), 19, "\(store.calls(.read))")
  }

  func testPrefetchOfAReaderThatStoppedIsSweptAway() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    seed(store)
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    _ = try await fs.names(of: try await fs.inode(at: "d"))
    _ = try await readWhole(fs, "d/f00")
    _ = try await readWhole(fs, "d/f01")
    XCTAssertEqual(fs.readService.prefetch.held, 8)
    clock.advance(10)
    // No further open: the sweep (6 s later) gives the budget back.
    let swept = await eventually { fs.readService.prefetch.held == 0 && fs.readService.budget.inUse == 0 }
    XCTAssertTrue(swept)
  }

  /// GNU cp: each directory read whole, then its entries in inode order.
  func copy(_ fs: BucketFileSystem, _ inode: UInt64) async throws {
    let handle = try await fs.opendir(inode: inode).handle
    let entries = try await fs.names(of: inode, handle: handle, from: 0)
    fs.releasedir(inode: inode, handle: handle)
    var children: [FileAttributes] = []
    for name in entries where name != "." && name != ".." {
      if let attributes = try await fs.lookup(parent: inode, name: name).attributes {
        children.append(attributes)
      }
    }
    for child in children.sorted(by: { $0.inode < $1.inode }) {
      if child.kind == .directory {
        try await copy(fs, child.inode)
        continue
      }
      let opened = try await fs.open(inode: child.inode, flags: O_RDONLY)
      _ = try await fs.read(inode: child.inode, handle: opened.handle, offset: 0, size: 4096)
      fs.release(inode: child.inode, handle: opened.handle)
    }
  }

  func testACopyInInodeOrderListsEachSubtreeOnceAndReadsEachFileOnce() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    for t in 0..<5 {
      for m in 0..<10 {
        for f in 0..<10 { store.put("dir/d\(t)/m\(m)/f\(f)", data: bytes("\(t)\(m)\(f)")) }
      }
    }
    let fs = makeFileSystem(store)
    store.latency = .milliseconds(1)
    let root = try await fs.inode(at: "dir")
    store.resetCalls()
    try await copy(fs, root)
    let settled = await eventually {
      fs.readService.prefetch.held == 0 && fs.directories.walks.fetchesUnderWay == 0
    }
    XCTAssertTrue(settled)
    // The lookup of dir listed its 500 files flat, one page (docs/SEMANTICS.md#walks-small-trees):
    // dir's opendir, right after, took it; no directory is listed, and each file is read once.
    XCTAssertEqual(store.calls(.list), [])
    XCTAssertEqual(store.calls(.read).count, 500)
    XCTAssertEqual(store.calls.count, 500)
  }

  func testNothingIsFetchedAheadWhenFilesAreNotReadInAnOrder() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    seed(store)
    let fs = makeFileSystem(store)
    _ = try await fs.names(of: try await fs.inode(at: "d"))
    for i in [3, 17, 5, 12, 0] {
      _ = try await readWhole(fs, String(format: "d/f%02d", i))
    }
    XCTAssertEqual(fs.readService.prefetch.held, 0)
    XCTAssertEqual(store.calls(.read).count, 5)
  }

  func testPrefetchHoldsBudgetAndGivesItBackWhenNobodyComes() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    seed(store)
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    _ = try await fs.names(of: try await fs.inode(at: "d"))
    _ = try await readWhole(fs, "d/f00")
    _ = try await readWhole(fs, "d/f01")
    XCTAssertEqual(fs.readService.prefetch.held, 8)
    XCTAssertEqual(
      fs.readService.budget.inUse, (2...9).reduce(0) { $0 + bytes(String(format: "d/f%02d", $1)).count })
    // The reader went away: the next open drops what waited too long, and its budget.
    clock.advance(10)
    _ = try await readWhole(fs, "d/f19")
    XCTAssertEqual(fs.readService.prefetch.held, 0)
    XCTAssertEqual(fs.readService.budget.inUse, 0)
  }
}

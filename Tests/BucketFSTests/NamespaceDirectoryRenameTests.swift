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

/// rename of a directory: object by object, in parallel, up to the limit.
final class NamespaceDirectoryRenameTests: XCTestCase {
  var store: InMemoryObjectStore!
  var fs: BucketFileSystem!

  override func setUp() async throws {
    store = InMemoryObjectStore(bucket: "demo")
    fs = makeFileSystem(store, limit: 1000, concurrency: 16)
  }

  private func makeFileSystem(_ store: InMemoryObjectStore, limit: Int, concurrency: Int) -> BucketFileSystem
  {
    var configuration = Configuration()
    configuration.renameDirectoryLimit = limit
    configuration.renameConcurrency = concurrency
    return BucketFileSystem(
      store: store, configuration: configuration, logger: quietLogger, clock: ManualClock().read)
  }

  private func seedTree() {
    store.put("d/", data: [])
    store.put("d/a", data: bytes("a"), contentType: "text/plain", custom: ["k": "v"])
    store.put("d/sub/b", data: bytes("b"))
    store.put("d//hidden", data: bytes("a name no listing shows, moved all the same"))
    store.put("d-sibling", data: bytes("not under d/"))
  }

  /// The reference model's seed 1200: `b/c/c` unlinked, so `b/` and `b/c/`
  /// vanish with their last object, then directory `c/a` renamed to `b`,
  /// bringing its file `c/a/c` as `b/c`. The directories the mount still
  /// held under `b/` are gone: `b/c` is the file (it was the vanished
  /// directory, and rmdir under it said ENOENT where ENOTDIR was due).
  func testARenameOntoVanishedDirectoriesShowsTheFilesItMoved() async throws {
    store.put("b/c/c", data: bytes("b/c/c"))
    store.put("c/a/c", data: bytes("c/a/c"))
    let old = try await fs.inode(at: "b/c")
    try await fs.unlink(parent: old, name: "c")
    try await fs.rename(parent: try await fs.inode(at: "c"), name: "a", newParent: 1, newName: "b", flags: [])
    XCTAssertEqual(store.names, ["b/c"])
    let kind = try await fs.kind(at: "b/c")
    XCTAssertEqual(kind, .file)
    let file = try await fs.inode(at: "b/c")
    XCTAssertNotEqual(file, old)
    let entries = try await fs.entries(of: try await fs.inode(at: "b"), perCall: 10)
    XCTAssertEqual(entries.map(\.0), ["c"])
  }

  /// The reference model's seed 2813: a file renamed onto `c`, whose
  /// directories `c/` and `c/c/` had vanished with their last objects,
  /// then `mkdir c`: `c/c` is gone with the `c/` it was under, so a file
  /// cannot be created in it (it was, under the held node of `c/c/`).
  func testAFileRenamedOntoVanishedDirectoriesTakesTheirSubtreeWithThem() async throws {
    store.put("c/c/b/", data: [])
    store.put("f", data: bytes("f"))
    try await fs.rmdir(parent: try await fs.inode(at: "c/c"), name: "b")
    try await fs.rename(parent: 1, name: "f", newParent: 1, newName: "c", flags: [])
    try await fs.unlink(parent: 1, name: "c")
    _ = try await fs.mkdir(parent: 1, name: "c", mode: 0o755)
    let c = try await fs.inode(at: "c")
    let found = try await fs.lookup(parent: c, name: "c").attributes
    XCTAssertNil(found, "c/c went with the c/ it was under")
  }

  func testEveryObjectMovesAndTheKernelsInodesFollow() async throws {
    seedTree()
    let d = try await fs.inode(at: "d")
    let a = try await fs.inode(at: "d/a")
    let sub = try await fs.inode(at: "d/sub")
    let b = try await fs.inode(at: "d/sub/b")
    store.resetCalls()
    try await fs.rename(parent: 1, name: "d", newParent: 1, newName: "e", flags: [])
    XCTAssertEqual(store.names, ["d-sibling", "e/", "e//hidden", "e/a", "e/sub/b"])
    XCTAssertEqual(
      Set(store.calls(.move).map(\.description)),
      Set(
        [
          InMemoryObjectStore.Call.move("d/", to: "e/", ifGenerationMatch: 0),
          .move("d/a", to: "e/a", ifGenerationMatch: 0),
          .move("d/sub/b", to: "e/sub/b", ifGenerationMatch: 0),
          .move("d//hidden", to: "e//hidden", ifGenerationMatch: 0),
        ].map(\.description)))
    XCTAssertEqual(store.object("e/a")?.custom, ["k": "v"])
    for (path, inode) in [("e", d), ("e/a", a), ("e/sub", sub), ("e/sub/b", b)] {
      await XCTAssertEqualAsync(try await fs.inode(at: path), inode, path)
    }
    await XCTAssertEqualAsync(try await fs.names(of: d), ["a", "sub"])
    await XCTAssertEqualAsync(try await fs.names(of: 1), ["d-sibling", "e"])
    await XCTAssertEqualAsync(try await fs.getattr(inode: b).0.size, 1)
    await XCTAssertEqualAsync(
      String(decoding: try await fs.getxattr(inode: b, name: "user.fullPath"), as: UTF8.self), "e/sub/b")
  }

  func testWithoutMoveEachCopyComesBeforeItsDelete() async throws {
    store.supportsMove = false
    seedTree()
    try await fs.rename(parent: 1, name: "d", newParent: 1, newName: "e", flags: [])
    XCTAssertEqual(store.names, ["d-sibling", "e/", "e//hidden", "e/a", "e/sub/b"])
    let calls = store.calls
    for name in ["d/", "d/a", "d/sub/b", "d//hidden"] {
      let copy = try XCTUnwrap(calls.firstIndex { if case .copy(name, _, 0) = $0 { true } else { false } })
      let delete = try XCTUnwrap(calls.firstIndex { if case .delete(name, _?) = $0 { true } else { false } })
      XCTAssertLessThan(copy, delete, name)
    }
  }

  func testOntoAnEmptyDirectoryReplacesItsPlaceholder() async throws {
    store.put("d/", data: [])
    store.put("d/a", data: bytes("a"))
    let target = store.put("e/", data: [])
    try await fs.rename(parent: 1, name: "d", newParent: 1, newName: "e", flags: [])
    XCTAssertTrue(store.calls(.move).contains(.move("d/", to: "e/", ifGenerationMatch: target.generation)))
    XCTAssertEqual(store.names, ["e/", "e/a"])
  }

  func testARenamedDirectoryIsNotKnownAbsentFromItsParentsCompleteListing() async throws {
    store.put("d/a", data: bytes("a"))
    // A plain readdir of the root, first entry to last: the root's listing is complete.
    _ = try await fs.entries(of: 1, plus: false)
    try await fs.rename(parent: 1, name: "d", newParent: 1, newName: "e", flags: [])
    store.resetCalls()
    let entry = try await fs.lookup(parent: 1, name: "e")
    XCTAssertEqual(entry.attributes?.kind, .directory, "calls: \(store.calls)")
  }

  func testMoreObjectsThanTheLimitIsEXDEVAndMovesNothing() async throws {
    fs = makeFileSystem(store, limit: 3, concurrency: 16)
    seedTree()
    await XCTAssertErrno(Errno(EXDEV)) {
      try await self.fs.rename(parent: 1, name: "d", newParent: 1, newName: "e", flags: [])
    }
    XCTAssertEqual(store.calls(.move) + store.calls(.copy) + store.calls(.delete), [])
    // At the limit it moves.
    store.delete("d//hidden")
    try await fs.rename(parent: 1, name: "d", newParent: 1, newName: "e", flags: [])
    XCTAssertEqual(store.names, ["d-sibling", "e/", "e/a", "e/sub/b"])
  }

  func testAFailureMidwayIsEIOAndNothingIsDeletedBeforeItsCopyExists() async throws {
    store.supportsMove = false
    fs = makeFileSystem(store, limit: 1000, concurrency: 1)
    seedTree()
    // The first copy succeeds; the second fails for good.
    store.beforeNext(.copy) { $0.injectFaults([.unavailable("boom")], for: .copy) }
    await XCTAssertErrno(.io) {
      try await self.fs.rename(parent: 1, name: "d", newParent: 1, newName: "e", flags: [])
    }
    XCTAssertEqual(store.calls(.copy).count, 2, "no more started after the failure")
    XCTAssertEqual(store.calls(.delete).count, 1)
    // Every object is in exactly one place, with its bytes.
    let names = store.names
    for name in ["d/", "d/a", "d/sub/b", "d//hidden"] {
      let moved = "e/" + name.dropFirst(2)
      XCTAssertTrue(names.contains(name) != names.contains(moved), "\(name) is in one place: \(names)")
    }
    XCTAssertEqual(names.filter { $0.hasPrefix("e/") }.count, 1)
    // A fresh listing shows both halves as they are.
    await XCTAssertEqualAsync(try await fs.names(of: 1), ["d-sibling", "d", "e"])
  }

  func testMovesRunInParallelWithinTheBound() async throws {
    for i in 0..<40 { store.put("many/\(i)", data: bytes("\(i)")) }
    let counting = CountingMoves(store, waitingFor: 4)
    var configuration = Configuration()
    configuration.renameConcurrency = 4
    let fs = BucketFileSystem(
      store: counting, configuration: configuration, logger: quietLogger, clock: ManualClock().read)
    try await fs.rename(parent: 1, name: "many", newParent: 1, newName: "moved", flags: [])
    XCTAssertEqual(store.names.filter { $0.hasPrefix("moved/") }.count, 40)
    let most = counting.most.withLock { $0 }
    XCTAssertGreaterThan(most, 1, "in parallel")
    XCTAssertLessThanOrEqual(most, 4, "bounded")
  }
}

/// Forwards to the in-memory store and counts moves in flight. The first
/// moves wait (at most 10 s) until `waitingFor` of them are in flight at
/// once: moves in parallel get there at once, one at a time never does, and
/// moves without a bound meanwhile pile up past it.
final class CountingMoves: ForwardingObjectStore {
  let base: InMemoryObjectStore
  let waitingFor: Int
  let now = Mutex(0)
  let most = Mutex(0)
  init(_ base: InMemoryObjectStore, waitingFor: Int) {
    self.base = base
    self.waitingFor = waitingFor
  }
  var inner: any ObjectStore { base }
  func move(_ source: String, sourceGeneration: Int64, to destination: String, ifGenerationMatch: Int64?)
    async throws -> ObjectMetadata
  {
    let running = now.withLock {
      $0 += 1; return $0
    }
    let reached = most.withLock {
      $0 = max($0, running)
      return $0 >= waitingFor
    }
    defer { now.withLock { $0 -= 1 } }
    if !reached { _ = await eventually { self.most.withLock { $0 } >= self.waitingFor } }
    return try await base.move(
      source, sourceGeneration: sourceGeneration, to: destination, ifGenerationMatch: ifGenerationMatch)
  }
}

import FUSE
import ObjectStore
import StorageFake
import Synchronization
import XCTest

@testable import BucketFS

/// The node table's bound (`--max-inodes`): past it, the least recently
/// used names are asked to be dropped, never an open node or the root, and
/// the nodes go when their forgets come.
final class NodeEvictionTests: XCTestCase {
  /// A table holding directory `d/` and files `d/f0` … in that order.
  private func table(files: Int) -> (table: InodeTable, directory: UInt64, files: [UInt64]) {
    var table = InodeTable(rootKey: "", metadataCapacity: 10)
    let directory = table.remember(key: "d/", kind: .directory, metadata: nil, at: 0)
    let inodes = (0..<files).map { table.remember(key: "d/f\($0)", kind: .file, metadata: nil, at: 0) }
    return (table, directory, inodes)
  }

  func testTheLeastRecentlyUsedGoFirstAndTheirForgetsFreeThem() {
    var (table, directory, files) = table(files: 100)
    table.countOpen(directory, by: 1)
    // Each is used since it was made: the hand passes all by once, then
    // the oldest go (102 held: the root, `d/` and the files).
    let chosen = table.chooseEvictions(keeping: 62)
    XCTAssertEqual(chosen.count, 40)
    XCTAssertEqual(chosen.first, InodeTable.Eviction(parent: directory, name: "f0", inode: files[0]))
    XCTAssertEqual(chosen.map(\.inode), Array(files[0..<40]))
    XCTAssertEqual(chosen.map(\.name), (0..<40).map { "f\($0)" })
    XCTAssertEqual(Set(chosen.map(\.parent)), [directory])
    XCTAssertEqual(table.evicting, 40)
    // Asked again before the forgets come: nothing more is wanted.
    XCTAssertEqual(table.chooseEvictions(keeping: 62), [])

    for inode in files[0..<40] { table.forget(inode, count: 1) }
    XCTAssertEqual(table.count, 62)
    XCTAssertEqual(table.evicting, 0)
  }

  func testTouchedAndOpenNodesStayTheRootNeverGoes() {
    var (table, directory, files) = table(files: 10)
    table.countOpen(files[3], by: 1)
    // One round clears every reference bit; then the oldest, `d/`, goes
    // (named in the root), never the root itself.
    let first = table.chooseEvictions(keeping: 11)
    XCTAssertEqual(first, [InodeTable.Eviction(parent: InodeTable.rootInode, name: "d", inode: directory)])
    table.touch(files[5])
    let second = table.chooseEvictions(keeping: 3)
    XCTAssertEqual(
      second.map(\.name), ["f0", "f1", "f2", "f4", "f6", "f7", "f8", "f9"],
      "an open file is never evicted, and one used since the hand passed stays a round")
    // Closed, f3 may go.
    table.countOpen(files[3], by: -1)
    var names = Set<String>()
    for _ in 0..<4 { names.formUnion(table.chooseEvictions(keeping: 1).compactMap(\.name)) }
    XCTAssertTrue(names.contains("f3"))
  }

  func testANodeTheKernelKeepsCountsAsHeldARoundLater() {
    var (table, _, files) = table(files: 4)
    let first = table.chooseEvictions(keeping: 2)
    XCTAssertEqual(first.map(\.name), ["d", "f0", "f1", "f2"])
    // No forget came (a working directory, a mapped file). More names come:
    // the hand takes f3, passes the new ones by, and, a round after it asked,
    // finds the four still held, so they count as held again.
    for index in 0..<4 { _ = table.remember(key: "d/g\(index)", kind: .file, metadata: nil, at: 0) }
    let second = table.chooseEvictions(keeping: 2)
    XCTAssertEqual(second.first?.name, "f3")
    XCTAssertFalse(second.contains { ["d", "f0", "f1", "f2"].contains($0.name) })
    XCTAssertEqual(table.evicting, second.count)
    // A lookup the kernel makes anew counts as a use.
    _ = table.remember(key: "d/f3", kind: .file, metadata: nil, at: 1)
    XCTAssertEqual(table.evicting, second.count - 1)
    XCTAssertEqual(table[files[3]]?.lookups, 2)
  }

  /// The mount's table: a readdirplus walk of more names than the limit
  /// asks the kernel to drop the oldest; a lookup of one brings it back
  /// with the same inode, its stat and its bytes.
  func testAWalkPastTheLimitEvictsAndAnEvictedNameWorksAgain() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    for index in 0..<200 { store.put("d/f\(index)", data: Array("file \(index)".utf8)) }
    var configuration = Configuration()
    configuration.maxInodes = 50
    let fs = BucketFileSystem(
      store: store, configuration: configuration, logger: quietLogger, clock: ManualClock().read)
    let directory = try await fs.inode(at: "d")
    let listed = try await fs.entries(of: directory)
    XCTAssertEqual(listed.count, 200)
    let evicted = fs.nodes.evictions.count
    XCTAssertGreaterThanOrEqual(evicted, 200 - 50)
    XCTAssertLessThanOrEqual(fs.nodes.count - fs.nodes.evicting, 50)

    // The kernel drops what it was asked to and forgets it.
    let first = try XCTUnwrap(listed.first { $0.name == "f0" }?.entry.attributes?.inode)
    fs.forget(inode: first, count: 1)
    await XCTAssertErrno(.stale) { _ = try await fs.getattr(inode: first) }
    let again = try await fs.lookup(parent: directory, name: "f0")
    XCTAssertEqual(again.attributes?.inode, first)
    XCTAssertEqual(again.attributes?.size, 6)
    let handle = try await fs.open(inode: first, flags: O_RDONLY).handle
    let bytes = try await fs.read(inode: first, handle: handle, offset: 0, size: 100)
    XCTAssertEqual(bytes.flatMap { Array($0.readableBytesView) }, Array("file 0".utf8))
    fs.release(inode: first, handle: handle)
  }

  func testEvictionsArePrunedInBatchesAndByNameOnceAKernelRefusesAPrune() {
    let evictions = (0..<1200).map { InodeTable.Eviction(parent: 7, name: "f\($0)", inode: UInt64(100 + $0)) }
    let prunes = Atomic<Bool>(true)
    var pruned: [[UInt64]] = []
    var named: [String] = []
    var parents = Set<UInt64>()
    NodeEvictions.notify(
      evictions, prunes: prunes,
      prune: {
        pruned.append($0); return 0
      }
    ) {
      named.append($1)
    }
    XCTAssertEqual(pruned.map(\.count), [512, 512, 176])
    XCTAssertEqual(pruned.flatMap { $0 }, evictions.map(\.inode))
    XCTAssertEqual(named, [])

    // A kernel before 6.18 answers EINVAL: that batch and every later name go by inval_entry.
    pruned = []
    NodeEvictions.notify(
      evictions, prunes: prunes,
      prune: {
        pruned.append($0); return pruned.count == 2 ? -22 : 0
      }
    ) {
      parents.insert($0)
      named.append($1)
    }
    XCTAssertEqual(pruned.map(\.count), [512, 512])
    XCTAssertEqual(parents, [7])
    XCTAssertEqual(named, evictions[512...].map(\.name))
    XCTAssertFalse(prunes.load(ordering: .relaxed))
    named = []
    NodeEvictions.notify(
      Array(evictions[0..<3]), prunes: prunes,
      prune: { _ in
        XCTFail("no prune"); return 0
      }
    ) {
      named.append($1)
    }
    XCTAssertEqual(named, ["f0", "f1", "f2"])
  }

  /// A prune names inodes only: evictions chosen for one carry no entry, and
  /// once a kernel refuses a prune, those left unnamed wait for the hand's
  /// next round (it names them then).
  func testEvictionsForAPruneGoUnnamedAndAreNamedOnceItIsRefused() {
    var (table, directory, files) = table(files: 4)
    table.countOpen(directory, by: 1)
    let unnamed = table.chooseEvictions(keeping: 2, named: false)
    XCTAssertEqual(unnamed, files[0..<4].map { InodeTable.Eviction(name: nil, inode: $0) })

    let prunes = Atomic<Bool>(true)
    var named: [String] = []
    NodeEvictions.notify(unnamed, prunes: prunes, prune: { _ in -22 }) { named.append($1) }
    XCTAssertEqual(named, [], "nothing unnamed is sent by inval_entry")
    XCTAssertFalse(prunes.load(ordering: .relaxed))
    // No forget came. More names come: the hand finds the four still held,
    // counts them as held again, and takes them, named, on its next pass.
    for index in 0..<4 { _ = table.remember(key: "d/g\(index)", kind: .file, metadata: nil, at: 0) }
    let again = table.chooseEvictions(keeping: 2)
    XCTAssertEqual(again.map(\.name), ["f0", "f1", "f2", "f3"])
    XCTAssertEqual(Set(again.map(\.parent)), [directory])
  }
}

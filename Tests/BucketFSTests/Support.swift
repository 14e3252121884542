import FUSE
import Logging
import ObjectStore
import StorageFake
import Synchronization
import XCTest

@testable import BucketFS

/// Collects readdir entries, at most `capacity` per call like a small kernel buffer.
final class CollectingBuffer: DirectoryBuffer {
  let isPlus: Bool
  private var remaining: Int
  private(set) var entries: [(name: String, entry: Entry, nextOffset: UInt64)] = []
  /// Names added without a node (in a readdirplus reply: no lookup counted).
  private(set) var unheld: [String] = []

  init(plus: Bool = true, capacity: Int = 50) {
    isPlus = plus
    remaining = capacity
  }

  func add(name: String, entry: Entry, nextOffset: UInt64, held: Bool) -> Bool {
    guard remaining > 0 else { return false }
    remaining -= 1
    entries.append((name, entry, nextOffset))
    if !held { unheld.append(name) }
    return true
  }
}

/// A clock tests move by hand, for TTLs.
final class ManualClock: Sendable {
  private let now = Mutex<Double>(1000)
  func advance(_ seconds: Double) { now.withLock { $0 += seconds } }
  var read: @Sendable () -> Double { { [self] in now.withLock { $0 } } }
}

let quietLogger: Logger = {
  var logger = Logger(label: "test")
  logger.logLevel = .critical
  return logger
}()

func makeFileSystem(
  _ store: any ObjectStore, pageSize: Int = 1000, root: String = "", readOnly: Bool = false,
  clock: ManualClock = ManualClock(), readAheadMaxChunk: Int = Configuration().readAheadMaxChunk,
  readAheadBudget: Int = Configuration().readAheadBudget, refuseReadOnlyXattrs: Bool = false
) -> BucketFileSystem {
  var configuration = Configuration()
  configuration.refuseReadOnlyXattrs = refuseReadOnlyXattrs
  configuration.readAheadMaxChunk = readAheadMaxChunk
  configuration.readAheadBudget = readAheadBudget
  configuration.pageSize = pageSize
  configuration.rootPrefix = root
  configuration.readOnly = readOnly
  configuration.uid = 1234
  configuration.gid = 5678
  return BucketFileSystem(store: store, configuration: configuration, logger: quietLogger, clock: clock.read)
}

/// The context of a component built alone, over `store`, with the default settings.
func makeContext(_ store: any ObjectStore, clock: @escaping @Sendable () -> Double) -> MountContext {
  MountContext(
    store: store, configuration: Configuration(), diagnostics: Diagnostics(logger: quietLogger), clock: clock,
    tasks: BackgroundTasks())
}

extension BucketFileSystem {
  /// Every entry of a directory but `.` and `..`, read as the kernel does:
  /// successive readdir calls, each continuing at the last entry's offset.
  func entries(of inode: UInt64, perCall: Int = 50, plus: Bool = true) async throws -> [(
    name: String, entry: Entry
  )] {
    let handle = try await opendir(inode: inode).handle
    defer { releasedir(inode: inode, handle: handle) }
    var offset: UInt64 = 0
    var all: [(name: String, entry: Entry)] = []
    while true {
      let buffer = CollectingBuffer(plus: plus, capacity: perCall)
      try await readdir(inode: inode, handle: handle, offset: offset, into: buffer)
      guard let last = buffer.entries.last else { break }
      for (name, entry, _) in buffer.entries {
        // As `ls -l` sees it: a name given without a node is looked up, as the kernel does at its stat.
        let shown = buffer.unheld.contains(name) ? try await lookup(parent: inode, name: name) : entry
        all.append((name, shown))
      }
      offset = last.nextOffset
    }
    return all.filter { $0.name != "." && $0.name != ".." }
  }

  /// The names an open directory handle gives from `offset` to its end, two per call.
  func names(of inode: UInt64, handle: UInt64, from offset: UInt64) async throws -> [String] {
    var offset = offset
    var names: [String] = []
    while true {
      let buffer = CollectingBuffer(capacity: 2)
      try await readdir(inode: inode, handle: handle, offset: offset, into: buffer)
      guard let last = buffer.entries.last else { return names }
      names += buffer.entries.map(\.name)
      offset = last.nextOffset
    }
  }

  func names(of inode: UInt64, perCall: Int = 50) async throws -> [String] {
    try await entries(of: inode, perCall: perCall).map(\.name)
  }

  /// The inode at a slash-separated path from the root, by lookups.
  func inode(at path: String) async throws -> UInt64 {
    var inode: UInt64 = 1
    for component in path.split(separator: "/") {
      let entry = try await lookup(parent: inode, name: String(component))
      guard let attributes = entry.attributes else { throw Errno.noEntry }
      inode = attributes.inode
    }
    return inode
  }

  func kind(at path: String) async throws -> FileAttributes.Kind? {
    var inode: UInt64 = 1
    var kind: FileAttributes.Kind = .directory
    for component in path.split(separator: "/") {
      guard let attributes = try await lookup(parent: inode, name: String(component)).attributes else {
        return nil
      }
      inode = attributes.inode
      kind = attributes.kind
    }
    return kind
  }
}

func XCTAssertErrno(
  _ expected: Errno, _ body: () async throws -> Void, file: StaticString = #filePath, line: UInt = #line
) async {
  do {
    try await body()
    XCTFail("expected \(expected), got success", file: file, line: line)
  } catch let errno as Errno {
    XCTAssertEqual(errno, expected, "expected \(expected), got \(errno)", file: file, line: line)
  } catch {
    XCTFail("expected \(expected), got \(error)", file: file, line: line)
  }
}

func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

// XCTest's assertions take synchronous autoclosures; these await.
func XCTAssertEqualAsync<T: Equatable>(
  _ actual: @autoclosure () async throws -> T, _ expected: @autoclosure () async throws -> T,
  _ message: String = "", file: StaticString = #filePath, line: UInt = #line
) async {
  do {
    let (a, b) = (try await actual(), try await expected())
    XCTAssertEqual(a, b, message, file: file, line: line)
  } catch {
    XCTFail("threw \(error) \(message)", file: file, line: line)
  }
}

func XCTAssertNilAsync<T>(
  _ actual: @autoclosure () async throws -> T?, _ message: String = "", file: StaticString = #filePath,
  line: UInt = #line
) async {
  do {
    let value = try await actual()
    XCTAssertNil(value, message, file: file, line: line)
  } catch {
    XCTFail("threw \(error) \(message)", file: file, line: line)
  }
}

func XCTAssertFalseAsync(
  _ actual: @autoclosure () async throws -> Bool, _ message: String = "", file: StaticString = #filePath,
  line: UInt = #line
) async {
  do {
    let value = try await actual()
    XCTAssertFalse(value, message, file: file, line: line)
  } catch {
    XCTFail("threw \(error) \(message)", file: file, line: line)
  }
}

/// Polls `condition` every few milliseconds for at most `seconds`: the one
/// way these tests wait for something another task does.
func eventually(_ seconds: Double = 10, _ condition: () -> Bool) async -> Bool {
  let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
  while ContinuousClock.now < deadline {
    if condition() { return true }
    try? await Task.sleep(for: .milliseconds(2))
  }
  return condition()
}

import Logging
import NIOCore
import ObjectStore
import StorageFake
import Synchronization
import XCTest

@testable import ContentCache

#if canImport(Glibc)
  import Glibc
#endif

/// A fresh directory for one test, removed with its contents afterwards.
func temporaryDirectory(_ test: XCTestCase) -> String {
  var template = Array("/tmp/bucketfs-cache-test-XXXXXX".utf8CString)
  let path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)) }
  test.addTeardownBlock { removeTree(path) }
  return path
}

private func removeTree(_ path: String) {
  guard let dir = opendir(path) else {
    unlink(path)
    return
  }
  while let entry = readdir(dir) {
    let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
      String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
    }
    guard name != ".", name != ".." else { continue }
    removeTree(path + "/" + name)
  }
  closedir(dir)
  rmdir(path)
}

let quiet = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }

/// Log lines at warning or above, kept for a test to read.
final class CapturedLog: Sendable {
  private let lines = Mutex<[String]>([])
  var all: [String] { lines.withLock { $0 } }

  var logger: Logger {
    Logger(label: "test") { _ in Handler(log: self) }
  }

  private struct Handler: LogHandler {
    let log: CapturedLog
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .warning
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
      get { metadata[key] }
      set { metadata[key] = newValue }
    }
    func log(event: LogEvent) {
      log.lines.withLock { $0.append("\(event.message)") }
    }
  }
}

/// Bytes that differ at every offset, so a wrong offset shows.
func pattern(_ count: Int, seed: UInt8 = 1) -> [UInt8] {
  (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ ($0 >> 9) &+ Int(seed)) }
}

extension ByteBuffer {
  var bytes: [UInt8] { Array(readableBytesView) }
}

/// The real files, with writes that fail with `code` while `failing` is set.
final class FailingDisk: CacheDisk {
  let failing = Atomic<Bool>(false)
  let code: Int32
  private let local = LocalDisk()

  init(code: Int32 = ENOSPC) { self.code = code }

  func write(_ path: String, at offset: Int64, _ bytes: UnsafeRawBufferPointer) throws(DiskError) {
    if failing.load(ordering: .relaxed) { throw DiskError(code, "write \(path)") }
    try local.write(path, at: offset, bytes)
  }
  func read(_ path: String, at offset: Int64, into: UnsafeMutableRawBufferPointer) throws(DiskError) -> Int {
    try local.read(path, at: offset, into: into)
  }
  func contents(_ path: String) throws(DiskError) -> [UInt8]? { try local.contents(path) }
  func replace(_ path: String, with bytes: [UInt8]) throws(DiskError) {
    if failing.load(ordering: .relaxed) { throw DiskError(code, "write \(path)") }
    try local.replace(path, with: bytes)
  }
  func remove(_ path: String) { local.remove(path) }
  func touch(_ path: String) { local.touch(path) }
  func list(_ directory: String) -> [(name: String, modified: Int64)] { local.list(directory) }
}

/// A store that reports a wrong crc32c for every object: what a whole-object check must catch.
final class WrongChecksumStore: ForwardingObjectStore {
  let inner: any ObjectStore
  init(_ inner: any ObjectStore) { self.inner = inner }

  func metadata(of name: String) async throws -> ObjectMetadata {
    var object = try await inner.metadata(of: name)
    object.crc32c = "AAAAAA=="
    return object
  }
}

/// Flips one byte of a file in place.
func corrupt(_ path: String, at offset: Int64) {
  let fd = open(path, O_RDWR)
  precondition(fd >= 0, "open \(path)")
  defer { close(fd) }
  var byte: UInt8 = 0
  _ = pread(fd, &byte, 1, off_t(offset))
  byte ^= 0xff
  _ = pwrite(fd, &byte, 1, off_t(offset))
}

func fileNames(in directory: String) -> [String] {
  LocalDisk().list(directory).map(\.name).sorted()
}

extension CachingStore {
  /// A read, then the disk work it queued: what the next read finds.
  func readSettled(
    _ name: String, generation: Int64, range: Range<Int64>, reusing spare: SpareBuffer? = nil
  ) async throws -> ByteBuffer {
    let bytes = try await read(name, generation: generation, range: range, reusing: spare)
    await settled()
    return bytes
  }
}

/// The real files, with data writes (or reads) that wait while `holding` is
/// set: disk work caught in the middle. Counts data writes.
final class HeldDisk: CacheDisk {
  let holdingWrites = Atomic<Bool>(false)
  let holdingReads = Atomic<Bool>(false)
  let writesStarted = Atomic<Int>(0)
  let readsStarted = Atomic<Int>(0)
  private let local = LocalDisk()

  private func wait(while flag: borrowing Atomic<Bool>) {
    while flag.load(ordering: .acquiring) { usleep(1000) }
  }

  func write(_ path: String, at offset: Int64, _ bytes: UnsafeRawBufferPointer) throws(DiskError) {
    writesStarted.add(1, ordering: .relaxed)
    wait(while: holdingWrites)
    try local.write(path, at: offset, bytes)
  }
  func read(_ path: String, at offset: Int64, into: UnsafeMutableRawBufferPointer) throws(DiskError) -> Int {
    readsStarted.add(1, ordering: .relaxed)
    wait(while: holdingReads)
    return try local.read(path, at: offset, into: into)
  }
  func contents(_ path: String) throws(DiskError) -> [UInt8]? { try local.contents(path) }
  func replace(_ path: String, with bytes: [UInt8]) throws(DiskError) { try local.replace(path, with: bytes) }
  func remove(_ path: String) { local.remove(path) }
  func touch(_ path: String) { local.touch(path) }
  func list(_ directory: String) -> [(name: String, modified: Int64)] { local.list(directory) }
}

/// Upload bytes in a file of their own, which can be linked as the stage's is.
struct FileSource: UploadSource {
  let path: String
  let size: Int64

  init(path: String, bytes: [UInt8]) {
    self.path = path
    self.size = Int64(bytes.count)
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    precondition(fd >= 0, "open \(path)")
    _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    close(fd)
  }

  func read(at offset: Int64, count: Int) throws -> ByteBuffer {
    var buffer = ByteBufferAllocator().buffer(capacity: count)
    let fd = open(path, O_RDONLY)
    defer { close(fd) }
    let n = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { raw in
      max(0, pread(fd, raw.baseAddress, count, off_t(offset)))
    }
    _ = n
    return buffer
  }

  func link(to path: String) -> Bool {
    Glibc.link(self.path, path) == 0
  }
}

func inode(_ path: String) -> ino_t? {
  var info = stat()
  return stat(path, &info) == 0 ? info.st_ino : nil
}

/// Whether `condition` holds within `seconds`, polled every millisecond.
func eventually(_ seconds: Double = 10, _ condition: () -> Bool) async -> Bool {
  let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
  while ContinuousClock.now < deadline {
    if condition() { return true }
    try? await Task.sleep(for: .milliseconds(1))
  }
  return condition()
}

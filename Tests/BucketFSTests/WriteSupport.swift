import CoreMetrics
import FUSE
import Logging
import ObjectStore
import StorageFake
import Synchronization
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// A fresh private directory for one test's stages.
func makeStageDirectory() -> String {
  var template = Array("/tmp/bucketfs-test-stages-XXXXXX".utf8CString)
  let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
  precondition(made != nil, "mkdtemp failed")
  return String(cString: made!)
}

/// Every file name in `directory`.
func filesIn(_ directory: String) -> [String] {
  guard let dir = opendir(directory) else { return [] }
  defer { closedir(dir) }
  var names: [String] = []
  while let entry = readdir(dir) {
    let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
      String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
    }
    if name != "." && name != ".." { names.append(name) }
  }
  return names.sorted()
}

func makeWritingFileSystem(
  _ store: any ObjectStore, stageDirectory: String = makeStageDirectory(), firebase: Bool = false,
  clock: ManualClock = ManualClock(), mimeTypes: String? = "/etc/mime.types",
  stageFiles: any StageFiles = LocalStageFiles(), metrics: any MetricsFactory = MetricsSystem.factory,
  streamDiskLimit: Int64? = nil
) -> BucketFileSystem {
  var configuration = Configuration()
  configuration.uid = 1234
  configuration.gid = 5678
  configuration.stageDirectory = stageDirectory
  configuration.firebaseDownloadTokens = firebase
  configuration.mimeTypesPath = mimeTypes
  configuration.streamDiskLimit = streamDiskLimit
  return BucketFileSystem(
    store: store, configuration: configuration, logger: quietLogger, clock: clock.read, onMounted: {},
    stageFiles: stageFiles, metrics: metrics)
}

/// Stage files whose next writes or truncations fail with the errno given,
/// one per call, as a full or failing disk would.
final class FailingStageFiles: StageFiles {
  let failures = Mutex<[Int32]>([])

  func fail(_ codes: [Int32]) { failures.withLock { $0 += codes } }

  private func next() -> Int32? { failures.withLock { $0.isEmpty ? nil : $0.removeFirst() } }

  func write(_ fd: Int32, _ data: UnsafeRawBufferPointer, at offset: UInt64) -> Int32 {
    next() ?? LocalStageFiles().write(fd, data, at: offset)
  }

  func truncate(_ fd: Int32, to size: UInt64) -> Int32 {
    next() ?? LocalStageFiles().truncate(fd, to: size)
  }
}

/// Stage files that change the byte at `offset` of what is written there,
/// as a failing disk might: the writer's bytes and the stage's then differ.
struct FlippingStageFiles: StageFiles {
  let offset: UInt64

  func write(_ fd: Int32, _ data: UnsafeRawBufferPointer, at start: UInt64) -> Int32 {
    guard (start..<start + UInt64(data.count)).contains(offset) else {
      return LocalStageFiles().write(fd, data, at: start)
    }
    var changed = Array(data)
    changed[Int(offset - start)] ^= 0x5a
    return changed.withUnsafeBytes { LocalStageFiles().write(fd, $0, at: start) }
  }

  func truncate(_ fd: Int32, to size: UInt64) -> Int32 {
    LocalStageFiles().truncate(fd, to: size)
  }
}

extension BucketFileSystem {
  /// create(2) of a path whose parent exists.
  func createFile(_ path: String, flags: Int32 = O_WRONLY | O_CREAT) async throws -> (
    inode: UInt64, handle: UInt64
  ) {
    var components = path.split(separator: "/").map(String.init)
    let name = components.removeLast()
    let parent = try await inode(at: components.joined(separator: "/"))
    let (entry, opened) = try await create(parent: parent, name: name, mode: 0o644, flags: flags)
    return (entry.attributes!.inode, opened.handle)
  }

  func openFile(_ path: String, flags: Int32) async throws -> (inode: UInt64, handle: UInt64) {
    let inode = try await inode(at: path)
    let handle = try await open(inode: inode, flags: flags).handle
    return (inode, handle)
  }

  /// A write as the session makes it: inline when it can be, else in a task.
  func writeBytes(_ inode: UInt64, _ handle: UInt64, at offset: UInt64, _ data: [UInt8]) async throws -> Int {
    let inline = data.withUnsafeBytes { writeInline(inode: inode, handle: handle, offset: offset, data: $0) }
    if let inline { return try inline.get() }
    return try await write(inode: inode, handle: handle, offset: offset, data: data)
  }

  func writeText(_ inode: UInt64, _ handle: UInt64, at offset: UInt64, _ text: String) async throws {
    let written = try await writeBytes(inode, handle, at: offset, Array(text.utf8))
    XCTAssertEqual(written, text.utf8.count)
  }

  /// Everything a handle reads from `offset` to the end.
  func readAll(_ inode: UInt64, _ handle: UInt64, from offset: UInt64 = 0) async throws -> [UInt8] {
    var result: [UInt8] = []
    var at = offset
    while true {
      var pieces = readInline(inode: inode, handle: handle, offset: at, size: 1 << 16)
      if pieces == nil { pieces = try await read(inode: inode, handle: handle, offset: at, size: 1 << 16) }
      let chunk = pieces!.flatMap { Array($0.readableBytesView) }
      if chunk.isEmpty { return result }
      result += chunk
      at += UInt64(chunk.count)
    }
  }

  /// close(2): flush, then release.
  func close(_ inode: UInt64, _ handle: UInt64) async throws {
    defer { release(inode: inode, handle: handle) }
    try await flush(inode: inode, handle: handle)
  }
}

func text(_ bytes: [UInt8]?) -> String? { bytes.map { String(decoding: $0, as: UTF8.self) } }

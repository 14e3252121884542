import CoreMetrics
import IOThreads
import NIOCore
import ObjectStore
import Synchronization

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

#if canImport(Glibc)
  import Glibc
#endif

/// A local failure of the staging disk (ENOSPC, EIO, …), passed to the
/// caller as its own errno.
struct StageFailure: Error, Equatable {
  let code: Int32
}

/// The calls that change the bytes of a stage file. ``LocalStageFiles`` makes
/// them; tests put in one that fails as a full or broken disk would.
protocol StageFiles: Sendable {
  /// Writes all of `data` at `offset` of `fd`: 0, or the errno of the failure.
  func write(_ fd: Int32, _ data: UnsafeRawBufferPointer, at offset: UInt64) -> Int32
  /// Sets the size of `fd`: 0, or the errno of the failure.
  func truncate(_ fd: Int32, to size: UInt64) -> Int32
  /// Frees the disk under `range` of `fd` (a hole; the size stays): 0, or the errno.
  func punch(_ fd: Int32, _ range: Range<Int64>) -> Int32
}

extension StageFiles {
  func punch(_ fd: Int32, _ range: Range<Int64>) -> Int32 {
    guard let fallocate = Self.fallocate else { return EOPNOTSUPP }
    // FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
    while fallocate(fd, 0x02 | 0x01, off_t(range.lowerBound), off_t(range.count)) != 0 {
      if errno != EINTR { return errno }
    }
    return 0
  }

  /// glibc's fallocate(2), which its Swift module leaves out (it is a GNU extension).
  private static var fallocate: (@convention(c) (Int32, Int32, off_t, off_t) -> Int32)? {
    guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "fallocate") else { return nil }
    return unsafeBitCast(symbol, to: (@convention(c) (Int32, Int32, off_t, off_t) -> Int32).self)
  }
}

/// `pwrite` and `ftruncate`, retried after EINTR.
struct LocalStageFiles: StageFiles {
  func write(_ fd: Int32, _ data: UnsafeRawBufferPointer, at offset: UInt64) -> Int32 {
    var done = 0
    while done < data.count {
      let n = pwrite(fd, data.baseAddress! + done, data.count - done, off_t(offset) + off_t(done))
      if n < 0 {
        if errno == EINTR { continue }
        return errno
      }
      done += n
    }
    return 0
  }

  func truncate(_ fd: Int32, to size: UInt64) -> Int32 {
    while ftruncate(fd, off_t(size)) != 0 {
      if errno != EINTR { return errno }
    }
    return 0
  }
}

/// The private per-mount directory that holds staged files (mode 0700), one
/// data file and one sidecar per staged inode.
final class StageDirectory: Sendable {
  let path: String
  let files: any StageFiles
  /// Where the stages' file work runs; nil: on the caller's thread (tests).
  let io: IOPool?
  /// `bucketfs_staged_bytes`: the lengths of the data files of live stages.
  let staged: Meter
  private let counter = Atomic<UInt64>(0)
  private let pid = getpid()

  /// Creates `path` (and missing parents) if needed and restricts it to its owner.
  init(path: String, files: any StageFiles = LocalStageFiles(), io: IOPool? = nil, staged: Meter)
    throws(StageFailure)
  {
    self.path = path.hasSuffix("/") && path.count > 1 ? String(path.dropLast()) : path
    self.files = files
    self.io = io
    self.staged = staged
    try Self.makeDirectories(self.path)
    if chmod(self.path, 0o700) != 0 { throw StageFailure(code: errno) }
  }

  static func makeDirectories(_ path: String) throws(StageFailure) {
    var built = path.hasPrefix("/") ? "" : "."
    for component in path.split(separator: "/") {
      built += "/" + component
      if mkdir(built, 0o700) != 0 && errno != EEXIST { throw StageFailure(code: errno) }
    }
  }

  /// A fresh, empty stage file; names are unique within this process.
  func makeStage() throws(StageFailure) -> Stage {
    let number = counter.wrappingAdd(1, ordering: .relaxed).newValue
    let name = "stage-\(pid)-\(number)"
    let data = path + "/" + name
    let fd = open(data, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw StageFailure(code: errno) }
    return Stage(fd: fd, path: data, sidecarPath: data + ".json", directory: self)
  }
}

/// What the sidecar of a stage records: enough for the next mount to say
/// what the staged bytes were meant to become.
struct StageRecord: Codable, Equatable {
  var key: String
  /// The generation the upload was to replace; 0 for a new object.
  var baseGeneration: Int64
  /// True once the staged bytes are stored (nothing would be lost).
  var uploaded: Bool
  var fields: [String: String]
  var custom: [String: String]
  /// Where a streamed file's parts went: the stage lacks their bytes.
  var parts: String? = nil
}

/// One staged file: the bytes of a file being written, on disk, never in memory.
final class Stage: Sendable {
  let fd: Int32
  let path: String
  let sidecarPath: String
  let directory: StageDirectory
  /// The data file's length as the writes and truncations through this
  /// stage left it (they are ordered by the file's gate), counted in
  /// ``StageDirectory/staged`` until the stage is let go.
  private let length = Atomic<Int64>(0)
  /// Bytes of the data file punched out (stored as parts of a stream): not
  /// on disk, so not counted as staged.
  private let punched = Atomic<Int64>(0)
  /// Second names of the data file (``link(to:)``), removed before its bytes change.
  private let links = Mutex<[String]>([])
  private let linked = Atomic<Bool>(false)

  init(fd: Int32, path: String, sidecarPath: String, directory: StageDirectory) {
    self.fd = fd
    self.path = path
    self.sidecarPath = sidecarPath
    self.directory = directory
  }

  deinit {
    close(fd)
    let counted = length.load(ordering: .relaxed) - punched.load(ordering: .relaxed)
    if counted > 0 { directory.staged.decrement(by: Double(counted)) }
  }

  /// Writes all of `data` at `offset`: 0, or the errno of the local failure.
  func write(_ data: [UInt8], at offset: UInt64) async -> Int32 {
    await onDisk { data.withUnsafeBytes { self.writeBlocking($0, at: offset) } }
  }

  func write(_ data: ByteBuffer, at offset: UInt64) async -> Int32 {
    await onDisk { data.withUnsafeReadableBytes { self.writeBlocking($0, at: offset) } }
  }

  func truncate(to size: UInt64) async -> Int32 {
    await onDisk { self.truncateBlocking(to: size) }
  }

  /// Frees the disk under `range`, whose bytes are stored elsewhere: 0, or the errno.
  func punch(_ range: Range<Int64>) async -> Int32 {
    await onDisk { self.punchBlocking(range) }
  }

  /// Up to `count` bytes at `offset`, fewer only at the stage's end.
  func read(at offset: Int64, count: Int) async throws(StageFailure) -> ByteBuffer {
    try await onDisk { () -> Result<ByteBuffer, StageFailure> in
      do throws(StageFailure) {
        return .success(try self.readBlocking(at: offset, count: count))
      } catch {
        return .failure(error)
      }
    }.get()
  }

  /// Writes the sidecar atomically (a temporary file renamed over it).
  func writeRecord(_ record: StageRecord) async -> Int32 {
    await onDisk { self.writeRecordBlocking(record) }
  }

  /// Runs blocking file work on the directory's I/O threads, off the
  /// concurrency pool. The work always runs: where the pool will not take
  /// it (cancelled before it began, or shutting down), on this thread.
  private func onDisk<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    guard let io = directory.io else { return body() }
    do {
      return try await io.run(body)
    } catch {
      return body()
    }
  }

  private func writeBlocking(_ data: UnsafeRawBufferPointer, at offset: UInt64) -> Int32 {
    dropLinks()
    let code = directory.files.write(fd, data, at: offset)
    if data.count > 0 {
      resized(code == 0 ? max(length.load(ordering: .relaxed), Int64(offset) + Int64(data.count)) : nil)
    }
    return code
  }

  private func truncateBlocking(to size: UInt64) -> Int32 {
    dropLinks()
    // Holes cut from the whole file are counted by its length again, then dropped.
    if size == 0 { refilled() }
    let code = directory.files.truncate(fd, to: size)
    resized(code == 0 ? Int64(size) : nil)
    return code
  }

  private func punchBlocking(_ range: Range<Int64>) -> Int32 {
    dropLinks()
    let code = directory.files.punch(fd, range)
    if code == 0 {
      punched.add(Int64(range.count), ordering: .relaxed)
      directory.staged.decrement(by: Double(range.count))
    }
    return code
  }

  /// The punched ranges were written again (or dropped by a truncation to 0).
  func refilled() {
    let was = punched.exchange(0, ordering: .relaxed)
    if was > 0 { directory.staged.increment(by: Double(was)) }
  }

  /// Gives the data file the second name `path` (a hard link: the read
  /// cache keeps the bytes just stored as they are); false where the
  /// filesystem refuses. Called under the file's gate, as writes are.
  func link(to path: String) -> Bool {
    guard Glibc.link(self.path, path) == 0 else { return false }
    links.withLock { $0.append(path) }
    linked.store(true, ordering: .releasing)
    return true
  }

  /// Removes the second names before the bytes change, each only if it
  /// still names this file (the cache may have replaced or removed it):
  /// what holds them sees a missing file, never changed bytes.
  private func dropLinks() {
    guard linked.load(ordering: .acquiring) else { return }
    let paths = links.withLock { paths in
      linked.store(false, ordering: .relaxed)
      defer { paths = [] }
      return paths
    }
    var own = stat()
    guard fstat(fd, &own) == 0 else { return }
    for path in paths {
      var other = stat()
      if lstat(path, &other) == 0, other.st_ino == own.st_ino, other.st_dev == own.st_dev {
        Glibc.unlink(path)
      }
    }
  }

  /// Records the data file's new length; nil after a failure, which may
  /// have changed it part way: then the file says.
  private func resized(_ known: Int64?) {
    var now = known
    if now == nil {
      var info = stat()
      if fstat(fd, &info) == 0 { now = Int64(info.st_size) }
    }
    guard let now else { return }
    let before = length.exchange(now, ordering: .relaxed)
    if now > before {
      directory.staged.increment(by: Double(now - before))
    } else if now < before {
      directory.staged.decrement(by: Double(before - now))
    }
  }

  fileprivate func readBlocking(at offset: Int64, count: Int) throws(StageFailure) -> ByteBuffer {
    var buffer = ByteBufferAllocator().buffer(capacity: max(count, 0))
    var failure: Int32 = 0
    buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: max(count, 0)) { raw in
      var done = 0
      while done < count {
        let n = pread(fd, raw.baseAddress! + done, count - done, off_t(offset) + off_t(done))
        if n < 0 {
          if errno == EINTR { continue }
          failure = errno
          return done
        }
        if n == 0 { break }
        done += n
      }
      return done
    }
    if failure != 0 { throw StageFailure(code: failure) }
    return buffer
  }

  private func writeRecordBlocking(_ record: StageRecord) -> Int32 {
    guard let json = try? JSONEncoder().encode(record) else { return EIO }
    let temporary = sidecarPath + ".tmp"
    let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    guard fd >= 0 else { return errno }
    let failure = json.withUnsafeBytes { bytes -> Int32 in
      var done = 0
      while done < bytes.count {
        let n = Glibc.write(fd, bytes.baseAddress! + done, bytes.count - done)
        if n < 0 {
          if errno == EINTR { continue }
          return errno
        }
        done += n
      }
      return 0
    }
    close(fd)
    if failure != 0 {
      unlink(temporary)
      return failure
    }
    return rename(temporary, sidecarPath) == 0 ? 0 : errno
  }

  /// Deletes the data file and its sidecar.
  func remove() {
    unlink(sidecarPath)
    unlink(path)
  }
}

/// The bytes of a stage (or of a range of it: a streamed part) as an upload reads them.
struct StageSource: UploadSource {
  let stage: Stage
  let range: Range<Int64>
  /// The whole data file: a cache may keep it by a second name.
  private let whole: Bool

  init(stage: Stage, size: Int64) {
    self.stage = stage
    range = 0..<size
    whole = true
  }

  init(stage: Stage, range: Range<Int64>) {
    self.stage = stage
    self.range = range
    whole = false
  }

  var size: Int64 { Int64(range.count) }

  func read(at offset: Int64, count: Int) throws -> ByteBuffer {
    let count = clamped(count, at: offset)
    return try checked(stage.readBlocking(at: range.lowerBound + offset, count: count), count: count)
  }

  func load(at offset: Int64, count: Int) async throws -> ByteBuffer {
    let count = clamped(count, at: offset)
    return try checked(await stage.read(at: range.lowerBound + offset, count: count), count: count)
  }

  private func clamped(_ count: Int, at offset: Int64) -> Int {
    Int(max(0, min(Int64(count), size - offset)))
  }

  private func checked(_ bytes: ByteBuffer, count: Int) throws -> ByteBuffer {
    // The stage shrank under the upload: never send a short object.
    guard bytes.readableBytes == count else { throw StageFailure(code: EIO) }
    return bytes
  }

  func link(to path: String) -> Bool {
    whole && stage.link(to: path)
  }
}

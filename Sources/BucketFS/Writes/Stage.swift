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

  /// Up to `count` bytes at `offset`, fewer only at the stage's end; into
  /// `spare`'s memory when given and nothing else holds it (an upload's
  /// pieces: fresh pages for each piece were a fifth of a cp's CPU,
  /// faulted in by the `pread`).
  func read(at offset: Int64, count: Int, reusing spare: SpareBuffer? = nil) async throws(StageFailure)
    -> ByteBuffer
  {
    try await onDisk { () -> Result<ByteBuffer, StageFailure> in
      do throws(StageFailure) {
        return .success(try self.readBlocking(at: offset, count: count, into: spare?.take()))
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

  /// `count` bytes at `offset`, read on the calling thread (``StageSource``'s
  /// synchronous read; ``read(at:count:)`` runs on the I/O pool).
  func readBlocking(at offset: Int64, count: Int, into recycled: consuming ByteBuffer? = nil)
    throws(StageFailure)
    -> ByteBuffer
  {
    var buffer = (consume recycled) ?? ByteBuffer()
    buffer.clear(minimumCapacity: max(count, 0))
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

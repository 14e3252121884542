import ObjectStore
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// A failed file operation of the cache: the errno, and what was done.
public struct DiskError: Error, Sendable, CustomStringConvertible {
  public let code: Int32
  public let operation: String

  public init(_ code: Int32, _ operation: String) {
    self.code = code
    self.operation = operation
  }

  public var description: String { "\(operation): \(String(cString: strerror(code)))" }
}

/// The file operations the cache makes, so tests can make them fail (a
/// full disk, an I/O error) where a real full disk is out of reach.
public protocol CacheDisk: Sendable {
  /// Writes all of `bytes` at `offset` of `path`, creating the file.
  func write(_ path: String, at offset: Int64, _ bytes: UnsafeRawBufferPointer) throws(DiskError)
  /// Fills `into` from `offset` of `path`; the count read (short at end of file).
  func read(_ path: String, at offset: Int64, into: UnsafeMutableRawBufferPointer) throws(DiskError) -> Int
  /// The whole small file; nil if it does not exist.
  func contents(_ path: String) throws(DiskError) -> [UInt8]?
  /// Replaces `path` with `bytes` atomically: a temporary file (`….tmp`, a
  /// name of its own for each call) renamed over it.
  func replace(_ path: String, with bytes: [UInt8]) throws(DiskError)
  func remove(_ path: String)
  /// Sets the file's modification time to now (an entry's last use).
  func touch(_ path: String)
  /// The names in a directory, with their modification times (seconds).
  func list(_ directory: String) -> [(name: String, modified: Int64)]
}

/// The cache's files on the local filesystem.
public struct LocalDisk: CacheDisk {
  /// Numbers the temporary files of replacements made at once.
  private static let replacements = Atomic<UInt64>(0)

  public init() {}

  public func write(_ path: String, at offset: Int64, _ bytes: UnsafeRawBufferPointer) throws(DiskError) {
    let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw DiskError(errno, "open \(path)") }
    defer { close(fd) }
    var done = 0
    while done < bytes.count {
      let n = pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done))
      if n < 0 && errno == EINTR { continue }
      guard n > 0 else { throw DiskError(n < 0 ? errno : EIO, "write \(path)") }
      done += n
    }
  }

  public func read(_ path: String, at offset: Int64, into: UnsafeMutableRawBufferPointer) throws(DiskError)
    -> Int
  {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { throw DiskError(errno, "open \(path)") }
    defer { close(fd) }
    var done = 0
    while done < into.count {
      let n = pread(fd, into.baseAddress! + done, into.count - done, off_t(offset) + off_t(done))
      if n < 0 && errno == EINTR { continue }
      if n < 0 { throw DiskError(errno, "read \(path)") }
      if n == 0 { break }
      done += n
    }
    return done
  }

  public func contents(_ path: String) throws(DiskError) -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else {
      if errno == ENOENT { return nil }
      throw DiskError(errno, "open \(path)")
    }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
      let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
      if n < 0 && errno == EINTR { continue }
      if n < 0 { throw DiskError(errno, "read \(path)") }
      if n == 0 { return bytes }
      bytes += chunk[0..<n]
    }
  }

  public func replace(_ path: String, with bytes: [UInt8]) throws(DiskError) {
    let number = Self.replacements.add(1, ordering: .relaxed).newValue
    let temporary = path + ".\(number).tmp"
    let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw DiskError(errno, "open \(temporary)") }
    var done = 0
    while done < bytes.count {
      let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + done, $0.count - done) }
      if n < 0 && errno == EINTR { continue }
      guard n > 0 else {
        let code = n < 0 ? errno : EIO
        close(fd)
        unlink(temporary)
        throw DiskError(code, "write \(temporary)")
      }
      done += n
    }
    guard close(fd) == 0 else {
      let code = errno
      unlink(temporary)
      throw DiskError(code, "close \(temporary)")
    }
    guard rename(temporary, path) == 0 else {
      let code = errno
      unlink(temporary)
      throw DiskError(code, "rename \(temporary)")
    }
  }

  public func remove(_ path: String) {
    unlink(path)
  }

  public func touch(_ path: String) {
    utimensat(AT_FDCWD, path, nil, 0)
  }

  public func list(_ directory: String) -> [(name: String, modified: Int64)] {
    var found: [(name: String, modified: Int64)] = []
    for name in LocalDirectory.names(in: directory) ?? [] {
      var info = stat()
      guard stat(directory + "/" + name, &info) == 0 else { continue }
      found.append((name, Int64(info.st_mtim.tv_sec)))
    }
    return found
  }
}

import ObjectStore

#if canImport(Glibc)
  import Glibc
#endif

/// A bucket's directory of entries under `<cache-dir>/read-cache`, held
/// with an exclusive `flock` for as long as the mount uses it: a second
/// mount of the same bucket over the same cache directory cannot take it
/// and runs without the cache.
final class CacheDirectory: Sendable {
  let path: String
  private let lockDescriptor: Int32

  /// Why a directory could not be taken.
  enum Failure: Error, CustomStringConvertible {
    case inUse(String)
    case unusable(String, Int32)

    var description: String {
      switch self {
      case .inUse(let path): "\(path) is in use by another mount of the bucket"
      case .unusable(let path, let code): "\(path): \(String(cString: strerror(code)))"
      }
    }
  }

  /// Creates (0700) and locks the bucket's directory under `cacheDirectory`,
  /// waiting up to `patience` for a mount that is exiting (an unmount
  /// returns before its daemon has exited) to let go of it. The holder
  /// writes its mountpoint into the lock file: one still mounted
  /// (`isMounted`) is a live mount, not an exiting one, so there is no
  /// wait for it (a second mount of the bucket comes up at once, without
  /// the cache).
  init(
    cacheDirectory: String, bucket: String, patience: Duration, mountpoint: String? = nil,
    isMounted: ((String) -> Bool)? = nil
  ) throws(Failure) {
    let base = cacheDirectory.hasSuffix("/") ? String(cacheDirectory.dropLast()) : cacheDirectory
    let root = base + "/read-cache"
    path = root + "/" + FNV1a.hex(bucket)
    for directory in [base, root, path] where mkdir(directory, 0o700) != 0 && errno != EEXIST {
      throw .unusable(directory, errno)
    }
    let fd = open(path + "/lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw .unusable(path + "/lock", errno) }
    let deadline = ContinuousClock.now + patience
    while flock(fd, LOCK_EX | LOCK_NB) != 0 {
      let code = errno
      if code == EINTR { continue }
      let holderLive = code == EWOULDBLOCK && (Self.holder(fd).map { isMounted?($0) ?? false } ?? false)
      if code == EWOULDBLOCK && !holderLive && ContinuousClock.now < deadline {
        usleep(50_000)
        continue
      }
      close(fd)
      if code == EWOULDBLOCK { throw .inUse(path) }
      throw .unusable(path + "/lock", code)
    }
    lockDescriptor = fd
    if let mountpoint {
      let line = Array((mountpoint + "\n").utf8)
      if ftruncate(fd, 0) != 0 || pwrite(fd, line, line.count, 0) != line.count {
        _ = ftruncate(fd, 0)  // a partial name would be taken for a holder's: none is written
      }
    }
  }

  /// The mountpoint the lock's holder wrote, if any.
  private static func holder(_ fd: Int32) -> String? {
    var bytes = [UInt8](repeating: 0, count: 4097)
    let count = pread(fd, &bytes, bytes.count, 0)
    guard count > 1, count < bytes.count, bytes[count - 1] == UInt8(ascii: "\n") else { return nil }
    return String(decoding: bytes[..<(count - 1)], as: UTF8.self)
  }

  deinit {
    close(lockDescriptor)  // and with it the lock
  }

  /// Free space of the directory's filesystem for unprivileged users.
  var freeBytes: Int64 {
    var info = statvfs()
    guard statvfs(path, &info) == 0 else { return 0 }
    return Int64(info.f_bavail) * Int64(info.f_frsize)
  }

  /// The files of the entry for a name and generation (without extension).
  /// The name's FNV-1a hash names the files: the map holds the name itself,
  /// so a collision is a miss, never a wrong hit.
  func entryPath(name: String, generation: Int64) -> String {
    path + "/" + FNV1a.hex(name) + "-" + String(generation)
  }
}

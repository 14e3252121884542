import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// Where a mount lives on this machine: its mountpoint (checked before
/// mounting), and the cache and stage directories under `--cache-dir`.
extension Mount {
  func checkMountpoint() throws(MountFailure) {
    var info = stat()
    if stat(mountpoint, &info) != 0 {
      switch errno {
      case ENOENT: throw MountFailure(message: "mountpoint \(mountpoint) does not exist")
      case ENOTCONN, ECONNABORTED:
        throw MountFailure(
          message:
            "mountpoint \(mountpoint) is a stale FUSE mount; clear it with: bucketfs unmount \(mountpoint)")
      default: throw MountFailure(message: "mountpoint \(mountpoint): \(String(cString: strerror(errno)))")
      }
    }
    guard info.st_mode & S_IFMT == S_IFDIR else {
      throw MountFailure(message: "mountpoint \(mountpoint) is not a directory")
    }
    if MountTable.isMountpoint(mountpoint) {
      // stat may be answered from the kernel's cache; statvfs always reaches
      // the filesystem, so a dead FUSE server shows as ENOTCONN here.
      var fs = statvfs()
      if statvfs(mountpoint, &fs) != 0 && (errno == ENOTCONN || errno == ECONNABORTED) {
        throw MountFailure(
          message:
            "mountpoint \(mountpoint) is a stale FUSE mount; clear it with: bucketfs unmount \(mountpoint)")
      }
      throw MountFailure(message: "mountpoint \(mountpoint) is busy: something is already mounted there")
    }
  }

  /// `--cache-dir` when given, else its default (MountOptionTable.cacheDir):
  /// /var/cache/bucketfs for root, else $XDG_CACHE_HOME/bucketfs, else
  /// ~/.cache/bucketfs (with neither variable set, /tmp/bucketfs-UID).
  func defaultCacheDirectory() -> String {
    func variable(_ name: String) -> String? {
      getenv(name).map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 }
    }
    if getuid() == 0 { return "/var/cache/bucketfs" }
    if let xdg = variable("XDG_CACHE_HOME") { return xdg + "/bucketfs" }
    if let home = variable("HOME") { return home + "/.cache/bucketfs" }
    return "/tmp/bucketfs-\(getuid())"
  }

  /// `path` absolute, without symlinks; as given when that fails.
  func realPath(_ path: String) -> String {
    guard let resolved = realpath(path, nil) else { return path }
    defer { free(resolved) }
    return String(cString: resolved)
  }

  /// This mount's staging directory (see ``Recovery/stageDirectory``).
  func stageDirectory() -> String? {
    guard let source = BucketSource(source), let prefix = Names.rootPrefix(source.subtree) else { return nil }
    return Recovery.stageDirectory(
      cacheDirectory: cacheDir ?? defaultCacheDirectory(), bucket: source.bucket, prefix: prefix,
      mountpoint: realPath(mountpoint))
  }
}

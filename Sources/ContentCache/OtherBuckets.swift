#if canImport(Glibc)
  import Glibc
#endif

/// Entries of other buckets under the same `read-cache` directory that no
/// mount holds now (a bucket mounted once and not since): they count toward
/// this mount's limit, and the least recently used of them are deleted
/// first, so the disk a cache directory holds stays bounded by the limit of
/// the mounts running at once rather than growing with every bucket ever mounted.
extension ReadCache {
  func trimOtherBuckets() {
    let root = String(directory.path[..<(directory.path.lastIndex(of: "/") ?? directory.path.endIndex)])
    var held: [Int32] = []
    defer { for fd in held { close(fd) } }
    var entries: [(base: String, modified: Int64, bytes: Int64)] = []
    for (name, _) in disk.list(root) where root + "/" + name != directory.path {
      let bucket = root + "/" + name
      let fd = open(bucket + "/lock", O_RDWR | O_CLOEXEC)
      guard fd >= 0 else { continue }
      guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
        close(fd)  // a live mount's: not ours to touch
        continue
      }
      held.append(fd)
      for (file, modified) in disk.list(bucket) where file.hasSuffix(".map") {
        let base = bucket + "/" + file.dropLast(4)
        var info = stat()
        let bytes = stat(base + ".data", &info) == 0 ? Int64(info.st_blocks) * 512 : 0
        entries.append((base, modified, bytes))
      }
    }
    var excess = index.used + entries.reduce(0) { $0 + $1.bytes } - index.limit
    guard excess > 0 else { return }
    for entry in entries.sorted(by: { $0.modified < $1.modified }) where excess > 0 {
      disk.remove(entry.base + ".map")
      disk.remove(entry.base + ".data")
      excess -= entry.bytes
    }
    logger.info("read cache: removed the least recently used entries of buckets not mounted now")
  }
}

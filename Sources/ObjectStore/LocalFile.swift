#if canImport(Glibc)
  import Glibc
#endif

/// A small file on the local disk, read whole: a stage's sidecar, the
/// system's mime.types.
public enum LocalFile {
  /// The bytes of the file at `path`; nil when it cannot be opened or holds
  /// more than `limit` bytes. A read error ends the bytes where it came.
  public static func contents(of path: String, limit: Int) -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
      let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
      if n < 0 && errno == EINTR { continue }
      if n <= 0 { break }
      bytes += chunk[0..<n]
      if bytes.count > limit { return nil }
    }
    return bytes
  }
}

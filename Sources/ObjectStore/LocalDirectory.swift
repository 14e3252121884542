#if canImport(Glibc)
  import Glibc
#endif

/// A directory on the local disk. Shared by the two owners of local files,
/// the stages and the read cache.
public enum LocalDirectory {
  /// The names in the directory at `path`, but `.` and `..`; nil when it
  /// cannot be opened. A name that is not UTF-8 comes back with replacement
  /// characters (no file bucketfs makes has one).
  public static func names(in path: String) -> [String]? {
    guard let dir = opendir(path) else { return nil }
    defer { closedir(dir) }
    var names: [String] = []
    while let entry = readdir(dir) {
      let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
        String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
      }
      if name != ".", name != ".." { names.append(name) }
    }
    return names
  }
}

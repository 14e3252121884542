import FUSE

#if canImport(Glibc)
  import Glibc
#endif

/// How flat object names become a tree (docs/SEMANTICS.md#names).
public enum Names {
  /// What a name the kernel passes is for: checked by ``key(_:under:for:)``.
  enum Use {
    /// A name looked up, removed or renamed: one no listing could show is ENOENT.
    case existing
    /// A file's new name: one no listing could show is EINVAL.
    case newFile
    /// A directory's new name: its placeholder adds a `/` to the object name.
    case newDirectory
  }

  /// The service's limit on an object name, in bytes.
  static let maxObjectNameBytes = 1024

  /// `parentKey + name`, checked against the name rules before any request:
  /// ENAMETOOLONG past 255 bytes, or for a new name past the service's
  /// 1024-byte object names.
  static func key(_ name: String, under parentKey: String, for use: Use) throws(Errno) -> String {
    guard name.utf8.count <= 255 else { throw .nameTooLong }
    guard isValidComponent(name) else { throw use == .existing ? .noEntry : .invalid }
    let key = parentKey + name
    if use != .existing, key.utf8.count + (use == .newDirectory ? 1 : 0) > maxObjectNameBytes {
      throw .nameTooLong
    }
    return key
  }

  /// A path component the filesystem can show: non-empty, not `.` or `..`,
  /// at most 255 bytes, no NUL (and, being one component, no `/`).
  public static func isValidComponent<S: StringProtocol>(_ component: S) -> Bool {
    let bytes = component.utf8
    guard !bytes.isEmpty, bytes.count <= 255 else { return false }
    guard component != ".", component != ".." else { return false }
    return !bytes.contains(0) && !bytes.contains(UInt8(ascii: "/"))
  }

  /// The child component an item names under directory prefix `prefix`, or
  /// nil when the item is not shown there (the placeholder of the directory
  /// itself, or an invalid component).
  public static func fileComponent(item: String, under prefix: String) -> Substring? {
    guard item.utf8.count > prefix.utf8.count, item.utf8.starts(with: prefix.utf8) else { return nil }
    let rest = item.utf8.dropFirst(prefix.utf8.count)
    let component = Substring(rest)
    return isValidComponent(component) ? component : nil
  }

  /// The directory component a listed prefix (`prefix` + name + `/`) names.
  public static func directoryComponent(listed: String, under prefix: String) -> Substring? {
    guard listed.utf8.count > prefix.utf8.count, listed.utf8.starts(with: prefix.utf8),
      listed.utf8.last == UInt8(ascii: "/")
    else { return nil }
    let rest = listed.utf8.dropFirst(prefix.utf8.count).dropLast()
    let component = Substring(rest)
    return isValidComponent(component) ? component : nil
  }

  /// The mount root's prefix for `gs://bucket/some/prefix`: `some/prefix/`.
  /// Nil when a component is invalid, since nothing under it could be shown.
  public static func rootPrefix(_ subtree: String) -> String? {
    let parts = subtree.split(separator: "/", omittingEmptySubsequences: true)
    guard parts.allSatisfy({ isValidComponent($0) }) else { return nil }
    return parts.isEmpty ? "" : parts.joined(separator: "/") + "/"
  }

  /// Byte-wise order, the order the service lists names in.
  public static func precedes(_ a: String, _ b: String) -> Bool {
    let contiguous = a.utf8.withContiguousStorageIfAvailable { x in
      b.utf8.withContiguousStorageIfAvailable { y in
        let common = min(x.count, y.count)
        let order = common == 0 ? 0 : memcmp(x.baseAddress!, y.baseAddress!, common)
        return order != 0 ? order < 0 : x.count < y.count
      }
    }
    if let contiguous, let precedes = contiguous { return precedes }
    return a.utf8.lexicographicallyPrecedes(b.utf8)
  }
}

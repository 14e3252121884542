import CFuse

#if canImport(Glibc)
  import Glibc
#endif

/// Entries for one readdir reply, bounded by the size the kernel asked for.
///
/// Implementations: the session's (packs libfuse dirents) and tests' (collects).
public protocol DirectoryBuffer: AnyObject {
  /// True when entries carry attributes and each added entry (but `.` and
  /// `..`) counts as a lookup the filesystem must remember until forget.
  var isPlus: Bool { get }
  /// Adds one entry; false (and nothing added) when it does not fit.
  /// `nextOffset` is the offset a later readdir passes to continue after it.
  /// Not `held`: in a readdirplus reply the entry goes without a node (node
  /// id 0: the kernel makes no inode of it, counts no lookup, and looks the
  /// name up when it is used); its type and number still show.
  func add(name: String, entry: Entry, nextOffset: UInt64, held: Bool) -> Bool
}

extension DirectoryBuffer {
  /// Adds an entry that, in a readdirplus reply, counts as a lookup.
  public func add(name: String, entry: Entry, nextOffset: UInt64) -> Bool {
    add(name: name, entry: entry, nextOffset: nextOffset, held: true)
  }
}

/// Packs entries in libfuse's dirent format for a reply.
final class FUSEDirectoryBuffer: DirectoryBuffer {
  let isPlus: Bool
  private let request: fuse_req_t
  private let capacity: Int
  private(set) var bytes: UnsafeMutablePointer<CChar>
  private(set) var used = 0
  /// Inodes of the entries packed that count as lookups (readdirplus, not `.`/`..`).
  private(set) var counted: [UInt64] = []

  init(request: fuse_req_t, capacity: Int, plus: Bool) {
    self.request = request
    self.capacity = capacity
    self.isPlus = plus
    self.bytes = .allocate(capacity: max(capacity, 1))
  }

  deinit { bytes.deallocate() }

  func add(name: String, entry: Entry, nextOffset: UInt64, held: Bool) -> Bool {
    let remaining = capacity - used
    let needed = name.withCString { cName in
      if isPlus {
        var param = entry.parameters
        // The dirent's number is the attributes' (libfuse), not the node's.
        if !held { param.ino = 0 }
        return fuse_add_direntry_plus(
          request, bytes + used, remaining, cName, &param, off_t(Int64(bitPattern: nextOffset)))
      }
      var st = entry.attributes?.stat ?? Glibc.stat()
      return fuse_add_direntry(
        request, bytes + used, remaining, cName, &st, off_t(Int64(bitPattern: nextOffset)))
    }
    guard needed <= remaining else { return false }
    used += needed
    if isPlus, held, name != ".", name != "..", let inode = entry.attributes?.inode { counted.append(inode) }
    return true
  }
}

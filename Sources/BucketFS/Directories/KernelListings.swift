import Dispatch
import FUSE
import Synchronization

/// The kernel's directory listing cache (`--list-cache-ttl`, like gcsfuse's
/// `--kernel-list-cache-ttl-secs`): an `opendir` lets the kernel cache what
/// its readdir gives (FOPEN_CACHE_DIR), and one within the TTL of the last
/// fill keeps that (FOPEN_KEEP_CACHE), so a warm `ls` or walk sends nothing.
/// The kernel holds the entries; this holds only when each directory was
/// last filled. A change this mount makes under a directory ends that
/// directory's TTL and drops the kernel's copy (notify inval_inode, sent off
/// the request and outside every lock).
final class KernelListings: Sendable {
  enum Opening {
    /// The kernel lists through this handle and keeps what it gets.
    case fill
    /// The kernel answers from what it kept; the handle lists only if it was dropped meanwhile.
    case keep
  }

  let ttl: Double
  /// The inodes the kernel knows directories by (nil: none to tell, in tests).
  private let nodes: NodeTable?
  private let clock: @Sendable () -> Double
  /// When each directory's kernel listing was last filled (its `opendir`),
  /// by directory key; bounded, the oldest fills dropped first.
  private let filled = Mutex(BoundedMap<ObjectKey, Double>(capacity: KernelListings.capacity))
  private let kernel = Mutex<KernelCache>(.none)
  static let capacity = 4096
  private static let notifications = DispatchQueue(label: "bucketfs.list-cache-notifications")

  init(ttl: Double, nodes: NodeTable? = nil, clock: @escaping @Sendable () -> Double) {
    self.ttl = ttl
    self.nodes = nodes
    self.clock = clock
  }

  /// The kernel to tell, once mounted.
  func mounted(kernel: KernelCache) {
    self.kernel.withLock { $0 = kernel }
  }

  /// nil when the cache is off: the kernel keeps nothing.
  func opening(_ key: String) -> Opening? {
    guard ttl > 0 else { return nil }
    let now = clock()
    return filled.withLock { filled in
      if let at = filled[ObjectKey(key)], now - at < ttl { return .keep }
      // Counted from before the listing is asked for: never kept past the
      // TTL. Put last in line: the oldest fills are dropped first.
      filled.remove(ObjectKey(key))
      filled.insert(now, for: ObjectKey(key))
      return .fill
    }
  }

  /// This mount changed `key` (an object or a `dir/` prefix): every
  /// directory on its path may list differently now (a name, or a
  /// directory that appeared or vanished with it).
  func changed(_ key: String) {
    guard ttl > 0 else { return }
    let directories = Self.directories(holding: key)
    let dropped = filled.withLock { filled in
      directories.filter { directory in
        defer { filled.remove(ObjectKey(directory)) }
        return filled[ObjectKey(directory)] != nil
      }
    }
    guard !dropped.isEmpty else { return }
    guard let nodes else { return }
    let inodes = dropped.compactMap { nodes.held($0) }
    let kernel = self.kernel.withLock { $0 }
    Self.notifications.async {
      for inode in inodes { kernel.invalidate(inode: inode) }
    }
  }

  /// The directories (prefixes ending in `/`, `""` for the bucket's root)
  /// that list `key` or a directory on its way.
  static func directories(holding key: String) -> [String] {
    var result: [String] = []
    var rest = Substring(key)
    if rest.hasSuffix("/") { rest = rest.dropLast() }
    while let slash = rest.lastIndex(of: "/") {
      rest = rest[...slash]
      result.append(String(rest))
      rest = rest.dropLast()
    }
    result.append("")
    return result
  }
}

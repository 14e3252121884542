import CFuse

/// Tells the kernel to drop what it caches of an inode (attributes and page
/// cache) or of a name in a directory, when the bucket changed under it.
///
/// Never call these while the kernel waits on a reply for the same inode or
/// directory (it may hold the lock the notification needs): call them after
/// replying, or from work that is not a request.
public final class KernelCache: @unchecked Sendable {
  private let session: FUSESession?

  init(session: FUSESession?) {
    self.session = session
  }

  /// A cache that tells no kernel anything: for tests without a mount.
  public static let none = KernelCache(session: nil)

  /// Drops the inode's attributes and its cached pages from `offset` on (all
  /// of them when `length` is 0). Returns 0 or a negative errno (ENOENT: the
  /// kernel does not hold the inode).
  @discardableResult
  public func invalidate(inode: UInt64, offset: Int64 = 0, length: Int64 = 0) -> Int32 {
    session?.withSession { fuse_lowlevel_notify_inval_inode($0, inode, off_t(offset), off_t(length)) } ?? 0
  }

  /// Asks the kernel to drop the unused entries of these inodes, and then
  /// the inodes (their forgets follow). Returns 0 or a negative errno
  /// (EINVAL: a kernel before Linux 6.18, which has no such notification).
  @discardableResult
  public func prune(_ inodes: [UInt64]) -> Int32 {
    session?.withSession { raw in
      inodes.withUnsafeBufferPointer { cfuse_notify_prune(raw, $0.baseAddress, UInt32($0.count)) }
    } ?? 0
  }

  /// Drops the kernel's entry for `name` in directory `parent`.
  @discardableResult
  public func invalidate(parent: UInt64, name: String) -> Int32 {
    session?.withSession { raw in
      name.withCString { fuse_lowlevel_notify_inval_entry(raw, parent, $0, name.utf8.count) }
    } ?? 0
  }
}

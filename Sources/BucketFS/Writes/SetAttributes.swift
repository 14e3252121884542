import FUSE

#if canImport(Glibc)
  import Glibc
#endif

/// setattr's changes of a file: size on the stage, mtime carried by a
/// pending upload (docs/SEMANTICS.md#writes).
extension Staging {
  /// Truncates or extends the file: its staged file if it has one, else
  /// staged just for this change and uploaded at once.
  func setSize(inode: UInt64, handle: UInt64?, node: Node, to size: UInt64) async throws {
    if size > Self.maxObjectBytes {
      logger.notice(
        "truncate \(node.key) to \(size) bytes: past the largest object the service stores (5 TiB)")
      throw Errno(EFBIG)
    }
    if let staged = handle.flatMap({ file(handle: $0) }) ?? file(inode: inode) {
      return try await resize(staged, to: size)
    }
    let handle = try await openForWriting(inode: inode, node: node, flags: O_WRONLY).handle
    defer { release(handle: handle) }
    guard let staged = file(handle: handle) else { throw Errno.badHandle }
    try await resize(staged, to: size)
    try await commit(staged)
  }

  /// A dirty staged file carries a new mtime in its upload: true when it took it.
  func carryModified(inode: UInt64, to time: Timestamp) -> Bool {
    guard let staged = file(inode: inode) else { return false }
    return staged.state.withLock { s -> Bool in
      guard s.dirty, !s.unlinked else { return false }
      s.modified = time
      s.attributes.custom[Self.mtimeKey] = String(time.seconds)
      return true
    }
  }

  /// Folds chmod, chown and utimens keys into a staged, dirty file's upload
  /// (no request of their own); false when it is not staged that way.
  func carryKeys(inode: UInt64, _ values: [String: String?], modified: Timestamp?) -> Bool {
    guard let staged = file(inode: inode) else { return false }
    return staged.state.withLock { s -> Bool in
      guard s.dirty, !s.unlinked else { return false }
      for (key, value) in values { s.attributes.custom[key] = value }
      if values[Self.mtimeKey] != nil, let modified {
        s.modified = modified
      }
      return true
    }
  }

  /// Keys were patched onto the object: a staged file of it that is not
  /// dirty yet keeps them, so its later upload does not take them back.
  func notePatchedKeys(inode: UInt64, _ values: [String: String?]) {
    file(inode: inode)?.state.withLock { s in
      for (key, value) in values { s.attributes.custom[key] = value }
    }
  }

  /// The object's mtime was patched: a staged file of it shows and keeps it.
  func noteModified(inode: UInt64, to time: Timestamp) {
    file(inode: inode)?.state.withLock { s in
      s.modified = time
      s.attributes.custom[Self.mtimeKey] = String(time.seconds)
    }
  }

  /// A handle closed: whatever of it is staged lets go.
  func release(handle: UInt64) {
    reads.remove(handle: handle)
    releaseWriter(handle: handle)
    releaseReader(handle: handle)
  }
}

import FUSE

#if canImport(Glibc)
  import Glibc
#endif

/// setattr: size on the stage, mtime as `goog-reserved-file-mtime`, mode
/// and owner accepted without change (docs/SEMANTICS.md#writes).
extension BucketFileSystem {
  public func setattr(inode: UInt64, handle: UInt64?, changes: AttributeChanges) async throws
    -> (FileAttributes, timeout: Double)
  {
    if configuration.readOnly { throw Errno.readOnly }
    let node = try node(inode)
    if node.kind == .directory {
      if changes.size != nil { throw Errno.isDirectory }
      return (attributes(inode: inode, kind: .directory, facts: nil), configuration.metadataTTL)
    }
    if let size = changes.size {
      if size > Self.maxObjectBytes {
        logger.notice(
          "truncate \(node.key) to \(size) bytes: past the largest object the service stores (5 TiB)")
        throw Errno(EFBIG)
      }
      if let staged = handle.flatMap(stagedFile(handle:)) ?? stagedFile(inode: inode) {
        try await resize(staged, to: size)
      } else {
        try await truncateUnopened(inode: inode, node: node, to: size)
      }
    }
    if let modified = changes.modificationTime {
      try await setModified(inode: inode, node: node, to: modified)
    }
    // mode, uid, gid and atime are not stored: accepted, unchanged (as gcsfuse).
    return try await getattr(inode: inode)
  }

  /// truncate(2) of a file nobody has open for writing: staged just for
  /// this change and uploaded at once.
  private func truncateUnopened(inode: UInt64, node: Node, to size: UInt64) async throws {
    let handle = try await openForWriting(inode: inode, node: node, flags: O_WRONLY).handle
    defer { release(inode: inode, handle: handle) }
    guard let staged = stagedFile(handle: handle) else { throw Errno.badHandle }
    try await resize(staged, to: size)
    try await commit(staged)
  }

  /// A dirty staged file carries the new mtime in its upload; any other
  /// file gets one PATCH conditioned on its metageneration.
  private func setModified(inode: UInt64, node: Node, to time: Timestamp) async throws {
    if let staged = stagedFile(inode: inode) {
      let carried = staged.state.withLock { s -> Bool in
        guard s.dirty, !s.unlinked else { return false }
        s.modified = time
        s.mtimeSet = true
        s.attributes.custom[Self.mtimeKey] = String(time.seconds)
        return true
      }
      if carried { return }
    }
    try await update(
      .custom(Self.mtimeKey), to: String(time.seconds), flags: [], inode: inode, node: node)
    staged(inode)?.state.withLock { s in
      s.modified = time
      s.attributes.custom[Self.mtimeKey] = String(time.seconds)
    }
  }

  private func staged(_ inode: UInt64) -> StagedFile? { stagedFile(inode: inode) }
}

import FUSE

#if canImport(Glibc)
  import Glibc
#endif

/// setattr's changes of a file: size on the stage, mtime, mode and owner
/// carried by a pending upload (docs/SEMANTICS.md#writes).
extension Staging {
  /// Truncates or extends the file: through `writer` (the staged file of
  /// the write handle setattr came with), else as a writer of its own (on
  /// the inode's staged file if it has one) and uploaded at once. Never on
  /// a staged file it does not hold: its last writer's release could
  /// discard the stage meanwhile, and the change would rewrite the sidecar
  /// of a removed stage and be lost.
  func setSize(inode: UInt64, writer: StagedFile?, node: Node, to size: UInt64) async throws {
    if size > Self.maxObjectBytes {
      logger.notice(
        "truncate \(node.key) to \(size) bytes: past the largest object the service stores (5 TiB)")
      throw Errno(EFBIG)
    }
    if let writer {
      return try await resize(writer, to: size)
    }
    let staged = try await openForWriting(inode: inode, node: node, truncate: false)
    defer { releaseWriter(staged) }
    try await resize(staged, to: size)
    try await commit(staged)
  }
}

extension StagedFile {
  /// Folds chmod, chown and utimens keys into a dirty file's upload (no
  /// request of their own); false when it is not dirty (or unlinked).
  func carry(_ values: [String: String?], modified: Timestamp?) -> Bool {
    state.withLock { s -> Bool in
      guard s.dirty, !s.unlinked else { return false }
      for (key, value) in values { s.attributes.custom[key] = value }
      if values[Staging.mtimeKey] != nil, let modified {
        s.modified = modified
      }
      return true
    }
  }

  /// Keys were patched onto the object: a file not dirty yet keeps them,
  /// so its later upload does not take them back; a patched mtime
  /// (`modified`, with the mtime key among them) is what stat shows.
  func notePatched(_ values: [String: String?], modified: Timestamp?) {
    state.withLock { s in
      for (key, value) in values { s.attributes.custom[key] = value }
      if values[Staging.mtimeKey] != nil, let modified {
        s.modified = modified
      }
    }
  }
}

import FUSE
import ObjectStore

#if canImport(Glibc)
  import Glibc
#endif

/// chmod, chown and utimens: the keys they store, folded into a staged
/// file's upload or sent as one conditional PATCH (docs/SEMANTICS.md#writes-setattr).
extension BucketFileSystem {
  func changeStatFields(inode: UInt64, node: Node, changes: AttributeChanges) async throws {
    guard changes.mode != nil || changes.uid != nil || changes.gid != nil || changes.modificationTime != nil
    else { return }
    if node.kind == .directory && (!configuration.posixAttributes || entries.isRootOfBucket(inode)) { return }
    let shown = try await entries.getattr(inode: inode).0
    let values = Self.keysToStore(changes, shown: shown, kind: node.kind, configuration: configuration)
    if values.isEmpty { return }
    if node.kind == .directory {
      let current = try await inodes.metadata.fetchIfPresent(node.key)
      // Back to the defaults where nothing is stored: nothing to store.
      if current == nil, values.values.allSatisfy({ $0 == nil }) { return }
      let placeholder = try await extendedAttributes.storeKeys(
        values, key: node.key, from: current, createIfMissing: true)
      inodes.nodes.remember(placeholder: placeholder, of: inode, at: clock())
      return
    }
    if inodes.stagedFile(inode)?.carry(values, modified: changes.modificationTime) == true { return }
    let updated = try await extendedAttributes.storeKeys(
      values, key: node.key, from: try await inodes.metadata.current(of: node), createIfMissing: false)
    inodes.stagedFile(inode)?.notePatched(values, modified: changes.modificationTime)
    if changes.modificationTime != nil, values[PosixKeys.mtime] != nil {
      // Set by the user now: an atomic save no longer treats it as inferred.
      provenance.userSet(.custom(PosixKeys.mtime), key: node.key, generation: updated.generation)
    }
  }

  /// The keys to change for `changes` (nil: remove): only where the value
  /// differs from what stat shows now, so a value it already shows (a
  /// default included) sends nothing. A mode or owner set back to the
  /// mount's default removes its key, as creation stores none for it: a
  /// copy's metadata stays the original's. Directories keep no times.
  static func keysToStore(
    _ changes: AttributeChanges, shown: FileAttributes, kind: Node.Kind, configuration: Configuration
  ) -> [String: String?] {
    var values: [String: String?] = [:]
    if configuration.posixAttributes {
      // Linux has no chmod of a link itself.
      if let mode = changes.mode, kind != .symlink, mode & 0o7777 != shown.permissions {
        // A special file's stored mode keeps its type.
        let type = FileAttributes.Kind(special: shown.kind.mode) == nil ? 0 : shown.kind.mode
        let fallback = kind == .directory ? configuration.directoryMode : configuration.fileMode
        values[PosixKeys.mode] =
          type == 0 && mode & 0o7777 == fallback ? nil : PosixKeys.formatMode(type | mode & 0o7777)
      }
      if let uid = changes.uid, uid != shown.uid {
        values[PosixKeys.uid] = uid == configuration.uid ? nil : String(uid)
      }
      if let gid = changes.gid, gid != shown.gid {
        values[PosixKeys.gid] = gid == configuration.gid ? nil : String(gid)
      }
    }
    if let time = changes.modificationTime, kind != .directory, time != shown.modificationTime {
      values[PosixKeys.mtime] = String(time.seconds)
    }
    return values
  }
}

extension ExtendedAttributes {
  /// Stores `values` as custom keys of `key` in one conditional PATCH
  /// (both numbers), or, for a directory without a placeholder, in a new
  /// placeholder (`ifGenerationMatch=0`). On a 412 reads the object again
  /// and decides again: keys it already has are not sent, so a PATCH whose
  /// answer was lost and that the retry found applied ends there.
  func storeKeys(
    _ values: [String: String?], key: String, from initial: ObjectMetadata?, createIfMissing: Bool
  ) async throws -> ObjectMetadata {
    let result = try await patchConditionally(
      key, from: initial, fetchedAt: clock(),
      fetch: {
        let current = try await inodes.metadata.fetchIfPresent(key)
        if let current, !createIfMissing { inodes.nodes.remember(current) }
        return current
      }
    ) { current, _ in
      guard let metadata = current else {
        guard createIfMissing else { throw Errno.noEntry }
        return .create(ObjectAttributes(custom: values.compactMapValues { $0 }))
      }
      let changed = values.filter { metadata.custom[$0.key] != $0.value }
      if changed.isEmpty { return .done(metadata) }
      var proposed = metadata.custom
      for (name, value) in changed { proposed[name] = value }
      guard MetadataLimits.fits(proposed) else { throw Errno.tooBig }
      return .send(MetadataPatch(custom: changed))
    }
    if result.wrote, !createIfMissing { inodes.nodes.remember(result.metadata) }
    return result.metadata
  }
}

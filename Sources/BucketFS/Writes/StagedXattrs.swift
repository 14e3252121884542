import FUSE
import ObjectStore

/// Extended attributes of a staged file (open for writing or not yet
/// uploaded): pending values, changed in memory and carried by the upload,
/// with no PATCH of their own (docs/SEMANTICS.md#writes).
extension Xattrs {
  /// The metadata the inode's upload would store, for getxattr and
  /// listxattr; nil when the inode is not staged or its handles are only
  /// reading (then the object's own metadata answers).
  func pending(_ inode: UInt64) -> ObjectMetadata? {
    stagedInodes.file(inode: inode)?.pendingMetadata(bucket: store.bucket)
  }

  /// Sets or removes (nil) a property of a staged, dirty file in its pending
  /// upload. Returns false when the file is not staged that way (the PATCH
  /// path answers). Read-only names are accepted and ignored, so `cp -a`
  /// from another bucketfs mount succeeds, as they are on a file this mount
  /// created within the metadata TTL (rsync -X sets them on its temp file
  /// after closing it).
  func setPending(inode: UInt64, name: String, value: [UInt8]?, flags: XattrFlags) throws -> Bool {
    guard let property = XattrName(name) else { throw Errno.notSupported }
    if configuration.readOnly { throw Errno.readOnly }
    guard let staged = stagedInodes.file(inode: inode) else {
      if case .readOnly = property, let key = nodes.key(of: inode), provenance.isRecentlyCreated(key) {
        return true
      }
      return false
    }
    let text: String?
    if let value {
      guard let decoded = String(validating: value, as: UTF8.self) else { throw Errno.invalid }
      if case .custom = property, decoded.utf8.count > MetadataLimits.maxValueBytes { throw Errno.tooBig }
      text = decoded
    } else {
      text = nil
    }
    return try staged.setPending(
      property, to: text, flags: flags, posixAttributes: configuration.posixAttributes)
  }

  /// The value a staged file shows for `property`: none for what only the
  /// service will decide (a new object's generation and times).
  static func stagedValue(_ property: XattrName, in pending: ObjectMetadata) -> String? {
    guard let value = property.value(in: pending), !value.isEmpty else { return nil }
    if case .readOnly(let name) = property, name == .generation || name == .metageneration, value == "0" {
      return nil
    }
    return value
  }

  static func stagedNames(of pending: ObjectMetadata, hidingStatKeys: Bool) -> [String] {
    XattrName.names(of: pending, hidingStatKeys: hidingStatKeys).filter { name in
      XattrName(name).map { stagedValue($0, in: pending) != nil } ?? false
    }
  }
}

extension StagedFile {
  /// The metadata the upload would store; nil when the file only reads.
  func pendingMetadata(bucket: String) -> ObjectMetadata? {
    state.withLock { s -> ObjectMetadata? in
      guard s.dirty || s.base == nil else { return nil }
      var metadata = s.base ?? Staging.placeholder(key: s.key, bucket: bucket)
      metadata.name = s.key
      metadata.size = Int64(s.size)
      // The hashes of bytes not yet stored are not known.
      metadata.md5Hash = nil
      metadata.crc32c = nil
      metadata.etag = nil
      for field in ObjectMetadata.WritableField.allCases { metadata[field] = s.attributes.fields[field] }
      metadata.custom = s.attributes.custom
      return metadata
    }
  }

  /// Sets or removes (nil) `property` in the pending upload of a dirty
  /// file; false when it is not dirty (or unlinked). Read-only names are
  /// accepted and ignored, as are stat's keys under `posixAttributes`
  /// (chmod, chown and utimens set those).
  func setPending(_ property: XattrName, to text: String?, flags: XattrFlags, posixAttributes: Bool) throws
    -> Bool
  {
    try state.withLock { s -> Bool in
      guard s.dirty || s.base == nil, !s.unlinked else { return false }
      if let poisoned = s.poisoned { throw poisoned }
      switch property {
      case .readOnly:
        // Set or removed by copying tools (rsync -X removes names its source lacks).
        return true
      case .unknown:
        throw Errno.notPermitted
      case .writable(let field):
        let exists = s.attributes.fields[field] != nil
        if let refused = flags.refusal(exists: exists, removing: text == nil) { throw refused }
        s.attributes.fields[field] = text
      case .custom(let key) where posixAttributes && PosixKeys.isStatKey(key, in: s.attributes.custom):
        // Stat's fields: set by chmod, chown and utimens only (as in Xattrs.writableProperty).
        return true
      case .custom(let key):
        let exists = s.attributes.custom[key] != nil
        if let refused = flags.refusal(exists: exists, removing: text == nil) { throw refused }
        var custom = s.attributes.custom
        custom[key] = text
        guard MetadataLimits.fits(custom) else { throw Errno.tooBig }
        s.attributes.custom = custom
        if key == Staging.mtimeKey, let text, let time = RFC3339.parseMtime(text) { s.modified = time }
      }
      s.inferred.remove(property)
      return true
    }
  }
}

import FUSE
import ObjectStore

/// Extended attributes of a staged file (open for writing or not yet
/// uploaded): pending values, changed in memory and carried by the upload,
/// with no PATCH of their own (docs/SEMANTICS.md#writes).
extension Staging {
  /// The metadata a staged file's upload would store, for getxattr and
  /// listxattr; nil when the inode is not staged or its handles are only
  /// reading (then the object's own metadata answers).
  func pendingMetadata(_ inode: UInt64) -> ObjectMetadata? {
    guard let staged = file(inode: inode) else { return nil }
    return staged.state.withLock { s -> ObjectMetadata? in
      guard s.dirty || s.base == nil else { return nil }
      var metadata = s.base ?? Self.placeholder(key: s.key, bucket: store.bucket)
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

  /// Whether this mount created the inode's object within the metadata TTL:
  /// read-only names a copying tool sets or removes just after are ignored.
  func recentlyCreated(_ inode: UInt64) -> Bool {
    guard let key = nodes.key(of: inode) else { return false }
    let now = clock()
    return registry.withLock { $0.created[ObjectKey(key)] }.map { now - $0 < configuration.metadataTTL }
      ?? false
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

  /// Sets or removes (nil) a property of a staged, dirty file in its pending
  /// upload. Returns false when the file is not staged that way (the PATCH
  /// path answers). Read-only names are accepted and ignored, so `cp -a`
  /// from another bucketfs mount succeeds.
  func setProperty(inode: UInt64, name: String, value: [UInt8]?, flags: XattrFlags) throws -> Bool {
    guard let property = XattrName(name) else { throw Errno.notSupported }
    if configuration.readOnly { throw Errno.readOnly }
    guard let staged = file(inode: inode) else {
      if case .readOnly = property, recentlyCreated(inode) { return true }
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
    return try staged.state.withLock { s -> Bool in
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
      case .custom(let key)
      where configuration.posixAttributes && PosixKeys.isStatKey(key, in: s.attributes.custom):
        // Stat's fields: set by chmod, chown and utimens only (as in Xattrs.writableProperty).
        return true
      case .custom(let key):
        let exists = s.attributes.custom[key] != nil
        if let refused = flags.refusal(exists: exists, removing: text == nil) { throw refused }
        var custom = s.attributes.custom
        custom[key] = text
        guard MetadataLimits.fits(custom) else { throw Errno.tooBig }
        s.attributes.custom = custom
        if key == Self.mtimeKey, let text, let time = RFC3339.parseMtime(text) { s.modified = time }
      }
      s.inferred.remove(property)
      return true
    }
  }
}

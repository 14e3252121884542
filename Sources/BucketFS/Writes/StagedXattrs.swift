import FUSE
import ObjectStore

/// What a staged file's pending xattrs are (the values its upload will
/// carry); ``Xattrs`` asks its staged files first (ExtendedAttributes.swift).
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

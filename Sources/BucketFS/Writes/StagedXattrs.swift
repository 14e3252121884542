import FUSE
import ObjectStore

/// What a staged file's pending xattrs are (the values its upload will
/// carry); ``ExtendedAttributes`` asks its staged files first (ExtendedAttributes.swift),
/// and each file applies these under its own lock (StagedFile.swift).
extension StagedFile.State {
  /// The metadata the upload would store; nil when the file only reads.
  func pendingMetadata(bucket: String) -> ObjectMetadata? {
    guard dirty || base == nil else { return nil }
    var metadata = base ?? Staging.placeholder(key: key, bucket: bucket)
    metadata.name = key
    metadata.size = Int64(size)
    // The hashes of bytes not yet stored are not known.
    metadata.md5Hash = nil
    metadata.crc32c = nil
    metadata.etag = nil
    for field in ObjectMetadata.WritableField.allCases { metadata[field] = attributes.fields[field] }
    metadata.custom = attributes.custom
    return metadata
  }

  /// Sets or removes (nil) `property` in the pending upload of a dirty
  /// file; false when it is not dirty (or unlinked). Read-only names are
  /// accepted and ignored, as are stat's keys under `posixAttributes`
  /// (chmod, chown and utimens set those).
  mutating func setPending(
    _ property: XattrName, to text: String?, flags: XattrFlags, posixAttributes: Bool
  ) throws -> Bool {
    guard dirty || base == nil, !unlinked else { return false }
    if let poisoned { throw poisoned }
    switch property {
    case .readOnly:
      // Set or removed by copying tools (rsync -X removes names its source lacks).
      return true
    case .unknown:
      throw Errno.notPermitted
    case .writable(let field):
      let exists = attributes.fields[field] != nil
      if let refused = flags.refusal(exists: exists, removing: text == nil) { throw refused }
      attributes.fields[field] = text
    case .custom(let key) where posixAttributes && PosixKeys.isStatKey(key, in: attributes.custom):
      // Stat's fields: set by chmod, chown and utimens only (as in ExtendedAttributes.writableProperty).
      return true
    case .custom(let key):
      let exists = attributes.custom[key] != nil
      if let refused = flags.refusal(exists: exists, removing: text == nil) { throw refused }
      var custom = attributes.custom
      custom[key] = text
      guard MetadataLimits.fits(custom) else { throw Errno.tooBig }
      attributes.custom = custom
      if key == Staging.mtimeKey, let text, let time = RFC3339.parseMtime(text) { modified = time }
    }
    inferred.remove(property)
    return true
  }
}

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
  /// file; false when it is not dirty (or unlinked). What changes nothing
  /// is the stored object's rule (``XattrName/changes(refuseReadOnly:statKeys:)``),
  /// but read-only names are always accepted and ignored here, so `cp -a`
  /// and `rsync -X` succeed (docs/SEMANTICS.md#writes).
  mutating func setPending(
    _ property: XattrName, to text: String?, flags: XattrFlags, posixAttributes: Bool
  ) throws -> Bool {
    guard dirty || base == nil, !unlinked else { return false }
    if let poisoned { throw poisoned }
    guard try property.changes(refuseReadOnly: false, statKeys: posixAttributes ? attributes.custom : nil)
    else {
      return true
    }
    switch property {
    case .readOnly, .unknown:
      return true
    case .writable(let field):
      let exists = attributes.fields[field] != nil
      if let refused = flags.refusal(exists: exists, removing: text == nil) { throw refused }
      attributes.fields[field] = text
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

import ObjectStore

/// The metadata of a rename that replaces a file (an editor's atomic save:
/// write a temp file, rename it over the original). Without this the temp
/// file's metadata wins and the original's custom keys, content type and
/// download tokens are lost, as on every other mount.
///
/// The rule (docs/SEMANTICS.md#tree), property by property over the
/// writable ones (contentType, cacheControl, contentDisposition,
/// contentEncoding, contentLanguage, each custom key):
/// 1. the source's value, if it has one that was set explicitly (its own
///    stored metadata, setxattr, `cp --preserve=xattr`, `rsync -X`);
/// 2. else the replaced file's value, if it has one;
/// 3. else the source's inferred value (a contentType from the temp file's
///    name, a generated download token), if any;
/// 4. else absent.
///
/// `goog-reserved-file-mtime` is never taken from the replaced file: the
/// result holds new bytes, so its mtime is the source's (else `rsync -a`
/// would see the old mtime and skip the edit). Nor are the other keys stat
/// shows (mode, owner): a rename keeps the renamed file's, as on a disk,
/// and a key absent from it means the mount's default there.
enum AtomicSave {
  static func attributes(
    source: ObjectAttributes, inferred: Set<XattrName>, replaced: ObjectAttributes
  ) -> ObjectAttributes {
    var result = replaced
    result.custom[Staging.mtimeKey] = nil
    for key in replaced.custom.keys where PosixKeys.isStatKey(key, in: replaced.custom) {
      result.custom[key] = nil
    }
    for (field, value) in source.fields {
      if !inferred.contains(.writable(field)) || result.fields[field] == nil { result.fields[field] = value }
    }
    for (key, value) in source.custom {
      if !inferred.contains(.custom(key)) || result.custom[key] == nil { result.custom[key] = value }
    }
    return result
  }
}

import ObjectStore

/// How a symbolic link is stored as an object (docs/SEMANTICS.md#symlinks):
/// the two forms gcsfuse reads, both written at once so that every gcsfuse
/// version (and `gcloud storage`) reads what bucketfs writes.
enum SymlinkEncoding {
  /// gcsfuse ≥ 3.9, `gcloud storage`, Storage Transfer Service: the body is
  /// the target, and this custom key says so with `"true"`.
  static let markerKey = "goog-reserved-file-is-symlink"
  /// Earlier gcsfuse: an empty object whose custom key holds the target.
  static let targetKey = "gcsfuse_symlink_target"
  /// Linux's longest target (`PATH_MAX` less its NUL); longer is refused.
  static let maxTargetBytes = 4095

  /// Where a link's target is read from.
  enum Source: Equatable {
    /// The object's bytes (the marker is `"true"`, the body not empty).
    case body
    /// The value of ``targetKey``.
    case key(String)
    /// Neither: a link whose target cannot be read (an empty body, no key).
    case none
  }

  /// Whether an object is a link: it has either key, whatever its value,
  /// as gcsfuse decides.
  static func isLink(_ metadata: ObjectMetadata) -> Bool {
    !metadata.custom.isEmpty && (metadata.custom[markerKey] != nil || metadata.custom[targetKey] != nil)
  }

  /// The body form wins when the marker says `true` (in any case, as
  /// `gcloud storage` reads it) and the body is not empty; else the key's value.
  static func source(of metadata: ObjectMetadata) -> Source {
    if metadata.custom[markerKey]?.lowercased() == "true", metadata.size > 0 { return .body }
    if let target = metadata.custom[targetKey] { return .key(target) }
    return .none
  }

  /// The length of a link's target in bytes (what lstat shows as its
  /// size); nil for an object that is no link.
  static func targetLength(_ metadata: ObjectMetadata) -> UInt64? {
    guard isLink(metadata) else { return nil }
    switch source(of: metadata) {
    case .body: return UInt64(max(metadata.size, 0))
    case .key(let target): return UInt64(target.utf8.count)
    case .none: return 0
    }
  }

  /// The properties a new link is stored with, its body being `target`:
  /// both forms, and its mtime as every object this mount stores has.
  static func attributes(target: String, modified: Int) -> ObjectAttributes {
    ObjectAttributes(
      custom: [markerKey: "true", targetKey: target, Staging.mtimeKey: String(modified)])
  }
}

import ObjectStore

/// What the write path's components agree on (docs/SEMANTICS.md#writes).
/// Its work is done by ``WriteHandles`` (opens, setattr's size, closes),
/// ``StageStore`` (a stage's bytes), ``WriteStreams`` (a sequential
/// writer's parts), ``Uploader`` (close and fsync) and ``StagedInodes`` (which
/// inodes are staged, and the files in flight).
enum Staging {
  /// The custom metadata key every upload stores the mtime in (whole seconds, as gsutil).
  static let mtimeKey = "goog-reserved-file-mtime"
  /// The largest object the service stores: a file cannot grow past it.
  static let maxObjectBytes: UInt64 = 5 << 40

  /// Metadata of an object that exists only in a stage, for stat's facts.
  static func placeholder(key: String, bucket: String) -> ObjectMetadata {
    ObjectMetadata(
      bucket: bucket, name: key, size: 0, generation: 0, metageneration: 0, timeCreated: "", updated: "")
  }
}

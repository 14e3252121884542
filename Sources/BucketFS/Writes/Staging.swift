import FUSE
import Logging
import ObjectStore

#if canImport(Glibc)
  import Glibc
#endif

/// What the write path's components agree on (docs/SEMANTICS.md#writes).
/// Its work is done by ``WriteHandles`` (opens, setattr's size, closes),
/// ``StageStore`` (a stage's bytes), ``WriteStreams`` (a sequential
/// writer's parts), ``Uploader`` (close and fsync) and ``StagedInodes`` (which
/// inodes are staged).
enum Staging {
  /// The custom metadata key every upload stores the mtime in (whole seconds, as gsutil).
  static let mtimeKey = "goog-reserved-file-mtime"
  /// The largest object the service stores: a file cannot grow past it.
  static let maxObjectBytes: UInt64 = 5 << 40

  /// EFBIG, logged, when a file would end at `end`, past ``maxObjectBytes``
  /// (nil: past any offset); `change` says what was asked, for the log.
  static func refusal(ofEnd end: UInt64?, change: String, logger: Logger) -> Errno? {
    if let end, end <= maxObjectBytes { return nil }
    logger.notice("\(change): past the largest object the service stores (5 TiB)")
    return Errno(EFBIG)
  }

  /// Metadata of an object that exists only in a stage, for stat's facts.
  static func placeholder(key: String, bucket: String) -> ObjectMetadata {
    ObjectMetadata(
      bucket: bucket, name: key, size: 0, generation: 0, metageneration: 0, timeCreated: "", updated: "")
  }
}

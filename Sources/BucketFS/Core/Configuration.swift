/// Everything about a mount the filesystem needs to know; defaults are the
/// documented ones (README "Options").
public struct Configuration: Sendable {
  /// The object-name prefix the mount root shows (`""` or ending in `/`).
  public var rootPrefix: String = ""
  /// maxResults of each list call; the service's maximum is 1000.
  public var pageSize: Int = 1000
  /// How long listed or fetched metadata is trusted, and the kernel's
  /// entry/attribute timeout.
  public var metadataTTL: Double = 60
  /// How long the kernel may remember that a name does not exist.
  public var negativeTTL: Double = 5
  /// How long the kernel may answer readdir of a directory from what it
  /// cached of an earlier one (FOPEN_CACHE_DIR); 0: never, every opendir lists.
  public var listCacheTTL: Double = 0
  /// Files whose full metadata (for xattrs) is kept; stat needs only a few
  /// fields, which every inode the kernel holds keeps anyway.
  public var metadataCacheEntries: Int = 1 << 20
  /// Bytes the full metadata kept may cost at most (``MetadataCache/bytes(_:)``).
  public var metadataCacheBytes: Int = 8 << 20
  /// Nodes held for the kernel at most; past them the least recently used
  /// names are evicted from the kernel (docs/SEMANTICS.md#node-table).
  public var maxInodes: Int = 32_768
  public var uid: UInt32 = 0
  public var gid: UInt32 = 0
  public var fileMode: UInt32 = 0o644
  public var directoryMode: UInt32 = 0o755
  public var readOnly = false
  /// Modes, owners and special files stored in the objects' metadata
  /// (docs/SEMANTICS.md#attributes-modes); off: every entry shows the
  /// defaults above and chmod and chown change nothing.
  public var posixAttributes = true
  /// Largest single read-ahead request for sequential reads.
  public var readAheadMaxChunk: Int = 8 << 20
  /// Bytes of read-ahead kept in flight per open file at most: 16 streams
  /// of 4 MiB (docs/SEMANTICS.md#reads-readahead).
  public var readAheadMaxBytes: Int = 64 << 20
  /// Segments of one file in flight at once at most (parallel ranged GETs).
  public var readAheadMaxStreams: Int = 16
  /// The private directory this mount stages written files in (created
  /// 0700); the CLI picks a per-mount one under `--cache-dir`. Empty: no
  /// file can be written (EROFS).
  public var stageDirectory: String = ""
  /// Give each new object a random UUID in `firebaseStorageDownloadTokens`.
  public var firebaseDownloadTokens = false
  /// Setting or removing a read-only property answers EPERM; by default it
  /// is accepted and ignored, so copying tools never fail on it.
  public var refuseReadOnlyXattrs = false
  /// Where new files' content types come from; nil: the built-in table only.
  public var mimeTypesPath: String? = "/etc/mime.types"
  /// Objects a directory rename moves at most; a larger directory answers
  /// EXDEV, so `mv` copies it instead (docs/SEMANTICS.md#tree).
  public var renameDirectoryLimit: Int = 1000
  /// Server-side moves or copies a directory rename runs at once.
  public var renameConcurrency: Int = 16
  /// Seconds one user-visible read may take, retries included (``ReadDeadlines``).
  public var retryDeadline: Double = 60
  /// Bytes of read-ahead all open files together may hold (``ReadAheadBudget``).
  public var readAheadBudget: Int = 256 << 20

  /// Bytes of its stage a streaming writer may hold on disk; nil: 64 MiB,
  /// or half the staging disk's room if less (docs/SEMANTICS.md#writes-streaming).
  public var streamDiskLimit: Int64?

  public init() {}
}

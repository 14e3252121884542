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
  /// Files whose full metadata (for xattrs) is kept; stat needs only a few
  /// fields, which every inode the kernel holds keeps anyway.
  public var metadataCacheEntries: Int = 8192
  public var uid: UInt32 = 0
  public var gid: UInt32 = 0
  public var fileMode: UInt32 = 0o644
  public var directoryMode: UInt32 = 0o755
  public var readOnly = false
  /// Largest single read-ahead request for sequential reads.
  public var readAheadMaxChunk: Int = 8 << 20
  /// Bytes of read-ahead kept in flight per open file at most.
  public var readAheadMaxBytes: Int = 32 << 20
  /// Bytes of read-ahead all open files together may hold (``ReadAheadBudget``).
  public var readAheadBudget: Int = 256 << 20

  public init() {}
}

import NIOCore
import Synchronization

/// What the filesystem needs from a bucket. Implemented by the Cloud Storage
/// client and, in tests, by an exact in-process model of the service.
///
/// Methods throw ``StorageError``; anything else is treated as invalid.
public protocol ObjectStore: Sendable {
  /// The bucket's name, for `user.bucket` and messages.
  var bucket: String { get }

  /// One page of objects and prefixes directly under `prefix`. With
  /// `includeTrailingDelimiter` (the JSON API's parameter of that name, only
  /// with a delimiter), an object whose name past the prefix ends in its
  /// only delimiter (a placeholder `prefix/dir/`) is in `items` as well as
  /// its prefix in `prefixes`, on the same page.
  func list(
    prefix: String, delimiter: String?, includeTrailingDelimiter: Bool, pageSize: Int, pageToken: String?
  ) async throws -> ListPage

  /// As ``list(prefix:delimiter:includeTrailingDelimiter:pageSize:pageToken:)``,
  /// and hands the page's `nextPageToken` (when there is one) to
  /// `nextPageToken` as soon as it is known, which may be before the page is
  /// decoded and returned: a reader that wants the next page can ask for it
  /// without waiting for this one.
  func list(
    prefix: String, delimiter: String?, includeTrailingDelimiter: Bool, pageSize: Int, pageToken: String?,
    nextPageToken: @escaping @Sendable (String) -> Void
  ) async throws -> ListPage

  /// As ``list(prefix:delimiter:pageSize:pageToken:)``, with only the names
  /// (and prefixes) that sort before `endOffset` in byte order (the JSON
  /// API's `endOffset`, exclusive); no token once the listing reaches it.
  func list(prefix: String, delimiter: String?, pageSize: Int, pageToken: String?, endOffset: String)
    async throws -> ListPage

  /// The current metadata of one object.
  func metadata(of name: String) async throws -> ObjectMetadata

  /// Bytes `range` of generation `generation` of an object; fewer at its end.
  /// They may land in the buffer `spare` holds (taken from it) instead of
  /// fresh memory; a store that cannot use it leaves it (nil: fresh memory).
  func read(_ name: String, generation: Int64, range: Range<Int64>, reusing spare: SpareBuffer?)
    async throws -> ByteBuffer

  /// Patches metadata, only if the object is still that generation and
  /// metageneration (nil: either may be any). Throws
  /// ``StorageError/preconditionFailed`` when it is not: a generation
  /// replaced by another client may have the same metageneration.
  func patch(
    _ name: String, _ patch: MetadataPatch, ifGenerationMatch: Int64?, ifMetagenerationMatch: Int64?
  ) async throws
    -> ObjectMetadata

  /// Stores the bytes of `source` as a new generation of `name` with
  /// `attributes`: whole or not at all, never a partial object.
  /// `ifGenerationMatch` 0 stores only if no live object has the name, n only
  /// if generation n is live; otherwise ``StorageError/preconditionFailed``.
  /// Large sources go up in a resumable session that resumes after faults.
  func upload(
    _ name: String, from source: any UploadSource, attributes: ObjectAttributes, ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata

  /// Deletes the live object, only if its generation is `ifGenerationMatch`
  /// (when given). ``StorageError/notFound`` if there is none,
  /// ``StorageError/preconditionFailed`` if another generation is live.
  func delete(_ name: String, ifGenerationMatch: Int64?) async throws

  /// Server-side copy of generation `sourceGeneration` of `source` to
  /// `destination` (the JSON API's rewrite, looping on its token), stored
  /// with `attributes`, or with the source's own when nil. Only if the
  /// destination's live generation is `ifGenerationMatch` (0: absent).
  /// ``StorageError/notFound`` if the source generation is gone.
  func copy(
    _ source: String, sourceGeneration: Int64, to destination: String, attributes: ObjectAttributes?,
    ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata

  /// The service's atomic move (the source's metadata comes along), with the
  /// same preconditions as ``copy(_:sourceGeneration:to:attributes:ifGenerationMatch:)``
  /// plus the source's generation. ``StorageError/unsupported`` where the
  /// bucket cannot move: the caller then copies and deletes.
  func move(_ source: String, sourceGeneration: Int64, to destination: String, ifGenerationMatch: Int64?)
    async throws -> ObjectMetadata

  /// How the store takes large objects in parts; nil when it does not.
  var partPlan: PartPlan? { get }

  /// A new object made of parts (``PartedUpload``); nil when the store has none.
  func partedUpload() -> (any PartedUpload)?
}

extension ObjectStore {
  public var partPlan: PartPlan? { nil }

  public func partedUpload() -> (any PartedUpload)? { nil }

  /// A patch guarded by the metageneration alone.
  public func patch(_ name: String, _ patch: MetadataPatch, ifMetagenerationMatch: Int64?) async throws
    -> ObjectMetadata
  {
    try await self.patch(name, patch, ifGenerationMatch: nil, ifMetagenerationMatch: ifMetagenerationMatch)
  }

  public func list(
    prefix: String, delimiter: String?, includeTrailingDelimiter: Bool, pageSize: Int, pageToken: String?,
    nextPageToken: @escaping @Sendable (String) -> Void
  ) async throws -> ListPage {
    let page = try await list(
      prefix: prefix, delimiter: delimiter, includeTrailingDelimiter: includeTrailingDelimiter,
      pageSize: pageSize, pageToken: pageToken)
    if let token = page.nextPageToken { nextPageToken(token) }
    return page
  }

  /// Without `includeTrailingDelimiter`: placeholders of subdirectories come as prefixes only.
  public func list(prefix: String, delimiter: String?, pageSize: Int, pageToken: String?) async throws
    -> ListPage
  {
    try await list(
      prefix: prefix, delimiter: delimiter, includeTrailingDelimiter: false, pageSize: pageSize,
      pageToken: pageToken)
  }

  public func list(
    prefix: String, delimiter: String?, pageSize: Int, pageToken: String?,
    nextPageToken: @escaping @Sendable (String) -> Void
  ) async throws -> ListPage {
    try await list(
      prefix: prefix, delimiter: delimiter, includeTrailingDelimiter: false, pageSize: pageSize,
      pageToken: pageToken, nextPageToken: nextPageToken)
  }

  /// A store without the range lists the whole prefix and cuts the page at
  /// `endOffset`: the same names, only more of them transferred.
  public func list(prefix: String, delimiter: String?, pageSize: Int, pageToken: String?, endOffset: String)
    async throws -> ListPage
  {
    let page = try await list(prefix: prefix, delimiter: delimiter, pageSize: pageSize, pageToken: pageToken)
    return page.cut(before: endOffset)
  }
}

extension ListPage {
  /// The page without the names and prefixes at or past `endOffset` (byte
  /// order); no next page when any was cut, since the rest sorts after them.
  public func cut(before endOffset: String) -> ListPage {
    let before = { (name: String) in name.utf8.lexicographicallyPrecedes(endOffset.utf8) }
    let items = items.filter { before($0.name) }
    let prefixes = prefixes.filter(before)
    let cut = items.count < self.items.count || prefixes.count < self.prefixes.count
    return ListPage(items: items, prefixes: prefixes, nextPageToken: cut ? nil : nextPageToken)
  }
}

/// Memory a sequential reader has finished with, handed to its next read.
/// Writing a segment into pages the process already has spares the kernel
/// mapping, zeroing and unmapping fresh ones for every segment (measured: a
/// sixth of the daemon's CPU in a 256 MiB read). Whoever takes the buffer
/// holds it alone, so a write does not copy it.
public final class SpareBuffer: Sendable {
  private let buffer: Mutex<ByteBuffer?>

  public init(_ buffer: consuming ByteBuffer?) {
    self.buffer = Mutex(buffer)
  }

  public func take() -> ByteBuffer? {
    buffer.withLock { $0.take() }
  }
}

/// The small set of failures the filesystem distinguishes.
public enum StorageError: Error, Sendable, Equatable {
  case notFound
  case accessDenied(String)
  case preconditionFailed
  /// Metadata over the service's limits (a 400 saying so).
  case tooLarge(String)
  case badRequest(String)
  /// Retryable failures that outlived their retries or deadline.
  case unavailable(String)
  case invalidResponse(String)
  case cancelled
  /// The service or bucket does not offer the operation (a move on a bucket without it).
  case unsupported(String)
}

extension StorageError: CustomStringConvertible {
  public var description: String {
    switch self {
    case .notFound: "not found"
    case .accessDenied(let message): "access denied: \(message)"
    case .preconditionFailed: "precondition failed"
    case .tooLarge(let message): "too large: \(message)"
    case .badRequest(let message): "bad request: \(message)"
    case .unavailable(let message): "unavailable: \(message)"
    case .invalidResponse(let message): "invalid response: \(message)"
    case .cancelled: "cancelled"
    case .unsupported(let message): "unsupported: \(message)"
    }
  }
}

import NIOCore
import Synchronization

/// What the filesystem needs from a bucket. Implemented by the Cloud Storage
/// client and, in tests, by an exact in-process model of the service.
///
/// Methods throw ``StorageError``; anything else is treated as invalid.
public protocol ObjectStore: Sendable {
  /// The bucket's name, for `user.bucket` and messages.
  var bucket: String { get }

  /// One page of the listing `request` asks for, honouring every field of it.
  func list(_ request: ListRequest) async throws -> ListPage

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

  /// Bytes read of this generation were not the object's (their CRC-32C
  /// did not match): a store that keeps copies of what it read drops them,
  /// so the next read fetches again. Never waits for the disk.
  func forgetCopies(of name: String, generation: Int64)
}

extension ObjectStore {
  public var partPlan: PartPlan? { nil }

  public func partedUpload() -> (any PartedUpload)? { nil }

  public func forgetCopies(of name: String, generation: Int64) {}

  /// A patch guarded by the metageneration alone.
  public func patch(_ name: String, _ patch: MetadataPatch, ifMetagenerationMatch: Int64?) async throws
    -> ObjectMetadata
  {
    try await self.patch(name, patch, ifGenerationMatch: nil, ifMetagenerationMatch: ifMetagenerationMatch)
  }
}

/// Memory a sequential reader has finished with, handed to its next read.
/// Writing a segment into pages the process already has spares the kernel
/// mapping, zeroing and unmapping fresh ones for every segment (measured: a
/// sixth of the daemon's CPU in a 256 MiB read). Whoever takes the buffer
/// holds it alone, so a write does not copy it.
public final class SpareBuffer: Sendable {
  private let buffer: Mutex<ByteBuffer?>
  /// Sums the reader wants taken as the bytes arrive, if the store can.
  public let sums: ArrivalSums?

  public init(_ buffer: consuming ByteBuffer?, sums: ArrivalSums? = nil) {
    self.buffer = Mutex(buffer)
    self.sums = sums
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
  /// The server's certificate was refused or the TLS handshake failed: final, never retried.
  case tlsFailure(String)
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
    case .tlsFailure(let message): message
    }
  }
}

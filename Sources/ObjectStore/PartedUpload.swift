import NIOCore

/// How a store takes an object in parts: above `threshold` bytes, parts of
/// at least `partSize`, `parallel` at once.
public struct PartPlan: Sendable, Equatable {
  public var threshold: Int64
  public var partSize: Int64
  public var parallel: Int

  public init(threshold: Int64, partSize: Int64, parallel: Int) {
    self.threshold = threshold
    self.partSize = partSize
    self.parallel = parallel
  }
}

/// A stored piece of an object being made from parts: a part, or an object
/// composed before (its bytes become the start of the next composition).
public struct StoredPart: Sendable, Equatable {
  public var name: String
  public var generation: Int64
  public var size: Int64
  /// The part's CRC-32C as the service reported it, when it did.
  public var crc32c: UInt32?

  public init(name: String, generation: Int64, size: Int64, crc32c: UInt32?) {
    self.name = name
    self.generation = generation
    self.size = size
    self.crc32c = crc32c
  }
}

/// An object made of parts stored one by one, as its bytes become known
/// (a file streamed while it is written), then composed in one request.
/// The parts are temporary objects of the store's own, removed by
/// ``removeParts(all:)``; a crash leaves them for the store's cleanup.
public protocol PartedUpload: Sendable {
  /// The folder the parts are stored in (for messages).
  var prefix: String { get }

  /// Stores the bytes of `source` as a new part.
  func store(_ source: any UploadSource) async throws -> StoredPart

  /// Bytes `range` of a part (or of a composed object given as one).
  func read(_ part: StoredPart, range: Range<Int64>) async throws -> ByteBuffer

  /// Makes `name` the concatenation of `parts`, in order, with `attributes`,
  /// only if `ifGenerationMatch` holds (as ``ObjectStore/upload(_:from:attributes:ifGenerationMatch:)``).
  func compose(
    _ parts: [StoredPart], into name: String, attributes: ObjectAttributes, ifGenerationMatch: Int64?
  )
    async throws -> ObjectMetadata

  /// One part made of `parts` in order (a compose under the folder), so a
  /// long stream's final compose takes few sources; they stay until removed.
  func combine(_ parts: [StoredPart]) async throws -> StoredPart

  /// Deletes these parts (ones combined into another).
  func remove(_ parts: [StoredPart]) async

  /// Deletes the parts stored so far; `all` also lists the folder for parts
  /// whose answer was lost. Failures are logged, never thrown.
  func removeParts(all: Bool) async
}

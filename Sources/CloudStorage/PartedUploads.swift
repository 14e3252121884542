import NIOCore
import ObjectStore
import Synchronization

// Objects made of parts stored as their bytes become known (a file streamed
// while it is written): the parts are a composite upload's
// (`PREFIX.bucketfs-parts/UPLOAD-ID/NNNN`, `ifGenerationMatch=0`), composed
// by the same code, with the caller's precondition.
extension CloudStorageClient {
  public var partPlan: PartPlan? {
    guard uploads.compositeThreshold > 0, compositeRefused.withLock({ $0 == nil }) else { return nil }
    return PartPlan(
      threshold: uploads.compositeThreshold, partSize: uploads.partSize, parallel: uploads.parallelParts)
  }

  public func partedUpload() -> (any PartedUpload)? {
    guard partPlan != nil else { return nil }
    return ClientPartedUpload(client: self, prefix: uploads.partPrefix + Self.uploadID() + "/")
  }
}

/// One parted upload of ``CloudStorageClient``.
final class ClientPartedUpload: PartedUpload {
  let client: CloudStorageClient
  let prefix: String
  /// The parts stored and not yet deleted.
  private let made = CloudStorageClient.Made()
  private let counter = Atomic<Int>(0)
  /// Numbers the composes, whose intermediate composites get names of their own.
  private let composes = Atomic<Int>(0)

  init(client: CloudStorageClient, prefix: String) {
    self.client = client
    self.prefix = prefix
  }

  func store(_ source: any UploadSource) async throws -> StoredPart {
    let name = prefix + CloudStorageClient.numbered(counter.wrappingAdd(1, ordering: .relaxed).oldValue)
    let stored = try await client.storePart(name, from: source, made: made)
    return StoredPart(
      name: name, generation: stored.generation, size: source.size,
      crc32c: stored.crc32c.flatMap { CRC32C.value(base64: $0) })
  }

  func read(_ part: StoredPart, range: Range<Int64>) async throws -> ByteBuffer {
    try await client.read(part.name, generation: part.generation, range: range, reusing: nil)
  }

  func compose(
    _ parts: [StoredPart], into name: String, attributes: ObjectAttributes, ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    let components = parts.map { CloudStorageClient.Component(name: $0.name, generation: $0.generation) }
    let round = composes.wrappingAdd(1, ordering: .relaxed).newValue
    let sources = try await client.composeTree(components, under: prefix + "k\(round)-", made: made)
    let size = parts.reduce(Int64(0)) { $0 + $1.size }
    return try await client.compose(
      sources, into: name, attributes: attributes, ifGenerationMatch: ifGenerationMatch, size: size,
      crc32c: CRC32C.concatenated(parts.map { ($0.crc32c, $0.size) })
    ) {
      try await client.ownObject(
        name, size: size, attributes: attributes, contentType: CloudStorageClient.contentType(attributes)
      ) {
        var sum: UInt32 = 0
        for part in parts {
          guard let crc = part.crc32c else { return nil }
          sum = CRC32C.combine(sum, crc, lengthB: part.size)
        }
        return sum
      }
    }
  }

  func combine(_ parts: [StoredPart]) async throws -> StoredPart {
    let name = prefix + "g" + CloudStorageClient.numbered(counter.wrappingAdd(1, ordering: .relaxed).oldValue)
    let stored = try await client.composeIntermediate(
      parts.map { CloudStorageClient.Component(name: $0.name, generation: $0.generation) }, into: name)
    made.add(stored)
    var crc: UInt32? = 0
    for part in parts {
      crc = part.crc32c.flatMap { piece in crc.map { CRC32C.combine($0, piece, lengthB: part.size) } }
    }
    return StoredPart(
      name: name, generation: stored.generation, size: parts.reduce(Int64(0)) { $0 + $1.size }, crc32c: crc)
  }

  func remove(_ parts: [StoredPart]) async {
    made.objects.withLock { objects in for part in parts { objects[part.name] = nil } }
    let failed = await client.deleteAll(
      parts.map { CloudStorageClient.Component(name: $0.name, generation: $0.generation) })
    if failed > 0 {
      client.logger.warning(
        "\(failed) parts under gs://\(client.bucket)/\(prefix) could not be deleted; `\(client.cleanCommand) --older-than 0` removes them"
      )
    }
  }

  func removeParts(all: Bool) async {
    let stored = CloudStorageClient.Made()
    stored.objects.withLock {
      $0 = made.objects.withLock { taken in
        defer { taken = [:] }; return taken
      }
    }
    await client.deleteParts(under: prefix, made: stored, listing: all)
  }
}

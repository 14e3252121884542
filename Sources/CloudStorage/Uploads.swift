import NIOCore
import ObjectStore

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

// Uploads: one multipart request up to the policy's threshold, a resumable
// session above it (ResumableUpload.swift), parts composed above the
// composite threshold (CompositeUpload.swift).
extension CloudStorageClient {
  public func upload(
    _ name: String, from source: any UploadSource, attributes: ObjectAttributes, ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    if uploads.isComposite(source.size), compositeRefused.withLock({ $0 == nil }) {
      do {
        return try await compositeUpload(
          name, from: source, attributes: attributes, ifGenerationMatch: ifGenerationMatch)
      } catch let refused as PartsRefused {
        logger.notice(
          "parts of composite uploads cannot be created under gs://\(bucket)/\(uploads.partPrefix) (\(refused.reason)); large files go up in one stream from now on"
        )
        compositeRefused.withLock { $0 = refused.reason }
      }
    }
    if source.size <= uploads.threshold {
      return try await multipartUpload(
        name, from: source, attributes: attributes, ifGenerationMatch: ifGenerationMatch)
    }
    return try await resumableUpload(
      name, from: source, attributes: attributes, ifGenerationMatch: ifGenerationMatch)
  }

  /// Metadata and bytes in one `multipart/related` request. Repeated after a
  /// transient failure only under a precondition: without one, a repeat
  /// could overwrite what another writer stored after the first attempt.
  func multipartUpload(
    _ name: String, from source: any UploadSource, attributes: ObjectAttributes, ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    let contentType = Self.contentType(attributes)
    let metadata = try Self.objectBody(name: name, attributes: attributes, contentType: contentType)
    var media = try await read(source, from: 0, count: Int(source.size))
    let boundary = Self.boundary(notIn: media)
    var body = ByteBufferAllocator().buffer(capacity: media.readableBytes + metadata.count + 512)
    body.writeString("--\(boundary)\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n")
    body.writeBytes(metadata)
    body.writeString("\r\n--\(boundary)\r\nContent-Type: \(contentType)\r\n\r\n")
    body.writeBuffer(&media)
    body.writeString("\r\n--\(boundary)--\r\n")

    let (status, _, answer) = try await exchange(
      StorageRequest(
        method: .POST, kind: .upload, url: uploadURL("multipart", ifGenerationMatch: ifGenerationMatch),
        headers: [("Content-Type", "multipart/related; boundary=\(boundary)")], body: .bytes(body),
        operation: "upload \(name)", maxBody: 4 << 20, idempotent: ifGenerationMatch != nil,
        sending: body.readableBytes, settledAfterRetry: [412]))
    if status == 412 {
      return try await ownObject(name, from: source, attributes: attributes, contentType: contentType)
    }
    return try await uploadedObject(answer, name: name, size: source.size)
  }

  /// A repeat got 412: the first attempt may have stored the object and lost
  /// its answer. The live object is taken as this upload's only if it has
  /// the same size, CRC-32C and writable metadata; otherwise someone else's
  /// change won and the 412 stands.
  func ownObject(
    _ name: String, from source: any UploadSource, attributes: ObjectAttributes, contentType: String
  ) async throws -> ObjectMetadata {
    try await ownObject(name, size: source.size, attributes: attributes, contentType: contentType) {
      var sum: UInt32 = 0
      var offset: Int64 = 0
      while offset < source.size {
        let piece = try await read(
          source, from: offset, count: Int(min(Int64(uploads.chunkSize), source.size - offset)))
        sum = CRC32C.update(sum, piece)
        offset += Int64(piece.readableBytes)
      }
      return sum
    }
  }

  /// ``ownObject(_:from:attributes:contentType:)`` for bytes known by their
  /// size and CRC-32C (`checksum`, computed only once the size matches;
  /// nil: unknown, and the 412 stands).
  func ownObject(
    _ name: String, size: Int64, attributes: ObjectAttributes, contentType: String,
    checksum: () async throws -> UInt32?
  ) async throws -> ObjectMetadata {
    guard let live = try? await metadata(of: name), live.size == size, let crc = live.crc32c else {
      throw StorageError.preconditionFailed
    }
    var sent = attributes
    sent.contentType = contentType
    guard let sum = try await checksum(), CRC32C.base64(sum) == crc, ObjectAttributes(of: live) == sent else {
      throw StorageError.preconditionFailed
    }
    logger.info(
      "upload \(name): the repeat got 412, but generation \(live.generation) is this upload's (answer lost)")
    return live
  }

  /// The object an upload answered with; a partial answer is completed by a
  /// GET. An object of another size than the source is not what was sent
  /// (fake-gcs-server stores what a session holds when asked its status): that
  /// generation is deleted, under its own precondition, and the upload fails.
  func uploadedObject(_ body: ByteBuffer, name: String, size: Int64) async throws -> ObjectMetadata {
    let resource = try read(body, what: "uploaded object \(name)", as: ObjectResource.init(reading:))
    let stored: ObjectMetadata
    if resource.isComplete {
      stored = try resource.metadata(defaultBucket: bucket)
    } else {
      logger.debug("upload \(name): incomplete answer; reading the metadata back")
      stored = try await metadata(of: name)
    }
    guard stored.size == size else {
      logger.error(
        "upload \(name): the service stored \(stored.size) of \(size) bytes (generation \(stored.generation)); deleting it"
      )
      try? await delete(name, ifGenerationMatch: stored.generation)
      throw StorageError.invalidResponse("upload \(name): stored \(stored.size) of \(size) bytes")
    }
    return stored
  }

  /// `count` bytes of `source` from `offset`, read in pieces of at most one
  /// chunk; the source's own buffer when one piece holds them all (no copy:
  /// an upload holds about one chunk). A source that ends early is a local failure.
  func read(_ source: any UploadSource, from offset: Int64, count: Int) async throws -> ByteBuffer {
    var buffer: ByteBuffer?
    var done = 0
    while done < count {
      var piece = try await source.load(at: offset + Int64(done), count: min(uploads.chunkSize, count - done))
      guard piece.readableBytes > 0 else {
        throw StorageError.badRequest(
          "upload source ended at \(offset + Int64(done)) of \(source.size) bytes")
      }
      if piece.readableBytes > count - done { piece.moveWriterIndex(to: piece.readerIndex + count - done) }
      done += piece.readableBytes
      if buffer == nil && done == count { return piece }
      if buffer == nil { buffer = ByteBufferAllocator().buffer(capacity: count) }
      buffer!.writeBuffer(&piece)
    }
    return buffer ?? ByteBuffer()
  }

  /// The type sent both in the metadata and as the media's Content-Type: the
  /// service's default when none is given. (fake-gcs-server reads the header,
  /// Google's testbench requires the two to agree.)
  static func contentType(_ attributes: ObjectAttributes) -> String {
    attributes.contentType.flatMap { $0.isEmpty ? nil : $0 } ?? "application/octet-stream"
  }

  /// The object resource an upload or rewrite sends: name (when given), the
  /// writable fields and the custom map.
  static func objectBody(name: String?, attributes: ObjectAttributes, contentType: String?) throws -> [UInt8]
  {
    var resource = attributes
    if let contentType { resource.contentType = contentType }
    do {
      let encoder = JSONEncoder()
      encoder.outputFormatting = [.sortedKeys]
      return Array(try encoder.encode(ObjectBody(name: name, attributes: resource)))
    } catch {
      throw StorageError.badRequest("could not encode the object's metadata: \(error)")
    }
  }

  /// A multipart boundary that does not occur in the media.
  static func boundary(notIn media: ByteBuffer) -> String {
    while true {
      let candidate =
        "bucketfs-"
        + (0..<4).map { _ in String(UInt64.random(in: 0...UInt64.max), radix: 36) }
        .joined()
      let needle = Array(candidate.utf8)
      let found = media.withUnsafeReadableBytes { bytes in
        bytes.count >= needle.count
          && (0...(bytes.count - needle.count)).contains { start in
            bytes[start] == needle[0] && (1..<needle.count).allSatisfy { bytes[start + $0] == needle[$0] }
          }
      }
      if !found { return candidate }
    }
  }
}

/// An object resource for an upload or a rewrite's destination.
struct ObjectBody: Encodable {
  let name: String?
  let attributes: ObjectAttributes

  func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: JSONKey.self)
    if let name { try container.encode(name, forKey: JSONKey("name")) }
    for (field, value) in attributes.fields { try container.encode(value, forKey: JSONKey(field.rawValue)) }
    guard !attributes.custom.isEmpty else { return }
    var custom = container.nestedContainer(keyedBy: JSONKey.self, forKey: JSONKey("metadata"))
    for (key, value) in attributes.custom { try custom.encode(value, forKey: JSONKey(key)) }
  }
}

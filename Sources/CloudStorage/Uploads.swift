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

  /// Metadata and bytes in one `multipart/related` request, the bytes
  /// streamed from the source in 1 MiB pieces (``SourceBody``: an upload
  /// holds about three pieces, however many go at once). The metadata
  /// declares the media's CRC-32C, which comes first: the source's own
  /// (summed as it was written), else one pass over it. Repeated after a
  /// transient failure only under a precondition: without one, a repeat
  /// could overwrite what another writer stored after the first attempt.
  func multipartUpload(
    _ name: String, from source: any UploadSource, attributes: ObjectAttributes, ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    let contentType = Self.contentType(attributes)
    let sum: UInt32
    if let known = source.crc32c { sum = known } else { sum = try await checksum(of: source) }
    let boundary = Self.boundary()
    let metadata = try Self.objectBody(
      name: name, attributes: attributes, contentType: contentType, crc32c: CRC32C.base64(sum))
    var head = ByteBufferAllocator().buffer(capacity: metadata.count + 256)
    head.writeString("--\(boundary)\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n")
    head.writeBytes(metadata)
    head.writeString("\r\n--\(boundary)\r\nContent-Type: \(contentType)\r\n\r\n")
    let framed = FramedSource(head: head, media: source, tail: ByteBuffer(string: "\r\n--\(boundary)--\r\n"))
    let body = SourceBody(source: framed, offset: 0, count: Int(framed.size))
    let status: Int
    let answer: ByteBuffer
    do {
      (status, _, answer) = try await exchange(
        StorageRequest(
          method: .POST, kind: .upload, url: uploadURL("multipart", ifGenerationMatch: ifGenerationMatch),
          headers: [("Content-Type", "multipart/related; boundary=\(boundary)")], body: .streaming(body),
          operation: "upload \(name)", maxBody: 4 << 20, idempotent: ifGenerationMatch != nil,
          sending: body.count, settledAfterRetry: [412]))
    } catch {
      // A local read failure is the caller's to see, not an outage.
      if let local = body.failure.withLockedValue({ $0 }) { throw local }
      throw error
    }
    if status == 412 {
      return try await ownObject(name, from: source, attributes: attributes, contentType: contentType)
    }
    return try await uploadedObject(answer, name: name, size: source.size, crc32c: sum)
  }

  /// A repeat got 412: the first attempt may have stored the object and lost
  /// its answer. The live object is taken as this upload's only if it has
  /// the same size, CRC-32C and writable metadata; otherwise someone else's
  /// change won and the 412 stands.
  func ownObject(
    _ name: String, from source: any UploadSource, attributes: ObjectAttributes, contentType: String
  ) async throws -> ObjectMetadata {
    try await ownObject(name, size: source.size, attributes: attributes, contentType: contentType) {
      try await checksum(of: source)
    }
  }

  /// The CRC-32C of every byte of `source`, read in 1 MiB pieces into one
  /// buffer (each piece's memory is the last one's).
  func checksum(of source: any UploadSource) async throws -> UInt32 {
    var sum: UInt32 = 0
    var offset: Int64 = 0
    var last: ByteBuffer? = nil
    while offset < source.size {
      let piece = try await source.load(
        at: offset, count: Int(min(Int64(SourceBody.piece), source.size - offset)),
        reusing: SpareBuffer(last.take()))
      guard piece.readableBytes > 0 else {
        throw StorageError.badRequest("upload source ended at \(offset) of \(source.size) bytes")
      }
      sum = CRC32C.update(sum, piece)
      offset += Int64(piece.readableBytes)
      last = piece
    }
    return sum
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
  /// With `crc32c` (what was sent, or the parts' combination), an object
  /// whose checksum differs is deleted the same way and the upload fails.
  func uploadedObject(_ body: ByteBuffer, name: String, size: Int64, crc32c: UInt32? = nil) async throws
    -> ObjectMetadata
  {
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
    if let crc32c, let got = stored.crc32c, got != CRC32C.base64(crc32c) {
      metrics.mismatched(.upload)
      logger.error(
        "upload \(name): the service stored crc32c \(got), the bytes sent have \(CRC32C.base64(crc32c)) (generation \(stored.generation)); deleting it"
      )
      try? await delete(name, ifGenerationMatch: stored.generation)
      throw StorageError.invalidResponse(
        "upload \(name): stored crc32c \(got), sent \(CRC32C.base64(crc32c))")
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
  static func objectBody(
    name: String?, attributes: ObjectAttributes, contentType: String?, crc32c: String? = nil
  ) throws -> [UInt8] {
    var resource = attributes
    if let contentType { resource.contentType = contentType }
    do {
      let encoder = JSONEncoder()
      encoder.outputFormatting = [.sortedKeys]
      return Array(try encoder.encode(ObjectBody(name: name, attributes: resource, crc32c: crc32c)))
    } catch {
      throw StorageError.badRequest("could not encode the object's metadata: \(error)")
    }
  }

  /// A multipart boundary of 256 random bits, as Google's client libraries
  /// choose theirs: the media is not scanned for it (a pass over every
  /// byte). Were the media to hold it all the same (odds of 2^-256 at each
  /// byte), the service would store other bytes than those summed, and the
  /// declared CRC-32C refuses them.
  static func boundary() -> String {
    "bucketfs-" + (0..<4).map { _ in String(UInt64.random(in: 0...UInt64.max), radix: 36) }.joined()
  }
}

/// A multipart body: the part heads, the media from its source, the closing
/// delimiter, read as one source. A read stops at the end of the part it
/// begins in.
struct FramedSource: UploadSource {
  let head: ByteBuffer
  let media: any UploadSource
  let tail: ByteBuffer

  var size: Int64 { Int64(head.readableBytes) + media.size + Int64(tail.readableBytes) }

  func read(at offset: Int64, count: Int) throws -> ByteBuffer {
    if let framing = framing(at: offset, count: count) { return framing }
    let inMedia = offset - Int64(head.readableBytes)
    return try media.read(at: inMedia, count: Int(min(Int64(count), media.size - inMedia)))
  }

  func load(at offset: Int64, count: Int) async throws -> ByteBuffer {
    if let framing = framing(at: offset, count: count) { return framing }
    let inMedia = offset - Int64(head.readableBytes)
    return try await media.load(at: inMedia, count: Int(min(Int64(count), media.size - inMedia)))
  }

  func load(at offset: Int64, count: Int, reusing spare: SpareBuffer) async throws -> ByteBuffer {
    if let framing = framing(at: offset, count: count) { return framing }
    let inMedia = offset - Int64(head.readableBytes)
    return try await media.load(
      at: inMedia, count: Int(min(Int64(count), media.size - inMedia)), reusing: spare)
  }

  /// The bytes at `offset` when they are the head's or the tail's; nil in the media.
  private func framing(at offset: Int64, count: Int) -> ByteBuffer? {
    let headSize = Int64(head.readableBytes)
    if offset < headSize {
      return head.getSlice(at: head.readerIndex + Int(offset), length: min(count, Int(headSize - offset)))
    }
    let inTail = Int(offset - headSize - media.size)
    guard inTail >= 0 else { return nil }
    guard inTail < tail.readableBytes else { return ByteBuffer() }
    return tail.getSlice(at: tail.readerIndex + inTail, length: min(count, tail.readableBytes - inTail))
  }
}

/// An object resource for an upload or a rewrite's destination.
struct ObjectBody: Encodable {
  let name: String?
  let attributes: ObjectAttributes
  /// The media's CRC-32C (base64): the service refuses bytes that do not match it.
  var crc32c: String? = nil

  func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: JSONKey.self)
    if let name { try container.encode(name, forKey: JSONKey("name")) }
    if let crc32c { try container.encode(crc32c, forKey: JSONKey("crc32c")) }
    for (field, value) in attributes.fields { try container.encode(value, forKey: JSONKey(field.rawValue)) }
    guard !attributes.custom.isEmpty else { return }
    var custom = container.nestedContainer(keyedBy: JSONKey.self, forKey: JSONKey("metadata"))
    for (key, value) in attributes.custom { try custom.encode(value, forKey: JSONKey(key)) }
  }
}

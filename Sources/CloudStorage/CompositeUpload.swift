import NIOCore
import ObjectStore
import Synchronization

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

// Parallel composite uploads, as gcloud makes them: the source's parts go up
// at once as temporary objects under `PREFIX.bucketfs-parts/UPLOAD-ID/`, one
// compose (in a tree beyond 32 parts) makes the object under the caller's
// precondition, and the parts are deleted whatever happened.
extension CloudStorageClient {
  /// The parts could not be created here (403): the caller uploads in one stream instead.
  struct PartsRefused: Error {
    let reason: String
  }

  /// One object composed from: a part or an intermediate composite.
  struct Component: Sendable {
    let name: String
    let generation: Int64
    /// The part's CRC-32C and size, when known: what the composed object's checksum is combined from.
    var crc32c: UInt32? = nil
    var size: Int64 = 0
  }

  /// The objects an upload made under its prefix, for the cleanup.
  final class Made: Sendable {
    let objects = Mutex<[String: Int64]>([:])
    func add(_ object: ObjectMetadata) { objects.withLock { $0[object.name] = object.generation } }
  }

  func compositeUpload(
    _ name: String, from source: any UploadSource, attributes: ObjectAttributes, ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    let prefix = uploads.partPrefix + Self.uploadID() + "/"
    let made = Made()
    do {
      let parts = try await uploadParts(of: source, under: prefix, made: made)
      let crc32c = CRC32C.concatenated(parts.map { ($0.crc32c, $0.size) })
      // Parts summed from the source's bytes now, against its sum of them as written.
      if let written = source.crc32c, let crc32c, crc32c != written {
        metrics.mismatched(.upload)
        throw StorageError.invalidResponse(
          "upload \(name): the parts hold crc32c \(CRC32C.base64(crc32c)), the bytes written \(CRC32C.base64(written))"
        )
      }
      let sources = try await composeTree(parts, under: prefix, made: made)
      let object = try await compose(
        sources, into: name, attributes: attributes, ifGenerationMatch: ifGenerationMatch, size: source.size,
        crc32c: crc32c
      ) {
        try await self.ownObject(
          name, from: source, attributes: attributes, contentType: Self.contentType(attributes))
      }
      await deleteParts(under: prefix, made: made, listing: false)
      return object
    } catch {
      // A part whose answer was lost is in no record: the listing finds it.
      await deleteParts(under: prefix, made: made, listing: true)
      if case StorageError.accessDenied(let reason) = error, made.objects.withLock({ $0.isEmpty }) {
        throw PartsRefused(reason: reason)
      }
      throw error
    }
  }

  /// The parts, `parallelParts` at once (``storePart(_:from:made:)``).
  private func uploadParts(of source: any UploadSource, under prefix: String, made: Made) async throws
    -> [Component]
  {
    let ranges = uploads.parts(of: source.size)
    return try await inParallel(ranges.count, limit: uploads.parallelParts) { index in
      let name = prefix + Self.numbered(index)
      let stored = try await self.storePart(
        name, from: PartSource(whole: source, range: ranges[index]), made: made)
      return Component(
        name: name, generation: stored.generation, crc32c: stored.crc32c.flatMap { CRC32C.value(base64: $0) },
        size: stored.size)
    }
  }

  /// One part, created with `ifGenerationMatch=0`: in one request up to the
  /// upload threshold, as any small upload (a round trip less than a
  /// session, which matters for each part of a stream), in a resumable
  /// session above it (streamed from the source, resumed after faults).
  func storePart(_ name: String, from part: any UploadSource, made: Made) async throws -> ObjectMetadata {
    let plain = Self.partAttributes
    let stored: ObjectMetadata
    do {
      if part.size <= uploads.threshold {
        stored = try await multipartUpload(name, from: part, attributes: plain, ifGenerationMatch: 0)
      } else {
        stored = try await resumableUpload(name, from: part, attributes: plain, ifGenerationMatch: 0)
      }
    } catch StorageError.preconditionFailed {
      stored = try await ownPart(name, from: part)
    }
    made.add(stored)
    return stored
  }

  /// A part's repeat got 412, and its metadata did not match. The name is
  /// this upload's alone (a random ID), so the first attempt stored it and
  /// lost its answer, unless the bytes there differ. Only the bytes are
  /// composed, so they decide: storage-testbench, for one, adds custom
  /// metadata of its own to every upload.
  private func ownPart(_ name: String, from part: any UploadSource) async throws -> ObjectMetadata {
    guard let live = try? await metadata(of: name), live.size == part.size, let crc = live.crc32c,
      CRC32C.base64(try await checksum(of: part)) == crc
    else {
      // Not the destination's precondition: the caller must not see a conflict.
      throw StorageError.unavailable("upload part \(name): the name is taken")
    }
    logger.info("upload part \(name): the repeat got 412, but generation \(live.generation) holds its bytes")
    return live
  }

  /// Composes groups of 32 into intermediate composites under the prefix
  /// until one compose can take them all.
  func composeTree(_ parts: [Component], under prefix: String, made: Made) async throws -> [Component] {
    var level = parts
    var round = 0
    let limit = UploadPolicy.composeLimit
    while level.count > limit {
      round += 1
      let groups = stride(from: 0, to: level.count, by: limit).map {
        Array(level[$0..<min($0 + limit, level.count)])
      }
      let depth = round
      level = try await inParallel(groups.count, limit: uploads.parallelParts) { index in
        let name = prefix + "c\(depth)-" + Self.numbered(index)
        let stored = try await self.composeIntermediate(groups[index], into: name)
        made.add(stored)
        return Component(name: name, generation: stored.generation)
      }
    }
    return level
  }

  /// An intermediate composite: a new name under this upload's prefix, so a
  /// repeat's 412 can only mean that the first attempt made it.
  func composeIntermediate(_ sources: [Component], into name: String) async throws -> ObjectMetadata {
    let status: Int
    let answer: ByteBuffer
    do {
      (status, answer) = try await sendCompose(
        sources, into: name, attributes: Self.partAttributes, ifGenerationMatch: 0, idempotent: true)
    } catch StorageError.preconditionFailed {
      // As for a part: not the destination's precondition.
      throw StorageError.unavailable("compose \(name): the name is taken")
    }
    if status == 412 { return try await metadata(of: name) }
    return try read(answer, what: "composed object \(name)", as: ObjectResource.init(reading:))
      .metadata(defaultBucket: bucket)
  }

  /// The final compose, with every property the single upload would set and
  /// the caller's precondition; repeated after a transient failure only
  /// under a precondition, whose 412 on a repeat is checked as an upload's is.
  /// An object whose CRC-32C is not `crc32c` (the parts' combined) is deleted
  /// under its generation and the compose fails.
  func compose(
    _ sources: [Component], into name: String, attributes: ObjectAttributes, ifGenerationMatch: Int64?,
    size: Int64, crc32c: UInt32?, own: () async throws -> ObjectMetadata
  ) async throws -> ObjectMetadata {
    let (status, answer) = try await sendCompose(
      sources, into: name, attributes: attributes, ifGenerationMatch: ifGenerationMatch,
      idempotent: ifGenerationMatch != nil)
    if status == 412 { return try await own() }
    return try await uploadedObject(answer, name: name, size: size, crc32c: crc32c)
  }

  /// `POST …/o/NAME/compose`; each source pinned to its generation. A 412
  /// after an attempt that may have reached the service comes back as a status.
  private func sendCompose(
    _ sources: [Component], into name: String, attributes: ObjectAttributes, ifGenerationMatch: Int64?,
    idempotent: Bool
  ) async throws -> (Int, ByteBuffer) {
    var resource = attributes
    resource.contentType = Self.contentType(attributes)
    let body: Data
    do {
      let encoder = JSONEncoder()
      encoder.outputFormatting = [.sortedKeys]
      body = try encoder.encode(
        ComposeBody(
          destination: ObjectBody(name: nil, attributes: resource),
          sourceObjects: sources.map { .init(name: $0.name, generation: $0.generation) }))
    } catch {
      throw StorageError.badRequest("could not encode a compose request: \(error)")
    }
    var query: [(String, String)] = []
    if let ifGenerationMatch { query.append(("ifGenerationMatch", String(ifGenerationMatch))) }
    query.append(("fields", Fields.object))
    let (status, _, answer) = try await exchange(
      StorageRequest(
        method: .POST, kind: .compose,
        url: "\(objectsPath)/\(name.percentEncoded)/compose" + queryString(query),
        headers: [("Content-Type", "application/json; charset=UTF-8")], body: .bytes(ByteBuffer(bytes: body)),
        operation: "compose \(name) from \(sources.count) objects", maxBody: 4 << 20, idempotent: idempotent,
        settledAfterRetry: [412]))
    return (status, answer)
  }

  /// Deletes what the upload made (each under its generation), and with
  /// `listing` whatever else its prefix holds. Not cancelled with the
  /// upload; failures are logged, never thrown: the upload's outcome stands.
  func deleteParts(under prefix: String, made: Made, listing: Bool) async {
    await Task {
      var objects = made.objects.withLock { $0 }
      if listing {
        var token: String?
        repeat {
          guard
            let page = try? await self.list(ListRequest(prefix: prefix, pageSize: 1000, pageToken: token))
          else { break }
          for item in page.items { objects[item.name] = item.generation }
          token = page.nextPageToken
        } while token != nil
      }
      let all = objects.map { Component(name: $0.key, generation: $0.value) }
      let failed = await self.deleteAll(all)
      if failed > 0 {
        self.logger.warning(
          "\(failed) of \(all.count) parts under gs://\(self.bucket)/\(prefix) could not be deleted; `\(self.cleanCommand) --older-than 0` removes them"
        )
      }
    }.value
  }

  /// Deletes each object under its generation, `parallelParts` at once; one
  /// already gone counts as deleted. Returns how many could not be deleted.
  func deleteAll(_ objects: [Component]) async -> Int {
    let failures = try? await inParallel(objects.count, limit: uploads.parallelParts) { index in
      do {
        try await self.delete(objects[index].name, ifGenerationMatch: objects[index].generation)
        return 0
      } catch StorageError.notFound {
        return 0
      } catch {
        self.logger.warning("could not delete \(objects[index].name): \(error)")
        return 1
      }
    }
    return failures?.reduce(0, +) ?? objects.count
  }

  /// `body(i)` for each `i` below `count`, at most `limit` at once, results
  /// in order. After a failure no more start, those under way are let finish
  /// (so that what they store is known, for the cleanup), and the first
  /// failure is thrown.
  func inParallel<T: Sendable>(
    _ count: Int, limit: Int, _ body: @escaping @Sendable (Int) async throws -> T
  ) async throws -> [T] {
    let outcomes = await withTaskGroup(of: (Int, Result<T, any Error>).self) { group in
      var results = [Result<T, any Error>?](repeating: nil, count: count)
      var failed = false
      for index in 0..<count {
        if index >= limit, let next = await group.next() {
          results[next.0] = next.1
          if case .failure = next.1 { failed = true }
        }
        if failed { break }
        group.addTask {
          do {
            let value = try await body(index)
            return (index, .success(value))
          } catch {
            return (index, .failure(error))
          }
        }
      }
      for await (done, outcome) in group { results[done] = outcome }
      return results
    }
    var values: [T] = []
    for outcome in outcomes {
      switch outcome {
      case .success(let value)?: values.append(value)
      case .failure(let error)?: throw error
      case nil: break
      }
    }
    // Every outcome ended well, or a failure was thrown above: all ran.
    return values
  }

  /// What parts and intermediate composites are stored with: only a type.
  static let partAttributes = ObjectAttributes(fields: [.contentType: "application/octet-stream"])

  /// A name for one upload's parts: when it began (Unix seconds, so that
  /// `clean-parts` can spare uploads under way) and 10 random base-36 digits.
  static func uploadID() -> String {
    let seconds = Int64(Date().timeIntervalSince1970)
    let digits = String(UInt64.random(in: 0...UInt64.max) % 3_656_158_440_062_976, radix: 36)  // 36^10
    return "\(seconds)-" + String(repeating: "0", count: 10 - digits.count) + digits
  }

  /// `index` in four digits at least, so parts list in order.
  static func numbered(_ index: Int) -> String {
    let digits = String(index)
    return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
  }
}

/// `range` of another source, read as a source of its own.
struct PartSource: UploadSource {
  let whole: any UploadSource
  let range: Range<Int64>

  var size: Int64 { range.upperBound - range.lowerBound }

  func read(at offset: Int64, count: Int) throws -> ByteBuffer {
    let available = max(0, min(Int64(count), size - offset))
    return trimmed(try whole.read(at: range.lowerBound + offset, count: Int(available)), to: Int(available))
  }

  func load(at offset: Int64, count: Int) async throws -> ByteBuffer {
    let available = max(0, min(Int64(count), size - offset))
    return trimmed(
      try await whole.load(at: range.lowerBound + offset, count: Int(available)), to: Int(available))
  }

  func load(at offset: Int64, count: Int, reusing spare: SpareBuffer) async throws -> ByteBuffer {
    let available = max(0, min(Int64(count), size - offset))
    return trimmed(
      try await whole.load(at: range.lowerBound + offset, count: Int(available), reusing: spare),
      to: Int(available))
  }

  private func trimmed(_ piece: ByteBuffer, to available: Int) -> ByteBuffer {
    var piece = piece
    if piece.readableBytes > available { piece.moveWriterIndex(to: piece.readerIndex + available) }
    return piece
  }
}

/// The JSON API's compose request.
struct ComposeBody: Encodable {
  struct Source: Encodable {
    let name: String
    let generation: Int64
  }
  let destination: ObjectBody
  let sourceObjects: [Source]
}

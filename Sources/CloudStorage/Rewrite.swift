import NIOCore
import ObjectStore
import ServiceAccess

// Server-side copies: the JSON API's rewrite, called again with its token
// until the service says done (large objects, or across locations and
// storage classes, take several calls).
extension CloudStorageClient {
  public func copy(
    _ source: String, sourceGeneration: Int64, to destination: String, attributes: ObjectAttributes?,
    ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    // An empty body keeps the source's metadata; a resource replaces it.
    let body = try attributes.map {
      ByteBuffer(bytes: try Self.objectBody(name: nil, attributes: $0, contentType: $0.contentType))
    }
    let url =
      "\(objectsPath)/\(source.percentEncoded)/rewriteTo/b/\(bucket.percentEncoded)/o/\(destination.percentEncoded)"
    var token: String?
    var calls = 0
    while true {
      calls += 1
      var query = [("sourceGeneration", String(sourceGeneration))]
      if let ifGenerationMatch { query.append(("ifGenerationMatch", String(ifGenerationMatch))) }
      if let token { query.append(("rewriteToken", token)) }
      // Each call that answers is progress, so each gets the whole deadline.
      let (_, _, answer) = try await exchange(
        StorageRequest(
          method: .POST, kind: .copy, url: url + queryString(query),
          headers: body == nil ? [] : [("Content-Type", "application/json; charset=UTF-8")],
          body: .bytes(body ?? ByteBuffer()),
          operation: "copy \(source) to \(destination)", maxBody: 4 << 20,
          idempotent: ifGenerationMatch != nil))
      let rewrite = try read(
        answer, what: "rewrite of \(source) to \(destination)", as: RewriteResponse.init(reading:))
      if rewrite.done {
        guard let resource = rewrite.resource else {
          throw StorageError.invalidResponse("copy \(source) to \(destination): done without the new object")
        }
        logger.debug("copy \(source) to \(destination): done after \(calls) call(s)")
        guard resource.isComplete else { return try await metadata(of: destination) }
        return try resource.metadata(defaultBucket: bucket)
      }
      guard let next = rewrite.rewriteToken, !next.isEmpty else {
        throw StorageError.invalidResponse("copy \(source) to \(destination): not done and no rewriteToken")
      }
      logger.trace("copy \(source) to \(destination): \(rewrite.totalBytesRewritten ?? 0) bytes so far")
      token = next
    }
  }
}

/// The answer to one rewrite call.
struct RewriteResponse {
  var done = false
  var rewriteToken: String?
  var totalBytesRewritten: Int64?
  var resource: ObjectResource?

  init(reading reader: inout JSONReader) throws {
    try reader.readObject { key, reader in
      switch key {
      case "done": done = try reader.readOptionalBool() ?? false
      case "rewriteToken": rewriteToken = try reader.readOptionalString()
      case "totalBytesRewritten": totalBytesRewritten = try reader.readOptionalInt64()
      case "resource":
        if try reader.readNull() { break }
        resource = try ObjectResource(reading: &reader)
      default: try reader.skipValue()
      }
    }
  }
}

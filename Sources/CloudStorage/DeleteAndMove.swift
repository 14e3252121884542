import NIOCore
import ObjectStore
import ServiceAccess

// Deletes and the service's atomic move.
extension CloudStorageClient {
  /// Repeated after a transient failure only under a precondition; then a
  /// 404 on a repeat means the first attempt deleted that generation.
  public func delete(_ name: String, ifGenerationMatch: Int64?) async throws {
    var query: [(String, String)] = []
    if let ifGenerationMatch { query.append(("ifGenerationMatch", String(ifGenerationMatch))) }
    _ = try await exchange(
      StorageRequest(
        method: .DELETE, kind: .delete,
        url: "\(objectsPath)/\(name.percentEncoded)" + (query.isEmpty ? "" : queryString(query)),
        operation: "delete \(name)", maxBody: 1 << 20, idempotent: ifGenerationMatch != nil,
        settledAfterRetry: [404]))
  }

  /// `objects.move`. Where the bucket cannot move (the service refuses the
  /// call as such, or does not know the route and answers 404 for a source
  /// that exists) this is ``StorageError/unsupported(_:)``, remembered for
  /// the client's life; a missing source stays `notFound`, another
  /// generation `preconditionFailed`.
  public func move(
    _ source: String, sourceGeneration: Int64, to destination: String, ifGenerationMatch: Int64?
  )
    async throws -> ObjectMetadata
  {
    if let reason = moveUnsupported.withLock({ $0 }) { throw StorageError.unsupported(reason) }
    var query = [("ifSourceGenerationMatch", String(sourceGeneration))]
    if let ifGenerationMatch { query.append(("ifGenerationMatch", String(ifGenerationMatch))) }
    query.append(("fields", Fields.object))
    let url =
      "\(objectsPath)/\(source.percentEncoded)/moveTo/o/\(destination.percentEncoded)" + queryString(query)
    let status: Int
    let answer: ByteBuffer
    do {
      (status, _, answer) = try await exchange(
        StorageRequest(
          method: .POST, kind: .move, url: url,
          headers: [("Content-Type", "application/json; charset=UTF-8")],
          body: .bytes(ByteBuffer(string: "{}")), operation: "move \(source) to \(destination)",
          maxBody: 4 << 20,
          idempotent: true, accepting: [400, 405, 501]))
    } catch StorageError.notFound {
      // A 404 for a source that is there: the service does not know the call.
      guard let live = try? await metadata(of: source) else { throw StorageError.notFound }
      guard live.generation == sourceGeneration else { throw StorageError.preconditionFailed }
      throw rememberUnsupported("the service answered 404 to a move of an object that exists")
    }
    if status == 400 || status == 405 || status == 501 { try unsupportedOrFailure(status, answer) }
    let resource = try read(answer, what: "moved object \(destination)", as: ObjectResource.init(reading:))
    guard resource.isComplete else { return try await metadata(of: destination) }
    return try resource.metadata(defaultBucket: bucket)
  }

  /// A 400 that says the bucket cannot move, a 405 or a 501 is
  /// ``StorageError/unsupported(_:)``; another 400 is a bad request.
  private func unsupportedOrFailure(_ status: Int, _ body: ByteBuffer) throws -> Never {
    let text = message(in: body, status: status)
    let lower = text.lowercased()
    let refusal = [
      "hierarchical namespace", "not support", "unsupported", "not enabled", "not implemented",
    ]
    if status != 400 || refusal.contains(where: lower.contains) {
      throw rememberUnsupported("HTTP \(status): \(text)")
    }
    throw StorageError.badRequest(text)
  }

  private func rememberUnsupported(_ reason: String) -> StorageError {
    logger.notice("this bucket cannot move objects (\(reason)); renames copy and delete")
    moveUnsupported.withLock { $0 = reason }
    return .unsupported(reason)
  }
}

import Foundation
import NIOCore
import ObjectStore

/// Deletes, rewrites (with tokens when an object takes more than one call)
/// and moves, through the store's protocol methods.
extension FakeStorageServer {
  /// At most this many bytes per rewrite call, so a copy takes several calls
  /// and the client must loop on `rewriteToken`; nil: one call.
  public var rewriteBytesPerCall: Int64? {
    get { state.withLock { $0.rewriteBytesPerCall } }
    set { state.withLock { $0.rewriteBytesPerCall = newValue } }
  }

  func delete(_ name: String, query: [String: String]) async throws -> Response {
    try await store.delete(name, ifGenerationMatch: try Self.int64(query, "ifGenerationMatch"))
    return Response(status: 204)
  }

  /// Each call checks the source and the destination's precondition; the
  /// last one stores the copy. The token carries the source generation and
  /// the bytes done.
  func rewrite(_ source: String, to destination: String, query: [String: String], body: [UInt8]) async throws
    -> Response
  {
    let precondition = try Self.int64(query, "ifGenerationMatch")
    guard let live = store.object(source) else { throw StorageError.notFound }
    let generation = try Self.int64(query, "sourceGeneration") ?? live.generation
    guard generation == live.generation else { throw StorageError.notFound }
    if let precondition, precondition != (store.object(destination)?.generation ?? 0) {
      throw StorageError.preconditionFailed
    }
    var done: Int64 = 0
    if let token = query["rewriteToken"] {
      let parts = (Base64.decode(token).map { String(decoding: $0, as: UTF8.self) } ?? "").split(
        separator: ":")
      guard parts.count == 2, let tokenGeneration = Int64(parts[0]), let bytes = Int64(parts[1]) else {
        throw HTTPError(400, "Invalid rewrite token.", reason: "invalid")
      }
      guard tokenGeneration == generation else { throw StorageError.notFound }
      done = bytes
    }
    let perCall = [rewriteBytesPerCall, try Self.int64(query, "maxBytesRewrittenPerCall")].compactMap { $0 }
      .min()
    done = min(live.size, perCall.map { done + max($0, 1) } ?? live.size)
    let q = JSONWriter.quote
    if done < live.size {
      let token = Base64.encode(Array("\(generation):\(done)".utf8))
      return .json(
        200,
        JSONWriter.object([
          ("kind", q("storage#rewriteResponse")), ("totalBytesRewritten", q(String(done))),
          ("objectSize", q(String(live.size))), ("done", "false"), ("rewriteToken", q(token)),
        ]))
    }
    let attributes = body.isEmpty ? nil : try Self.objectResource(body).1
    let meta = try await store.copy(
      source, sourceGeneration: generation, to: destination, attributes: attributes,
      ifGenerationMatch: precondition)
    return .json(
      200,
      JSONWriter.object([
        ("kind", q("storage#rewriteResponse")), ("totalBytesRewritten", q(String(live.size))),
        ("objectSize", q(String(live.size))), ("done", "true"),
        ("resource", Resources.object(meta, endpoint: endpoint)),
      ]))
  }

  func move(_ source: String, to destination: String, query: [String: String]) async throws -> Response {
    let precondition = try Self.int64(query, "ifGenerationMatch")
    let sourceGeneration: Int64
    if let expected = try Self.int64(query, "ifSourceGenerationMatch") {
      sourceGeneration = expected
    } else {
      guard let live = store.object(source) else { throw StorageError.notFound }
      sourceGeneration = live.generation
    }
    let meta = try await store.move(
      source, sourceGeneration: sourceGeneration, to: destination, ifGenerationMatch: precondition)
    return .json(200, Resources.object(meta, endpoint: endpoint))
  }
}

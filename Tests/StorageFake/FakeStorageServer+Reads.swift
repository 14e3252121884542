import Foundation
import NIOCore
import NIOHTTP1
import ObjectStore

// List, metadata, media and PATCH.
extension FakeStorageServer {
  func list(_ query: [String: String]) async throws -> Response {
    var pageSize = 1000
    if let text = query["maxResults"] {
      guard let value = Int(text), value >= 0 else {
        throw HTTPError(400, "Invalid value for maxResults: \(text)", reason: "invalidParameter")
      }
      pageSize = value
    }
    var includeTrailingDelimiter = false
    if let text = query["includeTrailingDelimiter"] {
      guard let value = Bool(text) else {
        throw HTTPError(
          400, "Invalid value for includeTrailingDelimiter: \(text)", reason: "invalidParameter")
      }
      includeTrailingDelimiter = value
    }
    let (prefix, token) = (query["prefix"] ?? "", query["pageToken"].flatMap { $0.isEmpty ? nil : $0 })
    let page = try await store.list(
      ListRequest(
        prefix: prefix, delimiter: query["delimiter"], includeTrailingDelimiter: includeTrailingDelimiter,
        pageSize: pageSize, pageToken: token, endOffset: query["endOffset"]))
    return .json(200, Resources.list(page, endpoint: endpoint))
  }

  /// With `generation=`, only that generation's metadata: the live one, or 404 (no versioning).
  func metadata(_ name: String, generation: String?) async throws -> Response {
    let meta = try await store.metadata(of: name)
    if let generation, generation != String(meta.generation) {
      guard Int64(generation) != nil else {
        throw HTTPError(400, "Invalid value for generation: \(generation)", reason: "invalidParameter")
      }
      throw StorageError.notFound
    }
    return .json(200, Resources.object(meta, endpoint: endpoint))
  }

  /// `.ignoreRange` answers as if no Range had been sent.
  func media(_ name: String, query: [String: String], headers: HTTPHeaders, _ modifier: ScriptedResponse?)
    async throws -> Response
  {
    let current = store.object(name)
    let generation: Int64
    if let text = query["generation"] {
      guard let value = Int64(text) else {
        throw HTTPError(400, "Invalid value for generation: \(text)", reason: "invalidParameter")
      }
      generation = value
    } else {
      guard let current else { throw StorageError.notFound }
      generation = current.generation
    }
    // The size is needed only for suffix ranges and Content-Range; if the generation is not the
    // live one the store answers 404 anyway.
    let meta = current?.generation == generation ? current : nil
    let size = meta?.size ?? 0
    let spec = modifier == .ignoreRange ? nil : ByteRangeSpec(header: headers.first(name: "Range"))
    guard let range = spec.map({ $0.resolved(size: size) }) ?? (0..<Int64.max) else {
      throw HTTPError(
        416, "Request range not satisfiable", reason: "requestedRangeNotSatisfiable",
        headers: [("Content-Range", "bytes */\(size)")])
    }
    var bytes: [UInt8]
    do {
      bytes = Array(
        try await store.read(name, generation: generation, range: range, reusing: nil).readableBytesView)
    } catch StorageError.badRequest(let message) where message.hasPrefix("416") {
      throw HTTPError(
        416, "Request range not satisfiable", reason: "requestedRangeNotSatisfiable",
        headers: [("Content-Range", "bytes */\(size)")])
    }
    if takeCorruption(\.downloads) { bytes = Self.flipped(bytes) }
    var out: [(String, String)] = [("Content-Type", meta?.contentType ?? "application/octet-stream")]
    if let meta {
      out.append(("X-Goog-Generation", String(meta.generation)))
      out.append(("X-Goog-Metageneration", String(meta.metageneration)))
      out.append(("X-Goog-Stored-Content-Length", String(meta.size)))
      out.append(("X-Goog-Stored-Content-Encoding", meta.contentEncoding ?? "identity"))
      if let crc = meta.crc32c { out.append(("X-Goog-Hash", "crc32c=\(crc)")) }
      if let md5 = meta.md5Hash { out.append(("X-Goog-Hash", "md5=\(md5)")) }
      if let etag = meta.etag { out.append(("ETag", etag)) }
      if let value = meta.cacheControl { out.append(("Cache-Control", value)) }
      if let value = meta.contentDisposition { out.append(("Content-Disposition", value)) }
      if let value = meta.contentLanguage { out.append(("Content-Language", value)) }
    }
    // An empty object has no satisfiable byte: the fake sends it whole (200) even with a Range.
    if spec != nil && size > 0 {
      let first = range.lowerBound
      out.append(("Content-Range", "bytes \(first)-\(first + Int64(bytes.count) - 1)/\(size)"))
      return Response(status: 206, headers: out, body: bytes)
    }
    return Response(status: 200, headers: out, body: bytes)
  }

  func patch(_ name: String, query: [String: String], body: [UInt8]) async throws -> Response {
    var precondition: Int64?
    if let text = query["ifMetagenerationMatch"] {
      guard let value = Int64(text) else {
        throw HTTPError(400, "Invalid value for ifMetagenerationMatch: \(text)", reason: "invalidParameter")
      }
      precondition = value
    }
    var generation: Int64?
    if let text = query["ifGenerationMatch"] {
      guard let value = Int64(text) else {
        throw HTTPError(400, "Invalid value for ifGenerationMatch: \(text)", reason: "invalidParameter")
      }
      generation = value
    }
    let json: Any
    do {
      json = try body.isEmpty ? [String: Any]() : JSONSerialization.jsonObject(with: Data(body))
    } catch {
      throw HTTPError(400, "Parse Error", reason: "parseError")
    }
    guard let fields = json as? [String: Any] else {
      throw HTTPError(400, "Invalid JSON payload: expected an object.", reason: "parseError")
    }
    var patch = MetadataPatch()
    for field in ObjectMetadata.WritableField.allCases {
      guard let value = fields[field.rawValue] else { continue }
      patch.fields[field] = .some(try Self.patchValue(value, field: field.rawValue))
    }
    if let value = fields["metadata"] {
      if value is NSNull {
        // `"metadata": null` clears the whole map.
        for key in store.object(name)?.custom.keys ?? [:].keys { patch.custom[key] = .some(nil) }
      } else if let map = value as? [String: Any] {
        for (key, entry) in map {
          patch.custom[key] = .some(try Self.patchValue(entry, field: "metadata.\(key)"))
        }
      } else {
        throw HTTPError(400, "Invalid value for metadata.", reason: "invalid")
      }
    }
    // Other properties (name, size, ...) are read-only; the service ignores them in a PATCH.
    let meta = try await store.patch(
      name, patch, ifGenerationMatch: generation, ifMetagenerationMatch: precondition)
    return .json(200, Resources.object(meta, endpoint: endpoint))
  }

  /// JSON null removes; a string sets; anything else is a 400.
  static func patchValue(_ value: Any, field: String) throws -> String? {
    if value is NSNull { return nil }
    // NSNumber bridges to String on some platforms only through description; reject it.
    if let text = value as? String, !(value is NSNumber) { return text }
    throw HTTPError(400, "Invalid value for \(field): expected a string.", reason: "invalid")
  }
}

extension FakeStorageServer.Response {
  /// A 206 cut to its first `count` bytes, with a Content-Range that says so.
  mutating func shorten(to count: Int) {
    guard count < body.count, let index = headers.firstIndex(where: { $0.0 == "Content-Range" }),
      let range = ContentRangeText(headers[index].1)
    else { return }
    body = Array(body.prefix(count))
    headers[index].1 = "bytes \(range.first)-\(range.first + Int64(count) - 1)/\(range.size)"
  }
}

/// `bytes FIRST-LAST/SIZE` as the fake writes it.
private struct ContentRangeText {
  var first: Int64
  var size: String

  init?(_ text: String) {
    guard text.hasPrefix("bytes "), let dash = text.firstIndex(of: "-"), let slash = text.firstIndex(of: "/"),
      let first = Int64(text[text.index(text.startIndex, offsetBy: 6)..<dash])
    else { return nil }
    self.first = first
    self.size = String(text[text.index(after: slash)...])
  }
}

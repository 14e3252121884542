import Foundation
import NIOCore
import NIOHTTP1
import ObjectStore

/// Uploads as the JSON API takes them: `uploadType=multipart` (a JSON metadata
/// part and a media part), `uploadType=media`, and resumable sessions (start,
/// chunks in multiples of 256 KiB but the last, `bytes */SIZE` status
/// queries answered 308 with `Range`). Preconditions are checked when a
/// session starts and again when its object is stored (through the store's
/// `upload`, so its call log, faults and `beforeNext` hooks apply).
extension FakeStorageServer {
  struct UploadSession {
    var name: String
    var attributes: ObjectAttributes
    var ifGenerationMatch: Int64?
    var size: Int64?
    var data: [UInt8] = []
    /// The stored object, once the last byte arrived.
    var stored: ObjectMetadata?
    /// The commit of the complete bytes, once begun: a request that arrives
    /// meanwhile (a status query after the client gave up waiting) gets its
    /// answer, as the service's does, instead of committing a second time.
    var commit: Task<ObjectMetadata, any Error>?
  }

  static let chunkGranularity = 256 << 10

  /// Bytes the newest open session for `name` holds; nil without one.
  public func sessionBytes(for name: String) -> Int64? {
    state.withLock { s in
      s.sessions.filter { $0.value.name == name && $0.value.stored == nil }.max { $0.key < $1.key }
        .map { Int64($0.value.data.count) }
    }
  }

  /// Forgets every upload session, as the service does after a week (or a
  /// restart would): their URIs then answer 404.
  public func dropSessions() { state.withLock { $0.sessions.removeAll() } }

  func startUpload(query: [String: String], headers: HTTPHeaders, body: [UInt8]) async throws -> Response {
    let precondition = try Self.int64(query, "ifGenerationMatch")
    switch query["uploadType"] ?? "" {
    case "multipart":
      var (metadata, media, mediaType) = try Self.multipart(
        body, contentType: headers.first(name: "Content-Type"))
      if takeCorruption(\.uploads) { media = Self.flipped(media) }
      try Self.checkDeclared(Self.declaredCRC32C(metadata), media: media)
      var (name, attributes) = try Self.objectResource(metadata)
      name = name ?? query["name"]
      guard let name, !name.isEmpty else { throw HTTPError(400, "Required object name.", reason: "required") }
      // Google's testbench refuses a disagreement; the service would have to pick one.
      if let declared = attributes.contentType, let mediaType, declared != mediaType {
        throw HTTPError(
          400,
          "Content-Type of the media part (\(mediaType)) differs from the metadata's contentType (\(declared)).",
          reason: "invalid")
      }
      attributes.contentType = attributes.contentType ?? mediaType ?? "application/octet-stream"
      let meta = try await store.upload(
        name, from: BytesSource(media), attributes: attributes, ifGenerationMatch: precondition)
      return .json(200, Resources.object(meta, endpoint: endpoint))
    case "media":
      guard let name = query["name"], !name.isEmpty else {
        throw HTTPError(400, "Required object name.", reason: "required")
      }
      var attributes = ObjectAttributes()
      attributes.contentType = headers.first(name: "Content-Type") ?? "application/octet-stream"
      let meta = try await store.upload(
        name, from: BytesSource(body), attributes: attributes, ifGenerationMatch: precondition)
      return .json(200, Resources.object(meta, endpoint: endpoint))
    case "resumable":
      var (name, attributes) = try Self.objectResource(body)
      name = name ?? query["name"]
      guard let name, !name.isEmpty else { throw HTTPError(400, "Required object name.", reason: "required") }
      attributes.contentType =
        attributes.contentType ?? headers.first(name: "X-Upload-Content-Type") ?? "application/octet-stream"
      try InMemoryObjectStore.checkCustomLimits(attributes.custom)
      if let precondition, precondition != (store.object(name)?.generation ?? 0) {
        throw StorageError.preconditionFailed
      }
      let size = headers.first(name: "X-Upload-Content-Length").flatMap { Int64($0) }
      let id = state.withLock { s in
        let id = String(format: "session-%06d", s.nextSession)
        s.nextSession += 1
        s.sessions[id] = UploadSession(
          name: name, attributes: attributes, ifGenerationMatch: precondition, size: size)
        return id
      }
      // Like the service, the URI names this host (as the client reached it) and the session.
      let host = headers.first(name: "Host") ?? "127.0.0.1:\(port)"
      let location =
        "http://\(host)/upload/storage/v1/b/\(URLText.encode(bucket))/o?uploadType=resumable&upload_id=\(id)"
      return Response(status: 200, headers: [("Location", location)], body: [])
    default:
      throw HTTPError(400, "Invalid uploadType.", reason: "invalidParameter")
    }
  }

  /// A chunk (`Content-Range: bytes FIRST-LAST/SIZE`) or a status query (`bytes */SIZE`).
  func putToSession(
    query: [String: String], headers: HTTPHeaders, body: [UInt8], _ modifier: ScriptedResponse?
  )
    async throws -> Response
  {
    guard let id = query["upload_id"], var session = state.withLock({ $0.sessions[id] }) else {
      throw HTTPError(404, "No such upload session.", reason: "notFound")
    }
    if let stored = session.stored { return .json(200, Resources.object(stored, endpoint: endpoint)) }
    guard let range = SessionRange(headers.first(name: "Content-Range")) else {
      throw HTTPError(400, "Invalid Content-Range.", reason: "invalid")
    }
    if let total = range.size {
      if let known = session.size, known != total {
        throw HTTPError(400, "The total size changed from \(known) to \(total).", reason: "invalid")
      }
      session.size = total
    }
    if let (first, last) = range.bytes {
      guard Int64(body.count) == last - first + 1 else {
        throw HTTPError(
          400, "The body has \(body.count) bytes; Content-Range says \(last - first + 1).", reason: "invalid")
      }
      guard first <= Int64(session.data.count) else {
        throw HTTPError(
          400, "Chunk starts at \(first) but the session holds \(session.data.count) bytes.",
          reason: "invalid")
      }
      let isLast = session.size.map { last + 1 == $0 } ?? false
      if let size = session.size, last + 1 > size {
        throw HTTPError(400, "Chunk ends past the declared size \(size).", reason: "invalid")
      }
      guard isLast || body.count % Self.chunkGranularity == 0 else {
        throw HTTPError(
          400, "Chunk of \(body.count) bytes: chunks but the last must be multiples of 262144 bytes.",
          reason: "invalid")
      }
      var taken = takeCorruption(\.chunks) ? Self.flipped(body) : body
      if case .persistPrefix(let count)? = modifier { taken = Array(taken.prefix(count)) }
      let overlap = Int64(session.data.count) - first
      if overlap < Int64(taken.count) { session.data += taken[Int(overlap)...] }
    }
    state.withLock { s in
      session.commit = s.sessions[id]?.commit  // one begun since this request read the session
      s.sessions[id] = session
    }
    if case .persistPrefix? = modifier { return .json(503, "{}") }
    guard let size = session.size, Int64(session.data.count) == size else {
      let held = session.data.count
      return Response(status: 308, headers: held == 0 ? [] : [("Range", "bytes=0-\(held - 1)")], body: [])
    }
    // The last request may declare the whole object's crc32c (`X-Goog-Hash`):
    // held bytes that do not match end the session, and nothing is stored.
    if session.commit == nil, let declared = Self.declaredHash(headers, "crc32c") {
      do {
        try Self.checkDeclared(declared, media: session.data)
      } catch {
        _ = state.withLock { $0.sessions.removeValue(forKey: id) }
        throw error
      }
    }
    let complete = session
    let commit = state.withLock { s -> Task<ObjectMetadata, any Error> in
      if let begun = s.sessions[id]?.commit { return begun }
      let task = Task { [store] in
        try await store.upload(
          complete.name, from: BytesSource(complete.data), attributes: complete.attributes,
          ifGenerationMatch: complete.ifGenerationMatch)
      }
      s.sessions[id]?.commit = task
      return task
    }
    do {
      let meta = try await commit.value
      state.withLock { $0.sessions[id]?.stored = meta }
      return .json(200, Resources.object(meta, endpoint: endpoint))
    } catch StorageError.preconditionFailed {
      // The session is over: nothing was stored.
      _ = state.withLock { $0.sessions.removeValue(forKey: id) }
      throw StorageError.preconditionFailed
    }
  }

  // MARK: Parsing

  static func int64(_ query: [String: String], _ key: String) throws -> Int64? {
    guard let text = query[key] else { return nil }
    guard let value = Int64(text) else {
      throw HTTPError(400, "Invalid value for \(key): \(text)", reason: "invalidParameter")
    }
    return value
  }

  /// The name (if any) and writable properties of an object resource in JSON.
  /// A hash an `X-Goog-Hash` header declares (`crc32c=…,md5=…`), if any.
  static func declaredHash(_ headers: HTTPHeaders, _ kind: String) -> String? {
    for value in headers["X-Goog-Hash"] {
      for item in value.split(separator: ",") {
        let item = item.drop { $0 == " " }
        if item.hasPrefix(kind + "=") { return String(item.dropFirst(kind.count + 1)) }
      }
    }
    return nil
  }

  /// The `crc32c` an object resource declares, if any.
  static func declaredCRC32C(_ body: [UInt8]) -> String? {
    guard let json = try? JSONSerialization.jsonObject(with: Data(body)), let fields = json as? [String: Any]
    else { return nil }
    return fields["crc32c"] as? String
  }

  static func objectResource(_ body: [UInt8]) throws -> (String?, ObjectAttributes) {
    guard !body.isEmpty else { return (nil, ObjectAttributes()) }
    guard let json = try? JSONSerialization.jsonObject(with: Data(body)), let fields = json as? [String: Any]
    else {
      throw HTTPError(400, "Parse Error", reason: "parseError")
    }
    func string(_ value: Any, _ field: String) throws -> String {
      guard let text = value as? String, !(value is NSNumber) else {
        throw HTTPError(400, "Invalid value for \(field): expected a string.", reason: "invalid")
      }
      return text
    }
    var attributes = ObjectAttributes()
    for field in ObjectMetadata.WritableField.allCases {
      guard let value = fields[field.rawValue], !(value is NSNull) else { continue }
      attributes.fields[field] = try string(value, field.rawValue)
    }
    if let map = fields["metadata"], !(map is NSNull) {
      guard let map = map as? [String: Any] else {
        throw HTTPError(400, "Invalid value for metadata.", reason: "invalid")
      }
      for (key, value) in map where !(value is NSNull) {
        attributes.custom[key] = try string(value, "metadata.\(key)")
      }
    }
    let name = try fields["name"].map { try string($0, "name") }
    return (name, attributes)
  }

  /// The two parts of a `multipart/related` upload: metadata JSON, media, and the media's Content-Type.
  static func multipart(_ body: [UInt8], contentType: String?) throws -> ([UInt8], [UInt8], String?) {
    guard let contentType, contentType.lowercased().hasPrefix("multipart/related"),
      let boundaryRange = contentType.range(of: "boundary=")
    else { throw HTTPError(400, "Expected a multipart/related body with a boundary.", reason: "invalid") }
    var boundary = String(contentType[boundaryRange.upperBound...])
    if let semicolon = boundary.firstIndex(of: ";") { boundary = String(boundary[..<semicolon]) }
    boundary = boundary.trimmingCharacters(in: CharacterSet(charactersIn: "\" "))
    let delimiter = Array("--\(boundary)".utf8)
    // Parts lie between delimiters; each is CRLF, headers, CRLF CRLF, content, CRLF.
    var cuts: [Int] = []
    var i = 0
    while i + delimiter.count <= body.count {
      if body[i] == delimiter[0] && Array(body[i..<(i + delimiter.count)]) == delimiter {
        cuts.append(i)
        i += delimiter.count
      } else {
        i += 1
      }
    }
    guard cuts.count >= 3 else { throw HTTPError(400, "Expected two parts.", reason: "invalid") }
    func part(_ index: Int) throws -> (headers: String, content: [UInt8]) {
      let raw = Array(body[(cuts[index] + delimiter.count)..<cuts[index + 1]])
      let separator = Array("\r\n\r\n".utf8)
      guard
        let split = (0...(max(0, raw.count - 4))).first(where: {
          Array(raw[$0..<min($0 + 4, raw.count)]) == separator
        })
      else { throw HTTPError(400, "A part without headers.", reason: "invalid") }
      var content = Array(raw[(split + 4)...])
      if content.suffix(2) == [13, 10] { content.removeLast(2) }
      return (String(decoding: raw[..<split], as: UTF8.self), content)
    }
    let metadata = try part(0)
    let media = try part(1)
    let mediaType = media.headers.split(separator: "\r\n").first {
      $0.lowercased().hasPrefix("content-type:")
    }
    .map { $0.dropFirst("content-type:".count).trimmingCharacters(in: .whitespaces) }
    return (metadata.content, media.content, mediaType)
  }
}

/// A session PUT's `Content-Range`: `bytes FIRST-LAST/SIZE`, `bytes FIRST-LAST/*`,
/// `bytes */SIZE` or `bytes */*`.
struct SessionRange {
  var bytes: (Int64, Int64)?
  var size: Int64?

  init?(_ header: String?) {
    guard let header, header.hasPrefix("bytes ") else { return nil }
    let spec = header.dropFirst(6)
    guard let slash = spec.firstIndex(of: "/") else { return nil }
    let total = spec[spec.index(after: slash)...]
    if total != "*" {
      guard let size = Int64(total), size >= 0 else { return nil }
      self.size = size
    }
    let span = spec[..<slash]
    if span == "*" { return }
    guard let dash = span.firstIndex(of: "-"), let first = Int64(span[..<dash]),
      let last = Int64(span[span.index(after: dash)...]), first >= 0, last >= first
    else { return nil }
    bytes = (first, last)
  }
}

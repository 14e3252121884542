import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import ObjectStore

/// An HTTP/1.1 front for an ``InMemoryObjectStore`` speaking the subset of the Cloud Storage
/// JSON API the client uses, with the service's status codes and JSON error bodies.
///
/// Routes: `GET /storage/v1/b/{b}` (bucket), `GET /storage/v1/b/{b}/o` (list),
/// `GET /storage/v1/b/{b}/o/{name}` (metadata, or media with `alt=media`),
/// `GET /download/storage/v1/b/{b}/o/{name}` (media), `PATCH /storage/v1/b/{b}/o/{name}`.
/// Requests go through the store's protocol methods, so its call log, faults and latency
/// apply too. Each request is handled in this order: recorded, scripted fault (if one
/// matches), bearer check, route.
public final class FakeStorageServer: @unchecked Sendable {
  /// A request as received: `path` is raw (still percent-encoded), `query` decoded.
  public struct RecordedRequest: Sendable, CustomStringConvertible {
    public var method: String
    public var path: String
    public var query: [String: String]
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    public var kind: RequestKind
    /// The decoded object name for object routes.
    public var objectName: String?

    /// The first value of a header, case-insensitively.
    public func header(_ name: String) -> String? {
      headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    public var description: String {
      method + " " + path + (query.isEmpty ? "" : " " + query.sorted { $0.key < $1.key }.description)
    }
  }

  public enum RequestKind: Sendable, Hashable {
    case bucket, list, metadata, media, patch, other
  }

  /// A scripted answer that replaces (or delays) the normal one.
  public enum ScriptedResponse: Sendable, Equatable {
    /// An error status with the service's JSON body; `retryAfter` seconds as a header.
    case status(Int, retryAfter: Int? = nil)
    /// Close the connection without answering (with an RST where the platform allows).
    case resetConnection
    /// Wait this long, then answer normally; gives up if the client goes away first.
    case stall(Duration)
  }

  private struct FaultRule {
    var matches: @Sendable (RecordedRequest) -> Bool
    var queue: [ScriptedResponse]
  }

  private struct State {
    var requests: [RecordedRequest] = []
    var rules: [FaultRule] = []
    var requireBearerToken: String?
    var port = 0
    var group: MultiThreadedEventLoopGroup?
    var serverChannel: Channel?
    var acceptTask: Task<Void, Never>?
    var connections: [ObjectIdentifier: Channel] = [:]
  }

  public let store: InMemoryObjectStore
  private let state = Locked(State())
  /// Bodies beyond this get a 413: nothing the API takes here is that large.
  private let maxBodyBytes = 1 << 20

  public init(store: InMemoryObjectStore) {
    self.store = store
  }

  public convenience init(bucket: String) {
    self.init(store: InMemoryObjectStore(bucket: bucket))
  }

  public var bucket: String { store.bucket }

  /// The bound port; 0 before ``start()``.
  public var port: Int { state.withLock { $0.port } }

  public var endpoint: String { "http://127.0.0.1:\(port)" }

  /// When set, requests without `Authorization: Bearer <token>` get 401.
  public var requireBearerToken: String? {
    get { state.withLock { $0.requireBearerToken } }
    set { state.withLock { $0.requireBearerToken = newValue } }
  }

  /// Every request received so far, in arrival order.
  public var requests: [RecordedRequest] { state.withLock { $0.requests } }

  public func requests(_ kind: RequestKind) -> [RecordedRequest] { requests.filter { $0.kind == kind } }

  public func resetRequests() { state.withLock { $0.requests.removeAll() } }

  /// Queues scripted answers for the next requests of `kind`, one per request.
  public func injectFaults(_ responses: [ScriptedResponse], for kind: RequestKind) {
    injectFaults(responses) { $0.kind == kind }
  }

  /// Queues scripted answers for the next requests matching `predicate`, one per request.
  /// Rules are tried in the order they were added; a rule with an empty queue is skipped.
  public func injectFaults(
    _ responses: [ScriptedResponse], when predicate: @escaping @Sendable (RecordedRequest) -> Bool
  ) {
    state.withLock { $0.rules.append(FaultRule(matches: predicate, queue: responses)) }
  }

  public func clearFaults() { state.withLock { $0.rules.removeAll() } }

  // MARK: Lifecycle

  /// Binds 127.0.0.1 on a free port and starts serving.
  public func start() async throws {
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    let server: NIOAsyncChannel<NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>, Never>
    do {
      server = try await ServerBootstrap(group: group)
        .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
        .childChannelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
        .bind(host: "127.0.0.1", port: 0) { channel in
          channel.eventLoop.makeCompletedFuture {
            // Error handling answers unparseable requests with 400 and closes.
            try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
            return try NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>(
              wrappingChannelSynchronously: channel)
          }
        }
    } catch {
      try? await group.shutdownGracefully()
      throw error
    }
    let task = Task<Void, Never> {
      _ = try? await server.executeThenClose { inbound in
        await withDiscardingTaskGroup { tasks in
          do {
            for try await connection in inbound {
              tasks.addTask { await self.serve(connection) }
            }
          } catch {}
        }
      }
    }
    state.withLock { s in
      s.port = server.channel.localAddress?.port ?? 0
      s.group = group
      s.serverChannel = server.channel
      s.acceptTask = task
    }
  }

  /// Stops accepting, drops open connections (including stalled ones) and frees the threads.
  public func stop() async throws {
    let (server, task, group, connections) = state.withLock { s in
      defer {
        s.serverChannel = nil
        s.acceptTask = nil
        s.group = nil
        s.connections.removeAll()
      }
      return (s.serverChannel, s.acceptTask, s.group, Array(s.connections.values))
    }
    try? await server?.close()
    for connection in connections { try? await connection.close() }
    task?.cancel()
    await task?.value
    try await group?.shutdownGracefully()
  }

  /// Alias of ``stop()``.
  public func shutdown() async throws { try await stop() }

  // MARK: Connections

  private enum Outcome {
    case respond(Response)
    case reset
    case drop
  }

  private struct Response {
    var status: Int
    var headers: [(String, String)] = []
    var body: [UInt8] = []

    static func json(_ status: Int, _ text: String, headers: [(String, String)] = []) -> Response {
      Response(
        status: status, headers: [("Content-Type", "application/json; charset=UTF-8")] + headers,
        body: Array(text.utf8))
    }

    static func error(_ status: Int, _ message: String, reason: String, headers: [(String, String)] = [])
      -> Response
    {
      json(status, Resources.error(code: status, message: message, reason: reason), headers: headers)
    }
  }

  private func serve(_ connection: NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>) async {
    let channel = connection.channel
    let id = ObjectIdentifier(channel)
    state.withLock { $0.connections[id] = channel }
    defer { _ = state.withLock { $0.connections.removeValue(forKey: id) } }
    try? await connection.executeThenClose { inbound, outbound in
      var head: HTTPRequestHead?
      var body: [UInt8] = []
      var oversized = false
      for try await part in inbound {
        switch part {
        case .head(let h):
          head = h
          body = []
          oversized = false
        case .body(let buffer):
          if body.count + buffer.readableBytes > maxBodyBytes {
            oversized = true
          } else {
            body.append(contentsOf: buffer.readableBytesView)
          }
        case .end:
          guard let request = head else { continue }
          head = nil
          switch await handle(request, body: body, oversized: oversized, channel: channel) {
          case .respond(let response):
            try await write(response, for: request, to: outbound)
            if !request.isKeepAlive { return }
          case .reset:
            if let provider = channel as? SocketOptionProvider {
              try? await provider.setSoLinger(linger(l_onoff: 1, l_linger: 0)).get()
            }
            return
          case .drop:
            return
          }
        }
      }
    }
  }

  private func write(
    _ response: Response, for request: HTTPRequestHead,
    to outbound: NIOAsyncChannelOutboundWriter<HTTPServerResponsePart>
  ) async throws {
    var headers = HTTPHeaders(response.headers)
    headers.replaceOrAdd(name: "Content-Length", value: String(response.body.count))
    if !request.isKeepAlive { headers.replaceOrAdd(name: "Connection", value: "close") }
    let head = HTTPResponseHead(
      version: request.version, status: HTTPResponseStatus(statusCode: response.status), headers: headers)
    try await outbound.write(.head(head))
    if request.method != .HEAD && !response.body.isEmpty {
      try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: response.body))))
    }
    try await outbound.write(.end(nil))
  }

  // MARK: Requests

  private enum Route {
    case bucket(String)
    case list(String)
    case object(String, String)
    case download(String, String)
  }

  private func handle(_ head: HTTPRequestHead, body: [UInt8], oversized: Bool, channel: Channel) async
    -> Outcome
  {
    var uri = Substring(head.uri)
    // Absolute-form targets (from proxies) carry scheme and authority: keep the path.
    if uri.hasPrefix("http://") || uri.hasPrefix("https://") {
      let afterScheme = uri[uri.index(uri.firstIndex(of: ":")!, offsetBy: 3)...]
      uri = afterScheme.firstIndex(of: "/").map { afterScheme[$0...] } ?? "/"
    }
    let rawPath = uri.firstIndex(of: "?").map { uri[..<$0] } ?? uri
    let rawQuery = uri.firstIndex(of: "?").map { uri[uri.index(after: $0)...] } ?? ""
    let query = URLText.parseQuery(rawQuery)
    // An undecodable name is a 400 (after recording), an unknown path a 404.
    var malformedPath = false
    let route: Route?
    do { route = try Self.route(rawPath) } catch {
      malformedPath = true
      route = nil
    }
    let method = head.method.rawValue

    var kind = RequestKind.other
    var objectName: String?
    switch route {
    case .bucket?: kind = method == "GET" ? .bucket : .other
    case .list?: kind = method == "GET" ? .list : .other
    case .object(_, let name)?:
      objectName = name
      if method == "PATCH" {
        kind = .patch
      } else if method == "GET" {
        kind = query?["alt"] == "media" ? .media : .metadata
      }
    case .download(_, let name)?:
      objectName = name
      kind = method == "GET" ? .media : .other
    case nil: break
    }
    let record = RecordedRequest(
      method: method, path: String(rawPath), query: query ?? [:],
      headers: head.headers.map { ($0.name, $0.value) }, body: body, kind: kind, objectName: objectName)

    let scripted = state.withLock { s -> ScriptedResponse? in
      s.requests.append(record)
      for index in s.rules.indices where !s.rules[index].queue.isEmpty && s.rules[index].matches(record) {
        return s.rules[index].queue.removeFirst()
      }
      return nil
    }
    switch scripted {
    case .status(let code, let retryAfter)?:
      return .respond(Self.scriptedError(code, retryAfter: retryAfter))
    case .resetConnection?:
      return .reset
    case .stall(let duration)?:
      guard await Self.hold(duration, channel: channel) else { return .drop }
    case nil: break
    }

    if let token = requireBearerToken {
      let authorization = record.header("Authorization")
      guard authorization == "Bearer \(token)" else {
        let message =
          authorization == nil
          ? "Anonymous caller does not have storage.objects.get access to the Google Cloud Storage object."
          : "Invalid Credentials"
        return .respond(
          .error(
            401, message, reason: authorization == nil ? "required" : "authError",
            headers: [("WWW-Authenticate", "Bearer realm=\"https://accounts.google.com/\"")]))
      }
    }
    if oversized { return .respond(.error(413, "Request body too large.", reason: "uploadTooLarge")) }
    guard let query else { return .respond(.error(400, "Invalid query string.", reason: "invalid")) }
    if malformedPath { return .respond(.error(400, "Invalid object name encoding.", reason: "invalid")) }
    guard let route else {
      return .respond(.error(404, "Not Found", reason: "notFound"))
    }
    let response: Response
    do {
      switch (route, method) {
      case (.bucket(let b), "GET"):
        try checkBucket(b)
        response = .json(200, Resources.bucket(b, endpoint: endpoint))
      case (.list(let b), "GET"):
        try checkBucket(b)
        response = try await list(query)
      case (.object(let b, let name), "GET"):
        try checkBucket(b)
        switch query["alt"] ?? "json" {
        case "json": response = try await metadata(name, generation: query["generation"])
        case "media": response = try await media(name, query: query, headers: head.headers)
        default: throw HTTPError(400, "Invalid value for alt.", reason: "invalidParameter")
        }
      case (.download(let b, let name), "GET"):
        try checkBucket(b)
        response = try await media(name, query: query, headers: head.headers)
      case (.object(let b, let name), "PATCH"):
        try checkBucket(b)
        response = try await patch(name, query: query, body: body)
      default:
        response = .error(405, "Method \(method) is not allowed here.", reason: "methodNotAllowed")
      }
    } catch let error as HTTPError {
      response = .error(error.status, error.message, reason: error.reason, headers: error.headers)
    } catch let error as StorageError {
      response = Self.response(for: error, name: objectName)
    } catch {
      response = .error(500, "Internal error: \(error)", reason: "internalError")
    }
    return .respond(response)
  }

  private struct HTTPError: Error {
    var status: Int
    var message: String
    var reason: String
    var headers: [(String, String)] = []

    init(_ status: Int, _ message: String, reason: String, headers: [(String, String)] = []) {
      self.status = status
      self.message = message
      self.reason = reason
      self.headers = headers
    }
  }

  private func checkBucket(_ name: String) throws {
    guard name == bucket else {
      throw HTTPError(404, "The specified bucket does not exist.", reason: "notFound")
    }
  }

  /// Splits a raw path into a route; object names are everything after `/o/`, percent-decoded
  /// (so `%2F` and a literal `/` both mean `/`). Nil for unknown paths; throws when a bucket or
  /// object name does not decode (bad escape, not UTF-8).
  private static func route(_ rawPath: Substring) throws(HTTPError) -> Route? {
    let isDownload: Bool
    var rest: Substring
    if rawPath.hasPrefix("/storage/v1/b/") {
      isDownload = false
      rest = rawPath.dropFirst("/storage/v1/b/".count)
    } else if rawPath.hasPrefix("/download/storage/v1/b/") {
      isDownload = true
      rest = rawPath.dropFirst("/download/storage/v1/b/".count)
    } else {
      return nil
    }
    let bucketEnd = rest.firstIndex(of: "/") ?? rest.endIndex
    guard let bucket = URLText.decode(rest[..<bucketEnd], plusIsSpace: false) else { throw malformed }
    guard !bucket.isEmpty else { return nil }
    rest = rest[bucketEnd...]
    if rest.isEmpty || rest == "/" { return isDownload ? nil : .bucket(bucket) }
    if rest == "/o" || rest == "/o/" { return isDownload ? nil : .list(bucket) }
    guard rest.hasPrefix("/o/") else { return nil }
    guard let name = URLText.decode(rest.dropFirst(3), plusIsSpace: false) else { throw malformed }
    return isDownload ? .download(bucket, name) : .object(bucket, name)
  }

  private static let malformed = HTTPError(400, "Invalid path encoding.", reason: "invalid")

  private func list(_ query: [String: String]) async throws -> Response {
    var pageSize = 1000
    if let text = query["maxResults"] {
      guard let value = Int(text), value >= 0 else {
        throw HTTPError(400, "Invalid value for maxResults: \(text)", reason: "invalidParameter")
      }
      pageSize = value
    }
    let page = try await store.list(
      prefix: query["prefix"] ?? "", delimiter: query["delimiter"], pageSize: pageSize,
      pageToken: query["pageToken"].flatMap { $0.isEmpty ? nil : $0 })
    return .json(200, Resources.list(page, endpoint: endpoint))
  }

  /// With `generation=`, only that generation's metadata: the live one, or 404 (no versioning).
  private func metadata(_ name: String, generation: String?) async throws -> Response {
    let meta = try await store.metadata(of: name)
    if let generation, generation != String(meta.generation) {
      guard Int64(generation) != nil else {
        throw HTTPError(400, "Invalid value for generation: \(generation)", reason: "invalidParameter")
      }
      throw StorageError.notFound
    }
    return .json(200, Resources.object(meta, endpoint: endpoint))
  }

  private func media(_ name: String, query: [String: String], headers: HTTPHeaders) async throws -> Response {
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
    let spec = ByteRangeSpec(header: headers.first(name: "Range"))
    guard let range = spec.map({ $0.resolved(size: size) }) ?? (0..<Int64.max) else {
      throw HTTPError(
        416, "Request range not satisfiable", reason: "requestedRangeNotSatisfiable",
        headers: [("Content-Range", "bytes */\(size)")])
    }
    let bytes: [UInt8]
    do {
      bytes = Array(try await store.read(name, generation: generation, range: range).readableBytesView)
    } catch StorageError.badRequest(let message) where message.hasPrefix("416") {
      throw HTTPError(
        416, "Request range not satisfiable", reason: "requestedRangeNotSatisfiable",
        headers: [("Content-Range", "bytes */\(size)")])
    }
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

  private func patch(_ name: String, query: [String: String], body: [UInt8]) async throws -> Response {
    var precondition: Int64?
    if let text = query["ifMetagenerationMatch"] {
      guard let value = Int64(text) else {
        throw HTTPError(400, "Invalid value for ifMetagenerationMatch: \(text)", reason: "invalidParameter")
      }
      precondition = value
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
    let meta = try await store.patch(name, patch, ifMetagenerationMatch: precondition)
    return .json(200, Resources.object(meta, endpoint: endpoint))
  }

  /// JSON null removes; a string sets; anything else is a 400.
  private static func patchValue(_ value: Any, field: String) throws -> String? {
    if value is NSNull { return nil }
    // NSNumber bridges to String on some platforms only through description; reject it.
    if let text = value as? String, !(value is NSNumber) { return text }
    throw HTTPError(400, "Invalid value for \(field): expected a string.", reason: "invalid")
  }

  private static func response(for error: StorageError, name: String?) -> Response {
    switch error {
    case .notFound:
      return .error(404, name.map { "No such object: \($0)" } ?? "Not Found", reason: "notFound")
    case .preconditionFailed:
      return .error(
        412, "At least one of the pre-conditions you specified did not hold.", reason: "conditionNotMet")
    case .tooLarge(let message):
      return .error(400, message, reason: "invalid")
    case .badRequest(let message):
      return .error(400, message, reason: "invalid")
    case .accessDenied(let message):
      return .error(403, message, reason: "forbidden")
    case .unavailable(let message):
      return .error(503, message, reason: "backendError")
    case .invalidResponse(let message):
      return .error(500, message, reason: "internalError")
    case .cancelled:
      return .error(503, "Request cancelled.", reason: "backendError")
    case .unsupported(let message):
      return .error(501, message, reason: "notImplemented")
    }
  }

  private static func scriptedError(_ code: Int, retryAfter: Int?) -> Response {
    let headers = retryAfter.map { [("Retry-After", String($0))] } ?? []
    switch code {
    case 429:
      return .error(
        429, "The rate of change requests to the object exceeds the rate limit. Please reduce the rate.",
        reason: "rateLimitExceeded", headers: headers)
    case 500, 502, 503, 504:
      return .error(
        code, "We encountered an internal error. Please try again.", reason: "backendError", headers: headers)
    case 401:
      return .error(401, "Invalid Credentials", reason: "authError", headers: headers)
    case 403:
      return .error(403, "Access denied.", reason: "forbidden", headers: headers)
    case 404:
      return .error(404, "Not Found", reason: "notFound", headers: headers)
    case 412:
      return .error(
        412, "At least one of the pre-conditions you specified did not hold.", reason: "conditionNotMet",
        headers: headers)
    default:
      return .error(code, "Scripted error \(code).", reason: "scripted", headers: headers)
    }
  }

  /// Waits `duration` unless the client disconnects (or the server stops) first.
  /// Returns whether the connection is still there to answer on.
  private static func hold(_ duration: Duration, channel: Channel) async -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + duration
    while clock.now < deadline {
      if !channel.isActive || Task.isCancelled { return false }
      let step = min(Duration.milliseconds(10), deadline - clock.now)
      try? await Task.sleep(for: step)
    }
    return channel.isActive
  }
}

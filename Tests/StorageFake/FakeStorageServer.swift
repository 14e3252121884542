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
/// `GET /download/storage/v1/b/{b}/o/{name}` (media), `PATCH` and `DELETE /storage/v1/b/{b}/o/{name}`,
/// `POST /upload/storage/v1/b/{b}/o` (multipart, media, or a resumable session's start),
/// `PUT` to a session URI (chunks and status queries),
/// `POST /storage/v1/b/{b}/o/{src}/rewriteTo/b/{b}/o/{dst}`, `POST .../o/{src}/moveTo/o/{dst}`
/// and `POST .../o/{dst}/compose`.
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
    /// A multipart or media upload (one request).
    case upload
    /// The start of a resumable session.
    case uploadSession
    /// A session PUT carrying bytes.
    case uploadChunk
    /// A session PUT asking how far it got (`Content-Range: bytes */SIZE`).
    case uploadStatus
    case delete, rewrite, move
    /// `POST …/o/NAME/compose`.
    case compose
  }

  /// A scripted answer that replaces (or delays) the normal one.
  public enum ScriptedResponse: Sendable, Equatable {
    /// An error status with the service's JSON body; `retryAfter` seconds as a header.
    case status(Int, retryAfter: Int? = nil)
    /// Close the connection without answering (with an RST where the platform allows).
    case resetConnection
    /// Wait this long, then answer normally; gives up if the client goes away first.
    case stall(Duration)
    /// Do what was asked (store the chunk, the object, ...), then lose the
    /// answer: reset the connection, or answer 503.
    case answerLost(reset: Bool)
    /// For a session's chunk PUT: keep only the first `n` bytes of the chunk, then answer 503.
    case persistPrefix(Int)
    /// For a media GET: a well-formed 206 carrying only the first `n` bytes of the range asked for.
    case shortBody(Int)
    /// For a media GET: ignore Range and send the whole object with 200.
    case ignoreRange
    /// Send the head and the first `bytes` of the body, then wait `for` (or
    /// until the client goes away) before the rest: a body that stalls.
    case stallBody(after: Int, for: Duration)
    /// This answer instead of the service's, as written: for malformed ones
    /// (bad JSON, numbers out of range, a lying Content-Length, a 206 with
    /// more or fewer bytes than asked).
    case raw(RawAnswer)
  }

  /// An answer sent as given, whatever it says.
  public struct RawAnswer: Sendable, Equatable {
    public struct Header: Sendable, Equatable {
      public var name: String
      public var value: String
    }
    public var status: Int
    public var headers: [Header]
    public var body: [UInt8]
    /// Sent as Content-Length instead of the body's size (a lie); the
    /// connection closes after the answer, as a server that lied would.
    public var contentLength: String?

    public init(status: Int, headers: [(String, String)] = [], body: [UInt8], contentLength: String? = nil) {
      self.status = status
      self.headers = headers.map { Header(name: $0.0, value: $0.1) }
      self.body = body
      self.contentLength = contentLength
    }

    /// `text` as a JSON answer.
    public static func json(_ text: String, status: Int = 200, contentLength: String? = nil) -> RawAnswer {
      RawAnswer(
        status: status, headers: [("Content-Type", "application/json; charset=UTF-8")],
        body: Array(text.utf8),
        contentLength: contentLength)
    }
  }

  struct FaultRule {
    var matches: @Sendable (RecordedRequest) -> Bool
    var queue: [ScriptedResponse]
  }

  struct State {
    var requests: [RecordedRequest] = []
    var sessions: [String: UploadSession] = [:]
    var nextSession = 1
    var rewriteBytesPerCall: Int64?
    var rules: [FaultRule] = []
    var requireBearerToken: String?
    var requireUserProject: String?
    var port = 0
    var group: MultiThreadedEventLoopGroup?
    var serverChannel: Channel?
    var acceptTask: Task<Void, Never>?
    var connections: [ObjectIdentifier: Channel] = [:]
    var peakConnections = 0
    var inFlight: [RequestKind: Int] = [:]
    var peakInFlight: [RequestKind: Int] = [:]
    var corruption = Corruption()
  }

  public let store: InMemoryObjectStore
  let state = Locked(State())
  /// Bodies beyond this get a 413: nothing the API takes here is that large.
  private let maxBodyBytes = 1 << 20
  /// ... except uploads (a multipart request, a session's chunk).
  private let maxUploadBodyBytes = 64 << 20

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

  /// When set, the bucket is requester-pays: a request without `userProject` equal to this
  /// gets the service's 400 (reason `required`).
  public var requireUserProject: String? {
    get { state.withLock { $0.requireUserProject } }
    set { state.withLock { $0.requireUserProject = newValue } }
  }

  /// Every request received so far, in arrival order.
  public var requests: [RecordedRequest] { state.withLock { $0.requests } }

  public func requests(_ kind: RequestKind) -> [RecordedRequest] { requests.filter { $0.kind == kind } }

  public func resetRequests() { state.withLock { $0.requests.removeAll() } }

  /// The most client connections that were open at once.
  public var peakConnections: Int { state.withLock { $0.peakConnections } }

  /// The most requests of `kind` that were being handled at once.
  public func peakInFlight(_ kind: RequestKind) -> Int { state.withLock { $0.peakInFlight[kind] ?? 0 } }

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
    // Cancelling the accept loop while it holds connections accepted but not
    // yet handed out drops them unfinished, and NIOAsyncWriter's deinit traps
    // (swift-server/swift-http-server#137). Closed, the listener's stream ends
    // by itself once it has handed them out; the loop is cancelled only after
    // a grace period, for answers still stalled.
    if let task {
      let grace = Task {
        try? await Task.sleep(for: .seconds(2))
        task.cancel()
      }
      await task.value
      grace.cancel()
    }
    try await group?.shutdownGracefully()
  }

  /// Alias of ``stop()``.
  public func shutdown() async throws { try await stop() }

  // MARK: Connections

  enum Outcome {
    case respond(Response)
    case reset
    case drop
  }

  struct Response {
    var status: Int
    var headers: [(String, String)] = []
    var body: [UInt8] = []
    /// A Content-Length other than the body's (``RawAnswer/contentLength``).
    var declaredLength: String?
    /// A pause after this many bytes of the body (``ScriptedResponse/stallBody(after:for:)``).
    var stall: (after: Int, for: Duration)?

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
    state.withLock { s in
      s.connections[id] = channel
      s.peakConnections = max(s.peakConnections, s.connections.count)
    }
    defer { _ = state.withLock { $0.connections.removeValue(forKey: id) } }
    try? await connection.executeThenClose { inbound, outbound in
      var head: HTTPRequestHead?
      var body: [UInt8] = []
      var oversized = false
      var limit = maxBodyBytes
      for try await part in inbound {
        switch part {
        case .head(let h):
          head = h
          body = []
          oversized = false
          limit = h.uri.contains("/upload/storage/v1/") ? maxUploadBodyBytes : maxBodyBytes
        case .body(let buffer):
          if body.count + buffer.readableBytes > limit {
            oversized = true
          } else {
            body.append(contentsOf: buffer.readableBytesView)
          }
        case .end:
          guard let request = head else { continue }
          head = nil
          switch await handle(request, body: body, oversized: oversized, channel: channel) {
          case .respond(let response):
            guard try await write(response, for: request, to: outbound, channel: channel) else { return }
            if !request.isKeepAlive || response.declaredLength != nil { return }
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

  /// Whether the connection is still there after the answer.
  private func write(
    _ response: Response, for request: HTTPRequestHead,
    to outbound: NIOAsyncChannelOutboundWriter<HTTPServerResponsePart>, channel: Channel
  ) async throws -> Bool {
    var headers = HTTPHeaders(response.headers)
    headers.replaceOrAdd(
      name: "Content-Length", value: response.declaredLength ?? String(response.body.count))
    if !request.isKeepAlive || response.declaredLength != nil {
      headers.replaceOrAdd(name: "Connection", value: "close")
    }
    let head = HTTPResponseHead(
      version: request.version, status: HTTPResponseStatus(statusCode: response.status), headers: headers)
    try await outbound.write(.head(head))
    var body = response.body[...]
    if let stall = response.stall, request.method != .HEAD {
      let first = body.prefix(stall.after)
      if !first.isEmpty { try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: first)))) }
      body = body.dropFirst(first.count)
      guard await Self.hold(stall.for, channel: channel) else { return false }
    }
    if request.method != .HEAD && !body.isEmpty {
      try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: body))))
    }
    try await outbound.write(.end(nil))
    return true
  }

  // MARK: Requests

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
    do { route = try Self.route(rawPath, method: head.method) } catch {
      malformedPath = true
      route = nil
    }
    let method = head.method.rawValue

    let (kind, objectName) = Self.classify(route, method: method, query: query, headers: head.headers)
    let record = RecordedRequest(
      method: method, path: String(rawPath), query: query ?? [:],
      headers: head.headers.map { ($0.name, $0.value) }, body: body, kind: kind, objectName: objectName)

    let scripted = state.withLock { s -> ScriptedResponse? in
      s.requests.append(record)
      s.inFlight[kind, default: 0] += 1
      s.peakInFlight[kind] = max(s.peakInFlight[kind] ?? 0, s.inFlight[kind] ?? 0)
      for index in s.rules.indices where !s.rules[index].queue.isEmpty && s.rules[index].matches(record) {
        return s.rules[index].queue.removeFirst()
      }
      return nil
    }
    defer { state.withLock { $0.inFlight[kind, default: 1] -= 1 } }
    // Faults that change how the request is handled or answered, not whether.
    var modifier: ScriptedResponse?
    switch scripted {
    case .status(let code, let retryAfter)?:
      return .respond(Self.scriptedError(code, retryAfter: retryAfter))
    case .resetConnection?:
      return .reset
    case .raw(let answer)?:
      return .respond(
        Response(
          status: answer.status, headers: answer.headers.map { ($0.name, $0.value) }, body: answer.body,
          declaredLength: answer.contentLength))
    case .stall(let duration)?:
      guard await Self.hold(duration, channel: channel) else { return .drop }
    case let other?: modifier = other
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
    if let project = requireUserProject, query?["userProject"] != project {
      return .respond(
        .error(400, "Bucket is a requester pays bucket but no user project provided.", reason: "required"))
    }
    if oversized { return .respond(.error(413, "Request body too large.", reason: "uploadTooLarge")) }
    guard let query else { return .respond(.error(400, "Invalid query string.", reason: "invalid")) }
    if malformedPath { return .respond(.error(400, "Invalid object name encoding.", reason: "invalid")) }
    guard let route else {
      return .respond(.error(404, "Not Found", reason: "notFound"))
    }
    var response: Response
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
        case "media": response = try await media(name, query: query, headers: head.headers, modifier)
        default: throw HTTPError(400, "Invalid value for alt.", reason: "invalidParameter")
        }
      case (.download(let b, let name), "GET"):
        try checkBucket(b)
        response = try await media(name, query: query, headers: head.headers, modifier)
      case (.object(let b, let name), "PATCH"):
        try checkBucket(b)
        response = try await patch(name, query: query, body: body)
      case (.object(let b, let name), "DELETE"):
        try checkBucket(b)
        response = try await delete(name, query: query)
      case (.upload(let b), "POST"):
        try checkBucket(b)
        response = try await startUpload(query: query, headers: head.headers, body: body)
      case (.upload(let b), "PUT"):
        try checkBucket(b)
        response = try await putToSession(query: query, headers: head.headers, body: body, modifier)
      case (.rewrite(let sb, let source, let db, let destination), "POST"):
        try checkBucket(sb)
        try checkBucket(db)
        response = try await rewrite(source, to: destination, query: query, body: body)
      case (.move(let b, let source, let destination), "POST"):
        try checkBucket(b)
        response = try await move(source, to: destination, query: query)
      case (.compose(let b, let destination), "POST"):
        try checkBucket(b)
        response = try await compose(into: destination, query: query, body: body)
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
    switch modifier {
    case .answerLost(let reset)?:
      return reset ? .reset : .respond(Self.scriptedError(503, retryAfter: nil))
    case .persistPrefix?:
      return .respond(Self.scriptedError(503, retryAfter: nil))
    case .shortBody(let count)? where response.status == 206:
      response.shorten(to: count)
    case .stallBody(let after, let duration)?:
      response.stall = (after, duration)
    default: break
    }
    return .respond(response)
  }
}

import AsyncHTTPClient
import CloudStorage
import Foundation
import Logging
import ObjectStore
import ServiceAccess
import StorageFake
import Synchronization
import XCTest

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

// MARK: - Retry policy and client construction

extension RetryPolicy {
  /// Short values so the suite is fast: back-off 10–50 ms, 1 s per attempt, 3 s per operation.
  static func fast(attemptTimeout: Double = 1, deadline: Double = 3) -> RetryPolicy {
    var policy = RetryPolicy()
    policy.initialBackoff = 0.01
    policy.maxBackoff = 0.05
    policy.attemptTimeout = attemptTimeout
    policy.deadline = deadline
    return policy
  }
}

/// A logger that drops everything; set CST_LOG=1 to see the client's messages.
func testLogger() -> Logger {
  if ProcessInfo.processInfo.environment["CST_LOG"] != nil {
    var logger = Logger(label: "cloudstorage-tests")
    logger.logLevel = .trace
    return logger
  }
  return Logger(label: "cloudstorage-tests", factory: { _ in SwiftLogNoOpLogHandler() })
}

/// Runs `body` with a fresh ``FakeStorageServer`` on a free port and a client pointed at it;
/// the server is stopped and the HTTP client shut down whether `body` succeeds or throws.
func withFakeServer(
  bucket: String = "bkt", clientBucket: String? = nil, retry: RetryPolicy = .fast(),
  uploads: UploadPolicy = UploadPolicy(), tokens: (any AccessTokenProvider)? = nil,
  metrics: StorageMetrics = StorageMetrics(), maxConnections: Int = CloudStorageClient.defaultMaxConnections,
  limiter: RequestLimiter? = nil, _ body: (FakeStorageServer, CloudStorageClient) async throws -> Void
) async throws {
  let server = FakeStorageServer(bucket: bucket)
  try await server.start()
  let http = CloudStorageClient.makeHTTPClient(retry: retry, maxConnections: maxConnections)
  let outcome: Result<Void, any Error>
  do {
    let endpoint = try Endpoint(server.endpoint)
    let client = CloudStorageClient(
      bucket: clientBucket ?? bucket, endpoint: endpoint, http: http, tokens: tokens, retry: retry,
      uploads: uploads, logger: testLogger(), metrics: metrics, limiter: limiter)
    try await body(server, client)
    outcome = .success(())
  } catch {
    outcome = .failure(error)
  }
  try? await http.shutdown()
  try? await server.stop()
  try outcome.get()
}

/// Runs `body` with a client pointed at a ``CannedHTTPServer`` answering with `handler`.
func withCannedServer(
  bucket: String = "bkt", retry: RetryPolicy = .fast(), uploads: UploadPolicy = UploadPolicy(),
  handler: @escaping @Sendable (CannedHTTPServer.Request) -> CannedHTTPServer.Response,
  _ body: (CannedHTTPServer, CloudStorageClient) async throws -> Void
) async throws {
  let server = try CannedHTTPServer(handler: handler)
  let http = CloudStorageClient.makeHTTPClient(retry: retry)
  let outcome: Result<Void, any Error>
  do {
    let client = CloudStorageClient(
      bucket: bucket, endpoint: try Endpoint("http://127.0.0.1:\(server.port)"), http: http, tokens: nil,
      retry: retry, uploads: uploads, logger: testLogger())
    try await body(server, client)
    outcome = .success(())
  } catch {
    outcome = .failure(error)
  }
  try? await http.shutdown()
  server.stop()
  try outcome.get()
}

// MARK: - Assertions

/// The ``StorageError`` `body` throws; fails the test (and returns nil) if it returns or
/// throws anything else.
func storageError<T>(
  _ body: () async throws -> T, file: StaticString = #filePath, line: UInt = #line
) async -> StorageError? {
  do {
    let value = try await body()
    XCTFail("expected a StorageError, got \(value)", file: file, line: line)
    return nil
  } catch let error as StorageError {
    return error
  } catch {
    XCTFail("expected a StorageError, got \(type(of: error)): \(error)", file: file, line: line)
    return nil
  }
}

/// Seconds `body` took on the continuous clock.
func elapsed(_ body: () async throws -> Void) async rethrows -> Double {
  let clock = ContinuousClock()
  let start = clock.now
  try await body()
  let duration = clock.now - start
  return Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

/// Percent-encoding of a path segment or query value as RFC 3986 wants it for arbitrary data:
/// everything but the unreserved characters. Written independently of the client's.
func rfc3986Encoded(_ text: String) -> String {
  let unreserved = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".utf8)
  return text.utf8.map { unreserved.contains($0) ? String(UnicodeScalar($0)) : String(format: "%%%02X", $0) }
    .joined()
}

// MARK: - Tokens

/// An ``AccessTokenProvider`` that answers from a script and records each call's `refresh`.
actor ScriptedTokens: AccessTokenProvider {
  private let answer: @Sendable (_ call: Int, _ refresh: Bool) throws -> String
  private(set) var calls: [Bool] = []

  init(_ answer: @escaping @Sendable (_ call: Int, _ refresh: Bool) throws -> String) {
    self.answer = answer
  }

  /// Always the same token.
  init(fixed token: String) {
    self.answer = { _, _ in token }
  }

  func token(refresh: Bool) async throws -> String {
    calls.append(refresh)
    return try answer(calls.count, refresh)
  }
}

// MARK: - A tiny HTTP server with canned answers

/// A loopback HTTP/1.1 server on a plain POSIX socket and one thread, for answers the fake
/// never gives (garbage JSON, numbers for int64 fields, a server that ignores Range).
/// Every response closes the connection.
final class CannedHTTPServer: @unchecked Sendable {
  struct Request: Sendable {
    var method: String
    /// The request target as sent (path and raw query).
    var target: String
    var headers: [(name: String, value: String)]
    var body: [UInt8]

    var path: String { String(target.prefix { $0 != "?" }) }

    func header(_ name: String) -> String? {
      headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }
  }

  struct Response: Sendable {
    var status: Int
    var headers: [(String, String)]
    var body: [UInt8]
    /// With a gate: the first `before` bytes of the body are sent, the rest
    /// once the gate opens (or 10 s pass, which the gate notes).
    var gate: (gate: Gate, before: Int)?

    init(_ status: Int, headers: [(String, String)] = [], body: [UInt8]) {
      self.status = status
      self.headers = headers
      self.body = body
    }

    static func json(_ status: Int, _ text: String) -> Response {
      Response(status, headers: [("Content-Type", "application/json")], body: Array(text.utf8))
    }

    static func text(_ status: Int, _ text: String, contentType: String = "text/plain") -> Response {
      Response(status, headers: [("Content-Type", contentType)], body: Array(text.utf8))
    }
  }

  /// Holds back the rest of an answer until a test opens it.
  final class Gate: Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    private let timedOut = Mutex(false)
    func open() { semaphore.signal() }
    /// Whether the server gave up waiting for the gate.
    var wasTimedOut: Bool { timedOut.withLock { $0 } }
    fileprivate func wait() {
      if semaphore.wait(timeout: .now() + 10) == .timedOut { timedOut.withLock { $0 = true } }
    }
  }

  let port: Int
  private let listener: Int32
  private let handler: @Sendable (Request) -> Response
  private let lock = NSLock()
  private var stopping = false
  private var received: [Request] = []
  private let finished = DispatchSemaphore(value: 0)

  init(handler: @escaping @Sendable (Request) -> Response) throws {
    self.handler = handler
    let (fd, port) = try bindLoopbackSocket()
    guard listen(fd, 16) == 0 else {
      close(fd)
      throw POSIXError(.EADDRINUSE)
    }
    self.listener = fd
    self.port = port
    let thread = Thread { [self] in
      self.acceptLoop()
      self.finished.signal()
    }
    thread.start()
  }

  /// The requests answered so far, in order.
  var requests: [Request] { lock.withLock { received } }

  /// Stops accepting and waits for the serving thread to end.
  func stop() {
    let already = lock.withLock {
      defer { stopping = true }
      return stopping
    }
    guard !already else { return }
    finished.wait()
    close(listener)
  }

  private var isStopping: Bool { lock.withLock { stopping } }

  private func acceptLoop() {
    while !isStopping {
      var poller = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
      guard poll(&poller, 1, 20) > 0 else { continue }
      let connection = accept(listener, nil, nil)
      guard connection >= 0 else { continue }
      serve(connection)
      close(connection)
    }
  }

  private func serve(_ connection: Int32) {
    var data: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 8192)
    let separator: [UInt8] = Array("\r\n\r\n".utf8)
    // Read the head, then as much body as Content-Length says; give up after 2 s of silence.
    func readMore() -> Bool {
      var poller = pollfd(fd: connection, events: Int16(POLLIN), revents: 0)
      guard poll(&poller, 1, 2000) > 0 else { return false }
      let count = recv(connection, &buffer, buffer.count, 0)
      guard count > 0 else { return false }
      data.append(contentsOf: buffer[0..<count])
      return true
    }
    var headEnd: Int?
    while headEnd == nil {
      guard readMore() else { return }
      headEnd = data.indices.dropLast(3).first { Array(data[$0..<($0 + 4)]) == separator }
    }
    let head = String(decoding: data[0..<headEnd!], as: UTF8.self)
    var lines = head.components(separatedBy: "\r\n")
    let requestLine = lines.removeFirst().split(separator: " ")
    guard requestLine.count >= 2 else { return }
    let headers = lines.compactMap { line -> (name: String, value: String)? in
      guard let colon = line.firstIndex(of: ":") else { return nil }
      return (
        String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
      )
    }
    let length =
      headers.first { $0.name.lowercased() == "content-length" }.flatMap { Int($0.value) } ?? 0
    let bodyStart = headEnd! + 4
    while data.count - bodyStart < length {
      guard readMore() else { return }
    }
    let request = Request(
      method: String(requestLine[0]), target: String(requestLine[1]), headers: headers,
      body: Array(data[bodyStart..<(bodyStart + length)]))
    lock.withLock { received.append(request) }
    let response = handler(request)
    var text = "HTTP/1.1 \(response.status) Canned\r\n"
    for (name, value) in response.headers { text += "\(name): \(value)\r\n" }
    text += "Content-Length: \(response.body.count)\r\nConnection: close\r\n\r\n"
    let bytes = Array(text.utf8) + response.body
    #if canImport(Glibc)
      let noSignal = Int32(MSG_NOSIGNAL)
    #else
      let noSignal: Int32 = 0
    #endif
    var sent = 0
    let held = response.gate.map { text.utf8.count + $0.before } ?? bytes.count
    func sendBytes(upTo end: Int) -> Bool {
      while sent < end {
        let count = bytes[sent..<end].withUnsafeBytes { send(connection, $0.baseAddress, $0.count, noSignal) }
        guard count > 0 else { return false }
        sent += count
      }
      return true
    }
    guard sendBytes(upTo: min(held, bytes.count)) else { return }
    response.gate?.gate.wait()
    _ = sendBytes(upTo: bytes.count)
  }
}

/// A TCP socket bound to 127.0.0.1 on a free port, not yet listening.
func bindLoopbackSocket() throws -> (fd: Int32, port: Int) {
  #if canImport(Glibc)
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
  #else
    let fd = socket(AF_INET, SOCK_STREAM, 0)
  #endif
  guard fd >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
  var address = sockaddr_in()
  address.sin_family = sa_family_t(AF_INET)
  address.sin_port = 0
  address.sin_addr.s_addr = inet_addr("127.0.0.1")
  let bound = withUnsafePointer(to: &address) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
      bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
    }
  }
  var length = socklen_t(MemoryLayout<sockaddr_in>.size)
  let named = withUnsafeMutablePointer(to: &address) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
  }
  guard bound == 0, named == 0 else {
    close(fd)
    throw POSIXError(.EADDRINUSE)
  }
  return (fd, Int(UInt16(bigEndian: address.sin_port)))
}

/// A loopback port that is bound (so no one else can take it) but not listening: connecting
/// to it is refused.
final class RefusingPort: @unchecked Sendable {
  let port: Int
  private let fd: Int32

  init() throws {
    (fd, port) = try bindLoopbackSocket()
  }

  deinit { close(fd) }
}

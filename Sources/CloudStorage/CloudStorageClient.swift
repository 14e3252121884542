import AsyncHTTPClient
import Logging
import NIOCore
import NIOHTTP1
import ObjectStore

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

/// Supplies the bearer token for each request; nil means anonymous.
public protocol AccessTokenProvider: Sendable {
  /// A valid token; `refresh` forces a new one (after a 401).
  func token(refresh: Bool) async throws -> String
}

/// The Cloud Storage JSON API as an ``ObjectStore``: list, get, ranged media
/// reads and metadata patches, with retries for transient failures.
public final class CloudStorageClient: ObjectStore {
  public let bucket: String
  let endpoint: Endpoint
  let http: HTTPClient
  let tokens: (any AccessTokenProvider)?
  let retry: RetryPolicy
  let logger: Logger

  public init(
    bucket: String, endpoint: Endpoint, http: HTTPClient, tokens: (any AccessTokenProvider)?,
    retry: RetryPolicy = RetryPolicy(), logger: Logger
  ) {
    self.bucket = bucket
    self.endpoint = endpoint
    self.http = http
    self.tokens = tokens
    self.retry = retry
    self.logger = logger
  }

  /// An HTTP client configured for this workload: many parallel connections
  /// (lookups and read-ahead), a stall timeout, no automatic decompression.
  public static func makeHTTPClient(retry: RetryPolicy) -> HTTPClient {
    var configuration = HTTPClient.Configuration(
      timeout: .init(
        connect: .milliseconds(Int64(min(retry.attemptTimeout, 10) * 1000)),
        read: .milliseconds(Int64(retry.attemptTimeout * 1000))),
      connectionPool: .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 64))
    configuration.decompression = .disabled
    configuration.redirectConfiguration = .disallow
    return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
  }

  private var objectsPath: String { "\(endpoint)/storage/v1/b/\(bucket.percentEncoded)/o" }

  // MARK: - ObjectStore

  public func list(prefix: String, delimiter: String?, pageSize: Int, pageToken: String?) async throws
    -> ListPage
  {
    try await list(prefix, delimiter, pageSize, pageToken, nextPageToken: nil)
  }

  /// The token is picked out of the body before the page is decoded (a scan
  /// that skips the items, a fraction of the decode): a reader paging through
  /// a directory has its next request on the wire while this page is decoded.
  public func list(
    prefix: String, delimiter: String?, pageSize: Int, pageToken: String?,
    nextPageToken: @escaping @Sendable (String) -> Void
  ) async throws -> ListPage {
    try await list(prefix, delimiter, pageSize, pageToken, nextPageToken: nextPageToken)
  }

  /// Without a taker for the token, no scan for it.
  private func list(
    _ prefix: String, _ delimiter: String?, _ pageSize: Int, _ pageToken: String?,
    nextPageToken: (@Sendable (String) -> Void)?
  ) async throws -> ListPage {
    var query = [("prefix", prefix), ("maxResults", String(pageSize)), ("fields", Fields.list)]
    if let delimiter { query.append(("delimiter", delimiter)) }
    if let pageToken { query.append(("pageToken", pageToken)) }
    let body = try await send(
      .GET, url: objectsPath + queryString(query), operation: "list \(prefix)", maxBody: 64 << 20)
    if let nextPageToken, let token = ObjectList.nextPageToken(in: body), !token.isEmpty {
      nextPageToken(token)
    }
    let list = try read(body, what: "list of \(prefix)", as: ObjectList.init(reading:))
    return ListPage(
      items: try list.items.map { try $0.metadata(defaultBucket: bucket) },
      prefixes: list.prefixes,
      nextPageToken: list.nextPageToken.flatMap { $0.isEmpty ? nil : $0 })
  }

  public func metadata(of name: String) async throws -> ObjectMetadata {
    let body = try await send(
      .GET, url: "\(objectsPath)/\(name.percentEncoded)" + queryString([("fields", Fields.object)]),
      operation: "get \(name)", maxBody: 4 << 20)
    let resource = try read(body, what: "metadata of \(name)", as: ObjectResource.init(reading:))
    return try resource.metadata(defaultBucket: bucket)
  }

  public func read(_ name: String, generation: Int64, range: Range<Int64>) async throws -> ByteBuffer {
    try await read(name, generation: generation, range: range, spare: nil)
  }

  public func read(_ name: String, generation: Int64, range: Range<Int64>, reusing spare: SpareBuffer)
    async throws -> ByteBuffer
  {
    try await read(name, generation: generation, range: range, spare: spare)
  }

  private func read(_ name: String, generation: Int64, range: Range<Int64>, spare: SpareBuffer?)
    async throws -> ByteBuffer
  {
    guard !range.isEmpty else { return ByteBuffer() }
    let url =
      "\(objectsPath)/\(name.percentEncoded)"
      + queryString([("alt", "media"), ("generation", String(generation))])
    let (status, headers, body) = try await exchange(
      .GET, url: url, headers: [("Range", "bytes=\(range.lowerBound)-\(range.upperBound - 1)")],
      operation: "read \(name) \(range)", maxBody: Int(range.count) + (64 << 10), idempotent: true,
      spare: spare)
    var bytes = body
    if status == 200 {
      // The whole object came back (a server that ignores Range): take the slice.
      let lower = Int(min(range.lowerBound, Int64(bytes.readableBytes)))
      bytes.moveReaderIndex(forwardBy: lower)
    } else if let contentRange = headers.first(name: "Content-Range"),
      !contentRange.hasPrefix("bytes \(range.lowerBound)-")
    {
      throw StorageError.invalidResponse("read \(name): asked for \(range), got \(contentRange)")
    }
    if bytes.readableBytes > range.count { bytes.moveWriterIndex(to: bytes.readerIndex + Int(range.count)) }
    return bytes
  }

  public func patch(_ name: String, _ patch: MetadataPatch, ifMetagenerationMatch: Int64?) async throws
    -> ObjectMetadata
  {
    var query = [("fields", Fields.object)]
    if let ifMetagenerationMatch { query.append(("ifMetagenerationMatch", String(ifMetagenerationMatch))) }
    let json: Data
    do {
      json = try JSONEncoder().encode(PatchBody(patch: patch))
    } catch {
      throw StorageError.badRequest("could not encode patch: \(error)")
    }
    let (_, _, body) = try await exchange(
      .PATCH, url: "\(objectsPath)/\(name.percentEncoded)" + queryString(query),
      headers: [("Content-Type", "application/json")], body: Array(json), operation: "patch \(name)",
      maxBody: 4 << 20,
      // Safe to repeat only when the precondition makes a repeat a no-op.
      idempotent: ifMetagenerationMatch != nil)
    let resource = try read(body, what: "patched metadata of \(name)", as: ObjectResource.init(reading:))
    guard resource.isComplete else {
      logger.debug("patch \(name): incomplete answer; reading the metadata back")
      return try await metadata(of: name)
    }
    return try resource.metadata(defaultBucket: bucket)
  }

  // MARK: - Requests

  private func send(_ method: HTTPMethod, url: String, operation: String, maxBody: Int) async throws
    -> ByteBuffer
  {
    try await exchange(method, url: url, operation: operation, maxBody: maxBody, idempotent: true).body
  }

  /// One logical request: attempts, back-off and the overall deadline.
  private func exchange(
    _ method: HTTPMethod, url: String, headers: [(String, String)] = [], body: [UInt8]? = nil,
    operation: String, maxBody: Int, idempotent: Bool, spare: SpareBuffer? = nil
  ) async throws -> (status: Int, headers: HTTPHeaders, body: ByteBuffer) {
    let start = NIODeadline.now()
    let bound = OperationDeadline.current
    let deadline = min(start + .milliseconds(Int64(retry.deadline * 1000)), bound?.deadline ?? .distantFuture)
    var attempt = 0
    var refreshedToken = false
    // Only the attempt right after a 401 forces a refresh; later retries reuse the new token.
    var refreshNext = false
    while true {
      attempt += 1
      try checkCancelled()
      let refresh = refreshNext
      refreshNext = false
      let outcome: Outcome
      do {
        outcome = try await attemptOnce(
          method, url: url, headers: headers, body: body, deadline: deadline, maxBody: maxBody,
          refreshToken: refresh, spare: spare)
      } catch let error as StorageError {
        throw error
      } catch {
        // Cancellation surfaces here as the HTTP client's error; it is not an outage.
        if Task.isCancelled || error is CancellationError { throw StorageError.cancelled }
        outcome = .transient(describe(error), retryAfter: nil)
      }
      switch outcome {
      case .success(let status, let headers, let body):
        logger.trace("\(method) \(operation): \(status) after \(attempt) attempt(s)")
        return (status, headers, body)
      case .failure(let error):
        throw error
      case .unauthorized(let message):
        // A token may expire between its check and its use: one refresh, one retry.
        guard tokens != nil, !refreshedToken else { throw StorageError.accessDenied(message) }
        refreshedToken = true
        refreshNext = true
        continue
      case .transient(let reason, let retryAfter):
        guard idempotent else { throw StorageError.unavailable("\(operation): \(reason)") }
        let wait = retry.delay(attempt: attempt, retryAfter: retryAfter)
        let resumeAt = NIODeadline.now() + .milliseconds(Int64(wait * 1000))
        guard bound?.retries ?? true, resumeAt < deadline else {
          logger.warning("\(operation): giving up after \(attempt) attempt(s): \(reason)")
          throw StorageError.unavailable("\(operation): \(reason)")
        }
        logger.debug("\(operation): \(reason); retrying in \(Int(wait * 1000)) ms")
        do {
          try await Task.sleep(nanoseconds: UInt64(wait * 1e9))
        } catch {
          throw StorageError.cancelled
        }
      }
    }
  }

  private enum Outcome {
    case success(Int, HTTPHeaders, ByteBuffer)
    case failure(StorageError)
    case unauthorized(String)
    case transient(String, retryAfter: Double?)
  }

  private func attemptOnce(
    _ method: HTTPMethod, url: String, headers: [(String, String)], body: [UInt8]?, deadline: NIODeadline,
    maxBody: Int, refreshToken: Bool, spare: SpareBuffer?
  ) async throws -> Outcome {
    var request = HTTPClientRequest(url: url)
    request.method = method
    request.headers.add(name: "User-Agent", value: "bucketfs/\(Version.current)")
    request.headers.add(name: "Accept-Encoding", value: "gzip")  // stored bytes, as `size` counts them
    for (name, value) in headers { request.headers.add(name: name, value: value) }
    if let tokens {
      let token: String
      do {
        token = try await tokens.token(refresh: refreshToken)
      } catch let error as StorageError {
        throw error
      } catch {
        throw StorageError.accessDenied("could not get an access token: \(error)")
      }
      request.headers.add(name: "Authorization", value: "Bearer \(token)")
    }
    if let body { request.body = .bytes(ByteBuffer(bytes: body)) }

    // The client's deadline covers the response head; the body must arrive
    // by the same deadline, however slowly the server trickles it.
    let http = self.http
    let prepared = request
    let (response, payload) = try await Self.racing(deadline) {
      let response = try await http.execute(prepared, deadline: deadline, logger: nil)
      return (response, try await Self.collect(response, upTo: maxBody, into: spare?.take()))
    }
    let status = Int(response.status.code)
    switch status {
    case 200..<300:
      return .success(status, response.headers, payload)
    case 401:
      return .unauthorized(message(in: payload, status: status))
    case 403:
      return .failure(.accessDenied(message(in: payload, status: status)))
    case 404:
      return .failure(.notFound)
    case 412:
      return .failure(.preconditionFailed)
    case 400:
      let text = message(in: payload, status: status)
      let lower = text.lowercased()
      if lower.contains("metadata")
        && (lower.contains("large") || lower.contains("exceed") || lower.contains("size")
          || lower.contains("limit"))
      {
        return .failure(.tooLarge(text))
      }
      return .failure(.badRequest(text))
    case let code where RetryPolicy.isRetryable(status: code):
      let retryAfter = response.headers.first(name: "Retry-After").flatMap { Double($0) }
      return .transient("HTTP \(status)", retryAfter: retryAfter.map { min($0, retry.deadline) })
    default:
      return .failure(.invalidResponse("HTTP \(status): \(message(in: payload, status: status))"))
    }
  }

  /// Runs `work`, cancelling it at `deadline`.
  private static func racing<T: Sendable>(
    _ deadline: NIODeadline, _ work: @escaping @Sendable () async throws -> T
  ) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
      group.addTask { try await work() }
      group.addTask {
        let nanoseconds = (deadline - NIODeadline.now()).nanoseconds
        if nanoseconds > 0 { try await Task.sleep(nanoseconds: UInt64(nanoseconds)) }
        return nil
      }
      defer { group.cancelAll() }
      while let next = try await group.next() {
        if let value = next { return value }
        throw HTTPClientError.deadlineExceeded
      }
      throw CancellationError()
    }
  }

  private func checkCancelled() throws {
    if Task.isCancelled { throw StorageError.cancelled }
  }

  private func describe(_ error: any Error) -> String {
    if let error = error as? HTTPClientError { return "\(error)" }
    return String(describing: error)
  }

  /// The whole body in one buffer sized from Content-Length up front, so a
  /// large read is copied out of the socket's buffers once, never regrown;
  /// into `recycled` when that is large enough.
  private static func collect(
    _ response: HTTPClientResponse, upTo maxBody: Int, into recycled: consuming ByteBuffer?
  ) async throws -> ByteBuffer {
    let expected = response.headers.first(name: "Content-Length").flatMap(Int.init) ?? 0
    if expected > maxBody { throw NIOTooManyBytesError(maxBytes: maxBody) }
    var payload = (consume recycled) ?? ByteBuffer()
    if expected > 0 && payload.capacity >= expected {
      payload.clear()
    } else {
      payload = ByteBufferAllocator().buffer(capacity: expected)
    }
    for try await chunk in response.body {
      if payload.readableBytes + chunk.readableBytes > maxBody {
        throw NIOTooManyBytesError(maxBytes: maxBody)
      }
      payload.writeImmutableBuffer(chunk)
    }
    return payload
  }

  private func message(in body: ByteBuffer, status: Int) -> String {
    if let decoded = try? JSONDecoder().decode(ErrorBody.self, from: Data(body.readableBytesView)),
      let message = decoded.error?.message
    {
      return message
    }
    let text = String(decoding: body.readableBytesView.prefix(300), as: UTF8.self)
    return text.isEmpty ? "HTTP \(status)" : text
  }

  private func read<T>(_ body: ByteBuffer, what: String, as make: (inout JSONReader) throws -> T) throws -> T
  {
    do {
      return try body.withUnsafeReadableBytes { try JSONReader.read($0, make) }
    } catch {
      logger.error("unparseable \(what): \(error)")
      throw StorageError.invalidResponse("unparseable \(what)")
    }
  }

  private func queryString(_ items: [(String, String)]) -> String {
    "?" + items.map { "\($0.0.percentEncoded)=\($0.1.percentEncoded)" }.joined(separator: "&")
  }
}

public enum Version {
  public static let current = "0.1.0"
}

import AsyncHTTPClient
import Logging
import NIOCore
import NIOHTTP1
import ObjectStore
import ServiceAccess
import Synchronization
import TLSTrust

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

/// The Cloud Storage JSON API as an ``ObjectStore``: list, get, ranged media
/// reads, metadata patches, uploads (large ones as composed parts), deletes,
/// rewrites and moves, with
/// retries for transient failures.
public final class CloudStorageClient: ObjectStore {
  public let bucket: String
  let endpoint: Endpoint
  let http: HTTPClient
  let tokens: (any AccessTokenProvider)?
  let retry: RetryPolicy
  let uploads: UploadPolicy
  let logger: Logger
  let metrics: StorageMetrics
  /// `bucketfs/VERSION`, with the operator's `--app-name` after it: ``Version/userAgent(appName:)``.
  let userAgent: String
  /// `--max-requests-per-second`, `--max-bytes-per-second`: every attempt waits its turn here.
  let limiter: RequestLimiter?
  /// Set once the service has said this bucket cannot move objects.
  let moveUnsupported = Mutex<String?>(nil)
  /// Set once parts of a composite upload were refused (403): uploads then go up in one stream.
  let compositeRefused = Mutex<String?>(nil)
  /// The billing project sent as `userProject` on every request (`--billing-project`).
  let userProject: String?
  /// Set once a requester-pays refusal was logged.
  let requesterPaysLogged = Mutex(false)
  /// TLS failures seen, by host: each logged once, its cause looked for once a minute at most.
  let tlsFailures = Mutex<[String: (failure: TLSFailure, at: NIODeadline)]>([:])

  public init(
    bucket: String, endpoint: Endpoint, http: HTTPClient, tokens: (any AccessTokenProvider)?,
    retry: RetryPolicy = RetryPolicy(), uploads: UploadPolicy = UploadPolicy(), logger: Logger,
    metrics: StorageMetrics = StorageMetrics(), userProject: String? = nil, appName: String? = nil,
    limiter: RequestLimiter? = nil
  ) {
    self.userProject = userProject
    self.limiter = limiter?.isLimiting == true ? limiter : nil
    self.userAgent = Version.userAgent(appName: appName)
    self.bucket = bucket
    self.endpoint = endpoint
    self.http = http
    self.tokens = tokens
    self.retry = retry
    self.uploads = uploads
    self.logger = logger
    self.metrics = metrics
  }

  /// `--max-connections`' default.
  public static let defaultMaxConnections = 64

  /// An HTTP client configured for this workload: up to `maxConnections`
  /// parallel connections per host (lookups and read-ahead), a stall
  /// timeout, no automatic decompression.
  /// HTTP/1.1 only: with HTTP/2 (which TLS would negotiate) the parallel
  /// ranged GETs of a reader would share one TCP connection and its one
  /// congestion window, the limit they exist to get past (gcsfuse defaults
  /// to HTTP/1.1 for the same reason).
  ///
  /// TLS: verified against `trust` (``CertificateTrust``: `--ca-file`, the
  /// environment or the system store; nil: the system store), for the service and the token
  /// endpoints alike. A failed connection fails its requests at once, so a
  /// refused certificate is seen in milliseconds, not after the connect
  /// timeout; the client's own retries (``RetryPolicy``) take over the
  /// connection's.
  ///
  /// The pool's "soft" limit is passed only by overflow connections, which
  /// it opens for requests bound to one event loop; the async `execute` this
  /// client sends with binds none, so no more than `maxConnections` are
  /// open to a host at once. A request beyond them waits in the pool's queue
  /// for a free one, under its deadline, and leaves it when its task is
  /// cancelled (an interrupted read).
  public static func makeHTTPClient(
    retry: RetryPolicy, trust: CertificateTrust? = nil, maxConnections: Int = defaultMaxConnections
  ) -> HTTPClient {
    var configuration = HTTPClient.Configuration(
      timeout: .init(
        connect: .milliseconds(Int64(min(retry.attemptTimeout, 10) * 1000)),
        read: .milliseconds(Int64(retry.attemptTimeout * 1000))),
      connectionPool: .init(
        idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: maxConnections))
    configuration.decompression = .disabled
    configuration.redirectConfiguration = .disallow
    configuration.httpVersion = .http1Only
    configuration.tlsConfiguration = trust?.configuration
    configuration.connectionPool.retryConnectionEstablishment = false
    return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
  }

  var objectsPath: String { "\(endpoint)/storage/v1/b/\(bucket.percentEncoded)/o" }

  /// Where an upload of `type` (multipart, resumable) starts, answering with the object's fields.
  func uploadURL(_ type: String, ifGenerationMatch: Int64?) -> String {
    var query = [("uploadType", type)]
    if let ifGenerationMatch { query.append(("ifGenerationMatch", String(ifGenerationMatch))) }
    query.append(("fields", Fields.object))
    return "\(endpoint)/upload/storage/v1/b/\(bucket.percentEncoded)/o" + queryString(query)
  }

  // MARK: - ObjectStore

  /// With a taker for the next page's token, the token is picked out of the
  /// body before the page is decoded (a scan that skips the items, a fraction
  /// of the decode): a reader paging through a directory has its next request
  /// on the wire while this page is decoded. Without one, no scan for it.
  public func list(_ request: ListRequest) async throws -> ListPage {
    let prefix = request.prefix
    let pageToken = request.pageToken
    var query = [("prefix", prefix), ("maxResults", String(request.pageSize)), ("fields", Fields.list)]
    if let delimiter = request.delimiter {
      query.append(("delimiter", delimiter))
      // The placeholders of subdirectories come in `items` too, with their metadata.
      if request.includeTrailingDelimiter { query.append(("includeTrailingDelimiter", "true")) }
    }
    if let pageToken { query.append(("pageToken", pageToken)) }
    if let endOffset = request.endOffset { query.append(("endOffset", endOffset)) }
    var exchange = StorageRequest(
      method: .GET, kind: .list, url: objectsPath + queryString(query), operation: "list \(prefix)",
      maxBody: 64 << 20, idempotent: true)
    // Handed over once: from the answer's first bytes when it leads, else once all is in.
    let handed = Atomic<Bool>(false)
    let hand: @Sendable (String?) -> Void = { token in
      guard let taker = request.onNextPageToken, let token, !token.isEmpty, token != pageToken,
        !handed.exchange(true, ordering: .relaxed)
      else { return }
      taker(token)
    }
    if request.onNextPageToken != nil {
      exchange.onHead = { head in
        switch ObjectList.leadingNextPageToken(in: head) {
        case .found(let token):
          hand(token)
          return true
        case .notFirst: return true
        case .incomplete: return false
        }
      }
    }
    let body = try await self.exchange(exchange).body
    if request.onNextPageToken != nil, !handed.load(ordering: .relaxed) {
      hand(ObjectList.nextPageToken(in: body))
    }
    let list = try read(body, what: "list of \(prefix)", as: ObjectList.init(reading:))
    if let pageToken, list.nextPageToken == pageToken {
      // Followed, it would list the same page forever.
      throw StorageError.invalidResponse("list \(prefix): the next page token repeats")
    }
    return ListPage(
      items: try list.items.map { try $0.metadata(defaultBucket: bucket) },
      prefixes: list.prefixes,
      nextPageToken: list.nextPageToken.flatMap { $0.isEmpty ? nil : $0 })
  }

  public func metadata(of name: String) async throws -> ObjectMetadata {
    let body = try await send(
      .GET, .get, url: "\(objectsPath)/\(name.percentEncoded)" + queryString([("fields", Fields.object)]),
      operation: "get \(name)", maxBody: 4 << 20)
    let resource = try read(body, what: "metadata of \(name)", as: ObjectResource.init(reading:))
    return try resource.metadata(defaultBucket: bucket)
  }

  public func read(_ name: String, generation: Int64, range: Range<Int64>, reusing spare: SpareBuffer?)
    async throws -> ByteBuffer
  {
    guard !range.isEmpty else { return ByteBuffer() }
    let url =
      "\(objectsPath)/\(name.percentEncoded)"
      + queryString([("alt", "media"), ("generation", String(generation))])
    let (status, headers, body) = try await exchange(
      StorageRequest(
        method: .GET, kind: .download, url: url,
        headers: [("Range", "bytes=\(range.lowerBound)-\(range.upperBound - 1)")],
        operation: "read \(name) \(range)", maxBody: Int(range.count) + (64 << 10), idempotent: true,
        validate: { [self] status, headers, body in
          Self.shortRead(status, headers, body, asked: range)
            ?? corruption(status, headers, body, asked: range)
        },
        window: range, spare: spare, sums: spare?.sums.flatMap { $0.range == range ? $0 : nil }))
    var bytes = body
    if status == 206 {
      // Without a usable Content-Range a short answer could not be told from the object's end.
      guard let contentRange = ContentRange(headers.first(name: "Content-Range")) else {
        let header = headers.first(name: "Content-Range") ?? "none"
        throw StorageError.invalidResponse("read \(name) \(range): a 206 answer with Content-Range \(header)")
      }
      if contentRange.first != range.lowerBound {
        throw StorageError.invalidResponse("read \(name): asked for \(range), got \(contentRange.text)")
      }
    }
    if bytes.readableBytes > range.count { bytes.moveWriterIndex(to: bytes.readerIndex + Int(range.count)) }
    return bytes
  }

  /// Why a 206 answer is short of what was asked (and not at the object's
  /// end), or nil: the kernel would take a short reply as end of file.
  static func shortRead(_ status: Int, _ headers: HTTPHeaders, _ body: ByteBuffer, asked range: Range<Int64>)
    -> String?
  {
    guard status == 206, let contentRange = ContentRange(headers.first(name: "Content-Range")),
      contentRange.first == range.lowerBound
    else { return nil }
    let end = min(range.upperBound, contentRange.size ?? range.upperBound)
    let expected = max(0, end - range.lowerBound)
    let got = Int64(body.readableBytes)
    guard got < expected else { return nil }
    return "short answer: \(got) of \(expected) bytes at \(range.lowerBound) (\(contentRange.text))"
  }

  public func patch(
    _ name: String, _ patch: MetadataPatch, ifGenerationMatch: Int64?, ifMetagenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    var query = [("fields", Fields.object)]
    if let ifGenerationMatch { query.append(("ifGenerationMatch", String(ifGenerationMatch))) }
    if let ifMetagenerationMatch { query.append(("ifMetagenerationMatch", String(ifMetagenerationMatch))) }
    let json: Data
    do {
      json = try JSONEncoder().encode(PatchBody(patch: patch))
    } catch {
      throw StorageError.badRequest("could not encode patch: \(error)")
    }
    let (_, _, body) = try await exchange(
      StorageRequest(
        method: .PATCH, kind: .patch, url: "\(objectsPath)/\(name.percentEncoded)" + queryString(query),
        headers: [("Content-Type", "application/json")], body: .bytes(ByteBuffer(bytes: json)),
        operation: "patch \(name)",
        maxBody: 4 << 20,
        // Safe to repeat only when the precondition makes a repeat a no-op.
        idempotent: ifMetagenerationMatch != nil))
    let resource = try read(body, what: "patched metadata of \(name)", as: ObjectResource.init(reading:))
    guard resource.isComplete else {
      logger.debug("patch \(name): incomplete answer; reading the metadata back")
      return try await metadata(of: name)
    }
    return try resource.metadata(defaultBucket: bucket)
  }
}

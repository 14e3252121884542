import AsyncHTTPClient
import NIOCore
import NIOHTTP1
import NIOPosix
import ObjectStore
import ServiceAccess
import Tracing

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

// One logical request: attempts with back-off inside a deadline, token
// refresh after a 401, statuses mapped to StorageError, bodies collected.
extension CloudStorageClient {

  func send(_ method: HTTPMethod, _ kind: StorageRequestKind, url: String, operation: String, maxBody: Int)
    async throws -> ByteBuffer
  {
    try await exchange(
      StorageRequest(
        method: method, kind: kind, url: url, operation: operation, maxBody: maxBody, idempotent: true)
    ).body
  }

  /// One logical request: attempts, back-off and the overall deadline. Each
  /// attempt is counted under the request's kind (``StorageMetrics``). The
  /// request is one client span (`GET download`, …), a child of the task's
  /// current span (a FUSE operation's), no-op unless a tracer is bootstrapped.
  func exchange(_ request: StorageRequest) async throws -> (
    status: Int, headers: HTTPHeaders, body: ByteBuffer
  ) {
    let span = startSpan("\(request.method.rawValue) \(request.kind.rawValue)", ofKind: .client)
    var tally = AttemptTally()
    defer { span.end() }
    do {
      let answer = try await ServiceContext.withValue(span.context) {
        try await sendAttempts(request, tally: &tally)
      }
      span.record(request, tally, received: answer.body.readableBytes)
      return answer
    } catch {
      span.record(request, tally, received: nil)
      span.recordError(error)
      // A missing object or a failed precondition is an answer; the rest are failures.
      let answer = (error as? StorageError).map { $0 == .notFound || $0 == .preconditionFailed } ?? false
      if !answer { span.setStatus(SpanStatus(code: .error, message: String(describing: error))) }
      throw error
    }
  }

  /// ``exchange(_:)``'s attempts, noting in `tally` how many and the last status.
  private func sendAttempts(_ request: StorageRequest, tally: inout AttemptTally) async throws -> (
    status: Int, headers: HTTPHeaders, body: ByteBuffer
  ) {
    // A caller's bound (one user-visible read, OperationDeadline) can only shorten it.
    let bound = OperationDeadline.current
    let deadline = min(
      request.deadline ?? NIODeadline.now() + .milliseconds(Int64(retry.deadline * 1000)),
      bound?.deadline ?? .distantFuture)
    var attempt = 0
    var reachedBefore = false
    var refreshedToken = false
    // Only the attempt right after a 401 forces a refresh; later retries reuse the new token.
    var refreshNext = false
    while true {
      attempt += 1
      tally.attempts = attempt
      try checkCancelled()
      let refresh = refreshNext
      refreshNext = false
      var outcome: Outcome
      var unsent = false
      do {
        if let limiter {
          // Bytes as known before sending: the body, and the range a download asks for.
          try await limiter.admit(
            byteCount: request.sending + Int(request.window?.count ?? 0),
            deadline: Double(deadline.uptimeNanoseconds) / 1e9, operation: request.operation)
        }
        let slowest =
          NIODeadline.now()
          + .milliseconds(Int64((retry.attemptTimeout + Double(request.sending) / 65536) * 1000))
        outcome = try await attemptOnce(
          request, deadline: request.sending > 0 ? max(deadline, slowest) : deadline, refreshToken: refresh,
          accepting: reachedBefore ? request.accepting.union(request.settledAfterRetry) : request.accepting,
          status: &tally.status)
      } catch let error as StorageError {
        throw error
      } catch let refusal as ChecksumRefusal where request.refusalIsFinal {
        throw refusal
      } catch {
        // Cancellation surfaces here as the HTTP client's error; it is not an outage.
        if Task.isCancelled || error is CancellationError { throw StorageError.cancelled }
        // A refused certificate or a failed handshake: no retry mends it.
        if let failure = await tlsFailure(error) { throw StorageError.tlsFailure(failure.description) }
        outcome = .transient(describe(error), retryAfter: nil)
        // Nothing was sent or nothing stored: even a request that is not idempotent may go again.
        if Self.neverSent(error) { unsent = true }
      }
      if case .success(let status, let headers, let body) = outcome,
        let reason = request.validate?(status, headers, body)
      {
        outcome = .transient(reason, retryAfter: nil)
      }
      switch outcome {
      case .success(let status, let headers, let body):
        logger.trace("\(request.method) \(request.operation): \(status) after \(attempt) attempt(s)")
        // A download's range was counted before sending; any other answer's size is known only now.
        if request.window == nil { limiter?.charge(byteCount: body.readableBytes) }
        return (status, headers, body)
      case .failure(let error):
        throw error
      case .unauthorized(let message):
        // A token may expire between its check and its use: one refresh, one retry.
        guard tokens != nil, !refreshedToken else { throw StorageError.accessDenied(message) }
        refreshedToken = true
        refreshNext = true
        metrics.retried(request.kind)
        continue
      case .transient(let reason, let retryAfter):
        guard request.idempotent || unsent else {
          throw StorageError.unavailable("\(request.operation): \(reason)")
        }
        reachedBefore = true
        let wait = retry.delay(attempt: attempt, retryAfter: retryAfter)
        let resumeAt = NIODeadline.now() + .milliseconds(Int64(wait * 1000))
        guard bound?.retries ?? true, resumeAt < deadline else {
          logger.warning("\(request.operation): giving up after \(attempt) attempt(s): \(reason)")
          throw StorageError.unavailable("\(request.operation): \(reason)")
        }
        logger.debug("\(request.operation): \(reason); retrying in \(Int(wait * 1000)) ms")
        do {
          try await Task.sleep(nanoseconds: UInt64(wait * 1e9))
        } catch {
          throw StorageError.cancelled
        }
        metrics.retried(request.kind)
      }
    }
  }

  enum Outcome {
    case success(Int, HTTPHeaders, ByteBuffer)
    case failure(StorageError)
    case unauthorized(String)
    case transient(String, retryAfter: Double?)
  }

  /// One attempt: `accepting` widens the request's own after an attempt that may have reached the service.
  private func attemptOnce(
    _ storageRequest: StorageRequest, deadline: NIODeadline, refreshToken: Bool, accepting: Set<Int>,
    status answered: inout Int?
  ) async throws -> Outcome {
    let kind = storageRequest.kind
    var request = HTTPClientRequest(url: billed(storageRequest.url))
    request.method = storageRequest.method
    request.headers.add(name: "User-Agent", value: userAgent)
    request.headers.add(name: "Accept-Encoding", value: "gzip")  // stored bytes, as `size` counts them
    for (name, value) in storageRequest.headers { request.headers.add(name: name, value: value) }
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
      if let project = tokens.quotaProject {
        request.headers.add(name: "x-goog-user-project", value: project)
      }
    }
    let sent: Int
    switch storageRequest.body {
    case .none: sent = 0
    case .bytes(let bytes):
      request.body = .bytes(bytes)
      sent = bytes.readableBytes
    case .streaming(let source):
      request.body = .stream(source, length: .known(Int64(source.count)))
      sent = source.count
    }

    // The client's deadline covers the response head; the body must arrive
    // by the same deadline, however slowly the server trickles it.
    let http = self.http
    let prepared = request
    // From here the request is on its way: counted whatever comes back.
    let start = ContinuousClock.now
    let head: (status: HTTPResponseStatus, headers: HTTPHeaders)
    let payload: ByteBuffer
    do {
      if case .none = storageRequest.body, storageRequest.method == .GET {
        let answer = try await collectGET(prepared, storageRequest, deadline: deadline)
        head = (answer.head.status, answer.head.headers)
        payload = answer.payload
      } else {
        let response: HTTPClientResponse
        (response, payload) = try await Self.racing(deadline) {
          let response = try await http.execute(prepared, deadline: deadline, logger: nil)
          // Awaited before the tuple is made: see Tests/ToolchainCheck (a tuple
          // literal with an await inside is miscompiled by Swift 6.3.1 at -O).
          let payload = try await Self.collect(response, upTo: storageRequest.maxBody)
          return (response, payload)
        }
        head = (response.status, response.headers)
      }
    } catch {
      metrics.attempted(kind, status: StorageMetrics.failure(error), since: start)
      throw error
    }
    let status = Int(head.status.code)
    answered = status
    metrics.attempted(kind, status: String(status), since: start)
    switch kind {
    case .download where (200..<300).contains(status): metrics.received(payload.readableBytes)
    case .upload: metrics.sent(sent)
    default: break
    }
    switch status {
    case _ where accepting.contains(status), 200..<300:
      return .success(status, head.headers, payload)
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
      if let refusal = requesterPaysRefusal(text) { return .failure(refusal) }
      if Self.isChecksumRefusal(text) {
        metrics.mismatched(.upload)
        throw ChecksumRefusal(message: text)
      }
      let lower = text.lowercased()
      if lower.contains("metadata")
        && (lower.contains("large") || lower.contains("exceed") || lower.contains("size")
          || lower.contains("limit"))
      {
        return .failure(.tooLarge(text))
      }
      return .failure(.badRequest(text))
    case let code where RetryPolicy.isRetryable(status: code):
      let retryAfter = head.headers.first(name: "Retry-After").flatMap { Double($0) }
      return .transient("HTTP \(status)", retryAfter: retryAfter.map { min($0, retry.deadline) })
    default:
      return .failure(.invalidResponse("HTTP \(status): \(message(in: payload, status: status))"))
    }
  }

  /// A GET's answer, collected on its connection's event loop (``ResponseCollector``).
  /// The client's deadline covers the whole answer, its body too.
  private func collectGET(
    _ prepared: HTTPClientRequest, _ storageRequest: StorageRequest, deadline: NIODeadline
  )
    async throws -> ResponseCollector.Answer
  {
    let request = try HTTPClient.Request(url: prepared.url, method: .GET, headers: prepared.headers)
    let collector = ResponseCollector(
      maxBody: storageRequest.maxBody, window: storageRequest.window, into: storageRequest.spare?.take(),
      sums: storageRequest.sums, head: storageRequest.onHead)
    let task = http.execute(
      request: request, delegate: collector, eventLoop: .indifferent, deadline: deadline, logger: nil)
    do {
      return try await withTaskCancellationHandler {
        try await task.futureResult.get()
      } onCancel: {
        task.cancel()
      }
    } catch is ResponseCollector.Filled {
      // The future has completed: the collector is done with its answer.
      guard let answer = collector.answer else { throw StorageError.invalidResponse("no answer") }
      return answer
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

  /// The whole answer to a request with a body (an upload's, a compose's):
  /// small, and never a range, so none of what a GET's collector does with
  /// windows, spares and sums (``ResponseCollector``).
  private static func collect(_ response: HTTPClientResponse, upTo maxBody: Int) async throws -> ByteBuffer {
    // Never negative at the allocator, whatever the header says; the body is counted as it arrives.
    let expected = max(response.headers.first(name: "Content-Length").flatMap(Int.init) ?? 0, 0)
    if expected > maxBody { throw NIOTooManyBytesError(maxBytes: maxBody) }
    var payload = ByteBufferAllocator().buffer(capacity: expected)
    for try await chunk in response.body {
      if payload.readableBytes + chunk.readableBytes > maxBody {
        throw NIOTooManyBytesError(maxBytes: maxBody)
      }
      payload.writeImmutableBuffer(chunk)
    }
    return payload
  }

  func message(in body: ByteBuffer, status: Int) -> String {
    if let decoded = try? JSONDecoder().decode(ErrorBody.self, from: Data(body.readableBytesView)),
      let message = decoded.error?.message
    {
      return message
    }
    let text = String(decoding: body.readableBytesView.prefix(300), as: UTF8.self)
    return text.isEmpty ? "HTTP \(status)" : text
  }

  func read<T>(_ body: ByteBuffer, what: String, as make: (inout JSONReader) throws -> T) throws -> T {
    do {
      return try body.withUnsafeReadableBytes { try JSONReader.read($0, make) }
    } catch {
      logger.error("unparseable \(what): \(error)")
      throw StorageError.invalidResponse("unparseable \(what)")
    }
  }

  func queryString(_ items: [(String, String)]) -> String {
    "?" + items.map { "\($0.0.percentEncoded)=\($0.1.percentEncoded)" }.joined(separator: "&")
  }
}

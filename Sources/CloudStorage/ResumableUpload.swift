import AsyncHTTPClient
import NIOCore
import NIOHTTP1
import ObjectStore

// A resumable upload session: started with the metadata and preconditions,
// then fed chunk by chunk from the source. After a transient fault the
// session is asked how much it holds and the upload goes on from exactly
// there; a session the service has forgotten (404/410) is started again.
extension CloudStorageClient {
  /// Sessions started again after the service forgot one, at most.
  static let sessionRestarts = 3

  func resumableUpload(
    _ name: String, from source: any UploadSource, attributes: ObjectAttributes, ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    var restarts = 0
    while true {
      let session = try await startSession(
        name, size: source.size, attributes: attributes, ifGenerationMatch: ifGenerationMatch)
      do {
        return try await feed(session, name: name, from: source, contentType: Self.contentType(attributes))
      } catch SessionGone.gone {
        restarts += 1
        guard restarts <= Self.sessionRestarts else {
          throw StorageError.unavailable(
            "upload \(name): the service lost the upload session \(restarts) times")
        }
        logger.warning("upload \(name): the service forgot the upload session; starting a new one")
      } catch SessionGone.refused(let refusal) {
        // The bytes the session holds are not the file's: only a new session can take the right ones.
        restarts += 1
        guard restarts <= Self.sessionRestarts else {
          throw StorageError.unavailable("upload \(name): \(refusal) (\(restarts) sessions)")
        }
        logger.warning("upload \(name): \(refusal); sending the file again in a new session")
      }
    }
  }

  private enum SessionGone: Error {
    case gone
    /// The last chunk was refused for the whole object's CRC-32C.
    case refused(ChecksumRefusal)
  }

  /// The last request of a session carries at most this much (a whole
  /// number of 256 KiB pieces), read into memory before it is sent: its
  /// headers declare the whole object's CRC-32C, known once every byte
  /// before them was read for sending and these are.
  static let lastPiece = 1 << 20

  /// Starts a session; its URI comes back in Location. Starting one stores
  /// nothing, so it is repeated after transient failures whatever the
  /// preconditions.
  private func startSession(
    _ name: String, size: Int64, attributes: ObjectAttributes, ifGenerationMatch: Int64?
  ) async throws -> String {
    let contentType = Self.contentType(attributes)
    let metadata = try Self.objectBody(name: name, attributes: attributes, contentType: contentType)
    let (_, headers, _) = try await exchange(
      StorageRequest(
        method: .POST, kind: .upload, url: uploadURL("resumable", ifGenerationMatch: ifGenerationMatch),
        headers: [
          ("Content-Type", "application/json; charset=UTF-8"), ("X-Upload-Content-Type", contentType),
          ("X-Upload-Content-Length", String(size)),
        ],
        body: .bytes(ByteBuffer(bytes: metadata)), operation: "start upload of \(name)", maxBody: 4 << 20,
        idempotent: true))
    guard let location = headers.first(name: "Location"), let session = sessionURL(location) else {
      throw StorageError.invalidResponse("start upload of \(name): no usable session URI in the answer")
    }
    return session
  }

  /// The session URI, sent to the endpoint this client talks to (the token
  /// goes nowhere else): a Location naming another host keeps only its path.
  private func sessionURL(_ location: String) -> String? {
    guard let scheme = location.firstRange(of: "://") else {
      return location.hasPrefix("/") ? "\(endpoint.scheme)://\(endpoint.authority)\(location)" : nil
    }
    let afterScheme = location[scheme.upperBound...]
    let path = afterScheme.firstIndex(of: "/").map { afterScheme[$0...] } ?? "/"
    let origin = location[..<path.startIndex]
    let ours = "\(endpoint.scheme)://\(endpoint.authority)"
    if origin.lowercased() != ours.lowercased() {
      logger.debug("upload session at \(origin); sending it to \(ours)")
    }
    return ours + path
  }

  /// Sends the source from where the session stands until the object is stored.
  /// The retry deadline runs from the last progress: a large upload may take
  /// long, but never long without the session growing.
  private func feed(_ session: String, name: String, from source: any UploadSource, contentType: String)
    async throws -> ObjectMetadata
  {
    let size = source.size
    var offset: Int64 = 0
    var progressAt = NIODeadline.now()
    var failures = 0
    let running = RunningChecksum()
    while true {
      if Task.isCancelled { throw StorageError.cancelled }
      let deadline = progressAt + .milliseconds(Int64(retry.deadline * 1000))
      var problem: String
      do {
        let state: SessionState
        if offset < size {
          state = try await sendChunk(
            session, name: name, from: source, at: offset, contentType: contentType, running: running)
        } else {
          // Every byte is there but the object was not confirmed: ask.
          state = try await askSession(session, name: name, size: size, deadline: deadline)
        }
        switch state {
        case .stored(let body):
          return try await uploadedObject(
            body, name: name, size: size, crc32c: source.crc32c ?? running.sum(of: size))
        case .gone: throw SessionGone.gone
        case .holds(let persisted):
          if persisted > offset {
            (offset, progressAt, failures) = (persisted, NIODeadline.now(), 0)
            continue
          }
          problem = "the session holds \(persisted) of \(size) bytes and took nothing more"
          offset = persisted
        }
      } catch StorageError.unavailable(let reason) {
        problem = reason  // the chunk may or may not have arrived
      }
      // Back off, then ask the session where it stands.
      failures += 1
      let wait = retry.delay(attempt: failures, retryAfter: nil)
      guard NIODeadline.now() + .milliseconds(Int64(wait * 1000)) < deadline else {
        logger.warning("upload \(name): giving up at \(offset) of \(size) bytes: \(problem)")
        throw StorageError.unavailable("upload \(name): \(problem)")
      }
      logger.debug("upload \(name): \(problem); asking the session in \(Int(wait * 1000)) ms")
      do { try await Task.sleep(nanoseconds: UInt64(wait * 1e9)) } catch { throw StorageError.cancelled }
      switch try await askSession(session, name: name, size: size, deadline: deadline) {
      case .stored(let body):
        return try await uploadedObject(
          body, name: name, size: size, crc32c: source.crc32c ?? running.sum(of: size))
      case .gone: throw SessionGone.gone
      case .holds(let persisted):
        if persisted > offset { (progressAt, failures) = (NIODeadline.now(), 0) }
        if persisted != offset {
          logger.debug("upload \(name): the session holds \(persisted) bytes; resuming there")
        }
        offset = persisted
      }
    }
  }

  /// One chunk from `offset`, streamed from the source as it is sent: an
  /// upload holds one 1 MiB piece in memory whatever the chunk size. Tried once; a transient failure is `unavailable`.
  private func sendChunk(
    _ session: String, name: String, from source: any UploadSource, at offset: Int64, contentType: String,
    running: RunningChecksum
  ) async throws -> SessionState {
    let size = source.size
    var count = Int(min(Int64(uploads.chunkSize), size - offset))
    if offset + Int64(count) == size {
      if count <= Self.lastPiece {
        return try await sendLast(
          session, name: name, from: source, at: offset, contentType: contentType, running: running)
      }
      // The end goes in a request of its own, small enough to read first.
      let granularity = UploadPolicy.chunkGranularity
      count -= count % granularity == 0 ? granularity : count % granularity
    }
    let chunk = SourceBody(source: source, offset: offset, count: count, running: running)
    let range = "bytes \(offset)-\(offset + Int64(count) - 1)/\(size)"
    let answer: (status: Int, headers: HTTPHeaders, body: ByteBuffer)
    do {
      answer = try await exchange(
        StorageRequest(
          method: .PUT, kind: .upload, url: session,
          headers: [("Content-Range", range), ("Content-Type", contentType)],
          body: .streaming(chunk),
          operation: "upload \(name) \(range)", maxBody: 4 << 20, idempotent: false,
          sending: count, accepting: [308, 404, 410]))
    } catch {
      // A local read failure is the caller's to see, not an outage to resume after.
      if let local = chunk.failure.withLockedValue({ $0 }) { throw local }
      throw error
    }
    let (status, headers, body) = answer
    return try sessionState(status, headers, body, name: name, size: size)
  }

  /// The session's last bytes, read and summed before they are sent, with
  /// the whole object's CRC-32C (`X-Goog-Hash`) when every byte before them
  /// was summed as it was sent. The service refuses a mismatch with 400;
  /// the session then holds bytes that are not the file's (one changed on
  /// the way), so the refusal ends it (``SessionGone/refused(_:)``).
  private func sendLast(
    _ session: String, name: String, from source: any UploadSource, at offset: Int64, contentType: String,
    running: RunningChecksum
  ) async throws -> SessionState {
    let size = source.size
    let count = Int(size - offset)
    var bytes = try await source.load(at: offset, count: count)
    guard bytes.readableBytes >= count else {
      throw StorageError.badRequest(
        "upload source ended at \(offset + Int64(bytes.readableBytes)) of \(size) bytes")
    }
    bytes.moveWriterIndex(to: bytes.readerIndex + count)
    running.add(bytes, at: offset)
    var headers = [("Content-Range", "bytes \(offset)-\(size - 1)/\(size)"), ("Content-Type", contentType)]
    // The source's own sum (of the bytes as written) where it has one.
    if let whole = source.crc32c ?? running.sum(of: size) {
      headers.append(("X-Goog-Hash", "crc32c=\(CRC32C.base64(whole))"))
    }
    let answer: (status: Int, headers: HTTPHeaders, body: ByteBuffer)
    do {
      answer = try await exchange(
        StorageRequest(
          method: .PUT, kind: .upload, url: session, headers: headers, body: .bytes(bytes),
          operation: "upload \(name) bytes \(offset)-\(size - 1)/\(size)", maxBody: 4 << 20,
          idempotent: false,
          sending: count, accepting: [308, 404, 410], refusalIsFinal: true))
    } catch let refusal as ChecksumRefusal {
      throw SessionGone.refused(refusal)
    }
    return try sessionState(answer.status, answer.headers, answer.body, name: name, size: size)
  }

  private enum SessionState {
    case holds(Int64)
    case stored(ByteBuffer)
    case gone
  }

  /// Asks the session how much it holds (`Content-Range: bytes */SIZE`), with
  /// retries: the question changes nothing.
  private func askSession(_ session: String, name: String, size: Int64, deadline: NIODeadline) async throws
    -> SessionState
  {
    let (status, headers, body) = try await exchange(
      StorageRequest(
        method: .PUT, kind: .upload, url: session, headers: [("Content-Range", "bytes */\(size)")],
        body: .bytes(ByteBuffer()),
        operation: "upload status of \(name)", maxBody: 4 << 20, idempotent: true, deadline: deadline,
        accepting: [308, 404, 410]))
    return try sessionState(status, headers, body, name: name, size: size)
  }

  private func sessionState(
    _ status: Int, _ headers: HTTPHeaders, _ body: ByteBuffer, name: String, size: Int64
  )
    throws -> SessionState
  {
    switch status {
    case 200, 201:
      return .stored(body)
    case 404, 410:
      return .gone
    case 308:
      guard let persisted = persistedBytes(rangeHeader: headers.first(name: "Range")), persisted <= size
      else {
        throw StorageError.invalidResponse(
          "upload \(name): the session answered Range \(headers.first(name: "Range") ?? "")")
      }
      return .holds(persisted)
    default:
      throw StorageError.invalidResponse("upload \(name): unexpected HTTP \(status) from the session")
    }
  }
}

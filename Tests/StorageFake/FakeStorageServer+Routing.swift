import Foundation
import NIOCore
import NIOHTTP1
import ObjectStore

// Routes, error answers, scripted faults.
extension FakeStorageServer {
  enum Route {
    case bucket(String)
    case list(String)
    case object(String, String)
    case download(String, String)
    case upload(String)
    /// Source bucket and name, destination bucket and name.
    case rewrite(String, String, String, String)
    /// Bucket, source, destination.
    case move(String, String, String)
    /// Bucket, destination.
    case compose(String, String)
  }

  struct HTTPError: Error {
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

  func checkBucket(_ name: String) throws {
    guard name == bucket else {
      throw HTTPError(404, "The specified bucket does not exist.", reason: "notFound")
    }
  }

  /// Splits a raw path into a route; object names are everything after `/o/`, percent-decoded
  /// (so `%2F` and a literal `/` both mean `/`). Nil for unknown paths; throws when a bucket or
  /// object name does not decode (bad escape, not UTF-8).
  static func route(_ rawPath: Substring, method: HTTPMethod) throws(HTTPError) -> Route? {
    let isDownload: Bool
    var rest: Substring
    if rawPath.hasPrefix("/upload/storage/v1/b/") {
      let tail = rawPath.dropFirst("/upload/storage/v1/b/".count)
      guard tail.hasSuffix("/o"), let bucket = URLText.decode(tail.dropLast(2), plusIsSpace: false) else {
        return nil
      }
      return bucket.isEmpty || bucket.contains("/") ? nil : .upload(bucket)
    }
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
    rest = rest.dropFirst(3)
    // A rewrite or move: the marker splits the encoded names, which hold no literal `/`.
    if method == .POST && !isDownload {
      if let marker = rest.firstRange(of: "/rewriteTo/b/") {
        let after = rest[marker.upperBound...]
        guard let slash = after.firstRange(of: "/o/"),
          let source = URLText.decode(rest[..<marker.lowerBound], plusIsSpace: false),
          let target = URLText.decode(after[..<slash.lowerBound], plusIsSpace: false),
          let destination = URLText.decode(after[slash.upperBound...], plusIsSpace: false)
        else { throw malformed }
        return .rewrite(bucket, source, target, destination)
      }
      if let marker = rest.firstRange(of: "/moveTo/o/") {
        guard let source = URLText.decode(rest[..<marker.lowerBound], plusIsSpace: false),
          let destination = URLText.decode(rest[marker.upperBound...], plusIsSpace: false)
        else { throw malformed }
        return .move(bucket, source, destination)
      }
      if rest.hasSuffix("/compose") {
        guard let destination = URLText.decode(rest.dropLast("/compose".count), plusIsSpace: false) else {
          throw malformed
        }
        return .compose(bucket, destination)
      }
    }
    guard let name = URLText.decode(rest, plusIsSpace: false) else { throw malformed }
    return isDownload ? .download(bucket, name) : .object(bucket, name)
  }

  private static let malformed = HTTPError(400, "Invalid path encoding.", reason: "invalid")

  static func response(for error: StorageError, name: String?) -> Response {
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
    case .tlsFailure(let message):
      return .error(502, message, reason: "backendError")
    case .unsupported(let message):
      // As a bucket refuses objects.move (the real answer is undocumented; see DeleteAndMove.swift).
      return .error(400, message, reason: "invalid")
    }
  }

  static func scriptedError(_ code: Int, retryAfter: Int?) -> Response {
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
  static func hold(_ duration: Duration, channel: Channel) async -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + duration
    while clock.now < deadline {
      if !channel.isActive || Task.isCancelled { return false }
      let step = min(Duration.milliseconds(10), deadline - clock.now)
      try? await Task.sleep(for: step)
    }
    return channel.isActive
  }

  /// What kind of request this is, and the object it names, for the log and fault rules.
  static func classify(_ route: Route?, method: String, query: [String: String]?, headers: HTTPHeaders)
    -> (RequestKind, String?)
  {
    var kind = RequestKind.other
    var objectName: String?
    switch route {
    case .bucket?: kind = method == "GET" ? .bucket : .other
    case .list?: kind = method == "GET" ? .list : .other
    case .object(_, let name)?:
      objectName = name
      if method == "PATCH" {
        kind = .patch
      } else if method == "DELETE" {
        kind = .delete
      } else if method == "GET" {
        kind = query?["alt"] == "media" ? .media : .metadata
      }
    case .download(_, let name)?:
      objectName = name
      kind = method == "GET" ? .media : .other
    case .upload?:
      if method == "POST" {
        kind = query?["uploadType"] == "resumable" ? .uploadSession : .upload
      } else if method == "PUT" {
        kind =
          headers.first(name: "Content-Range")?.hasPrefix("bytes */") == true
          ? .uploadStatus : .uploadChunk
      }
    case .rewrite(_, let source, _, _)?:
      objectName = source
      kind = .rewrite
    case .move(_, let source, _)?:
      objectName = source
      kind = .move
    case .compose(_, let destination)?:
      objectName = destination
      kind = .compose
    case nil: break
    }
    return (kind, objectName)
  }
}

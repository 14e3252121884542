import AsyncHTTPClient
import NIOCore
import NIOPosix
import TLSTrust

#if canImport(Glibc)
  import Glibc
#endif

// TLS failures of the endpoint: final, named, and logged once per host.
extension CloudStorageClient {
  /// `error` as a ``TLSFailure`` of this client's endpoint, or nil. Its
  /// cause is looked for (one more handshake) at most once a minute per
  /// host, and logged when it is new, so a failing mount does not flood the log.
  func tlsFailure(_ error: any Error) async -> TLSFailure? {
    guard endpoint.scheme == "https", TLSFailure.reason(of: error) != nil else { return nil }
    let host = endpoint.host
    let port = endpoint.port ?? 443
    let key = "\(host):\(port)"
    let recent = tlsFailures.withLock { known -> TLSFailure? in
      guard let seen = known[key], NIODeadline.now() - seen.at < .seconds(60) else { return nil }
      return seen.failure
    }
    if let recent { return recent }
    guard let failure = await TLSFailure.diagnose(error, host: host, port: port, group: http.eventLoopGroup)
    else { return nil }
    let isNew = tlsFailures.withLock { known -> Bool in
      let before = known[key]?.failure
      known[key] = (failure, NIODeadline.now())
      return before != failure
    }
    if isNew { logger.error("\(failure.description)") }
    return failure
  }

  /// An error of making the connection (refused, unreachable, timed out
  /// connecting): the request never left; or a checksum refusal: the
  /// service stored nothing of it.
  static func neverSent(_ error: any Error) -> Bool {
    switch error {
    case is ChecksumRefusal: return true
    case is NIOConnectionError: return true
    case let error as HTTPClientError: return error == .connectTimeout
    case let error as IOError: return [ECONNREFUSED, ENETUNREACH, EHOSTUNREACH].contains(error.errnoCode)
    default: return false
    }
  }
}

import ObjectStore
import ServiceAccess

// Requester pays: with a billing project every request names it in `userProject`, and the
// service's refusal of a request without one is recognized, whatever its kind.
extension CloudStorageClient {
  /// `url` with `userProject=P` appended when a billing project is set and the URL does not
  /// name one already (an upload session's URI may carry the one of the request that began it).
  func billed(_ url: String) -> String {
    guard let userProject else { return url }
    let query = url.firstIndex(of: "?").map { url[url.index(after: $0)...] } ?? ""
    if query.split(separator: "&").contains(where: { $0.hasPrefix("userProject=") }) { return url }
    let separator = url.contains("?") ? (url.hasSuffix("?") || url.hasSuffix("&") ? "" : "&") : "?"
    return url + separator + "userProject=" + userProject.percentEncoded
  }

  /// The service's 400 for a requester-pays bucket asked without `userProject`, as
  /// `accessDenied` (EACCES), logged once per client with the option that fixes it.
  func requesterPaysRefusal(_ message: String) -> StorageError? {
    guard StorageError.isRequesterPaysMessage(message) else { return nil }
    let first = requesterPaysLogged.withLock { logged in
      defer { logged = true }
      return !logged
    }
    if first {
      logger.error(
        "bucket \(bucket) is requester-pays: name a billing project with --billing-project (the service said: \(message))"
      )
    }
    return .accessDenied(message)
  }
}

extension StorageError {
  /// Whether this is the service's refusal to serve a requester-pays bucket without a billing
  /// project ("Bucket is a requester pays bucket but no user project provided.").
  public var isRequesterPaysRefusal: Bool {
    switch self {
    case .accessDenied(let message), .badRequest(let message): Self.isRequesterPaysMessage(message)
    default: false
    }
  }

  static func isRequesterPaysMessage(_ message: String) -> Bool {
    let lower = message.lowercased()
    return lower.contains("requester pays") && lower.contains("user project")
  }
}

import NIOCore
import NIOHTTP1
import ObjectStore

/// One logical request to the service, as ``CloudStorageClient/exchange(_:)``
/// sends it: every attempt sends the same.
struct StorageRequest: Sendable {
  enum Body: Sendable {
    case none
    case bytes(ByteBuffer)
    /// Read from the source as it is sent (an upload chunk).
    case streaming(SourceBody)
  }

  var method: HTTPMethod
  /// What each attempt is counted under (``StorageMetrics``).
  var kind: StorageRequestKind
  var url: String
  var headers: [(String, String)] = []
  var body: Body = .none
  /// What the logs and errors call it.
  var operation: String
  /// The longest answer taken.
  var maxBody: Int
  /// Safe to repeat after a transient failure (the request may have
  /// reached the service); otherwise such a failure is final.
  var idempotent: Bool
  /// When retries stop (nil: the policy's deadline from the start).
  var deadline: NIODeadline? = nil
  /// Bytes of body: an attempt may run past `deadline` for as long as they
  /// take at 64 KiB/s (a slow uplink still gets a large request through;
  /// stalls are caught by the attempt timeout).
  var sending = 0
  /// Statuses outside 2xx that are answers (a session's 308).
  var accepting: Set<Int> = []
  /// Statuses that, after an attempt that may have reached the service,
  /// mean that attempt took effect (a delete's 404).
  var settledAfterRetry: Set<Int> = []
  /// Judges an answer; a reason makes it a transient failure.
  var validate: (@Sendable (Int, HTTPHeaders, ByteBuffer) -> String?)? = nil
  // The next four are a GET's (``ResponseCollector``); a request with a body ignores them.
  /// For a ranged GET answered 200 (the whole object), the bytes kept.
  var window: Range<Int64>? = nil
  /// A buffer to read the answer into.
  var spare: SpareBuffer? = nil
  /// Pieces of the answer to sum as it arrives (a ranged read's, for its reader's check).
  var sums: ArrivalSums? = nil
  /// Shown the start of a 200 answer as it arrives, until it returns true
  /// (or 64 KiB have come): a list answer's leading page token.
  var onHead: (@Sendable (ByteBuffer) -> Bool)? = nil
  /// A checksum refusal is thrown at once (``ChecksumRefusal``), not sent
  /// again: a resumable session's last chunk, refused for the whole
  /// object's CRC-32C, would be refused again whatever it carried.
  var refusalIsFinal = false
}

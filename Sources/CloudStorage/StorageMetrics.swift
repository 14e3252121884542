import AsyncHTTPClient
import CoreMetrics

/// What a request to the service does: the `kind` label.
public enum StorageRequestKind: String, CaseIterable, Sendable {
  /// `GET …/o` (a list page).
  case list
  /// `GET …/o/NAME` (metadata).
  case get
  /// `GET …/o/NAME?alt=media` (object bytes).
  case download
  /// A multipart upload, or any request of a resumable session (start, chunk, status).
  case upload
  case patch, delete
  /// One call of `rewriteTo`.
  case copy
  /// `moveTo`.
  case move
  /// `POST …/o/NAME/compose` (a composite upload's parts into one object).
  case compose
}

/// Which way bytes whose CRC-32C did not match were going.
public enum IntegrityDirection: String, CaseIterable, Sendable {
  case upload, download
}

/// Counts the client's HTTP requests as the service sees them, every attempt
/// on its own: `bucketfs_storage_requests_total{kind,status}` (status: the
/// HTTP code, or `timeout`, `cancelled`, `error` for an attempt that got no
/// answer), `bucketfs_storage_request_duration_seconds{kind}`,
/// `bucketfs_storage_retries_total{kind}`, and the bytes of downloads and
/// uploads. Counting is an atomic add (a histogram takes its own short lock);
/// the client holds no lock while it counts.
public final class StorageMetrics: Sendable {
  private struct Series: Sendable {
    let duration: Timer
    let retries: Counter
  }

  private let factory: any MetricsFactory
  private let series: [StorageRequestKind: Series]
  private let downloaded: Counter
  private let uploaded: Counter
  private let mismatches: [IntegrityDirection: Counter]

  /// Reports to `factory`; by default the process's (a no-op unless bootstrapped).
  public init(factory: any MetricsFactory = MetricsSystem.factory) {
    self.factory = factory
    var series: [StorageRequestKind: Series] = [:]
    for kind in StorageRequestKind.allCases {
      let dimensions = [("kind", kind.rawValue)]
      series[kind] = Series(
        duration: Timer(
          label: "bucketfs_storage_request_duration_seconds", dimensions: dimensions, factory: factory),
        retries: Counter(label: "bucketfs_storage_retries_total", dimensions: dimensions, factory: factory))
    }
    self.series = series
    downloaded = Counter(label: "bucketfs_storage_bytes_downloaded_total", factory: factory)
    uploaded = Counter(label: "bucketfs_storage_bytes_uploaded_total", factory: factory)
    var mismatches: [IntegrityDirection: Counter] = [:]
    for direction in IntegrityDirection.allCases {
      mismatches[direction] = Counter(
        label: "bucketfs_storage_crc32c_mismatches_total", dimensions: [("direction", direction.rawValue)],
        factory: factory)
    }
    self.mismatches = mismatches
  }

  /// Bytes whose CRC-32C did not match: refused or stored wrong on the way
  /// up, or arrived wrong on the way down.
  func mismatched(_ direction: IntegrityDirection) {
    mismatches[direction]?.increment()
  }

  /// One attempt ended: answered with `status`, or with no answer.
  func attempted(_ kind: StorageRequestKind, status: String, since start: ContinuousClock.Instant) {
    let elapsed = ContinuousClock.now - start
    // The status is open-ended, so that series is made when needed (the backend keeps it).
    Counter(
      label: "bucketfs_storage_requests_total", dimensions: [("kind", kind.rawValue), ("status", status)],
      factory: factory
    ).increment()
    series[kind]?.duration.recordNanoseconds(
      elapsed.components.seconds * 1_000_000_000 + elapsed.components.attoseconds / 1_000_000_000)
  }

  /// Another attempt of the same request follows.
  func retried(_ kind: StorageRequestKind) {
    series[kind]?.retries.increment()
  }

  func received(_ bytes: Int) {
    if bytes > 0 { downloaded.increment(by: bytes) }
  }

  func sent(_ bytes: Int) {
    if bytes > 0 { uploaded.increment(by: bytes) }
  }

  /// The `status` of an attempt that got no answer; called in the attempt's task.
  static func failure(_ error: any Error) -> String {
    if Task.isCancelled || error is CancellationError { return "cancelled" }
    if let error = error as? HTTPClientError {
      switch error {
      case .deadlineExceeded, .readTimeout, .connectTimeout, .writeTimeout, .tlsHandshakeTimeout,
        .getConnectionFromPoolTimeout:
        return "timeout"
      case .cancelled: return "cancelled"
      default: return "error"
      }
    }
    return "error"
  }
}

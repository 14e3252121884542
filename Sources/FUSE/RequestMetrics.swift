import CFuse
import CoreMetrics

/// The requests bucketfs answers, by libfuse's names: the `op` label.
/// (Requests libfuse answers itself, such as ENOSYS for an operation not
/// implemented, never reach bucketfs and are not counted.)
public enum FUSEOperation: String, CaseIterable, Sendable {
  case lookup, forget, forgetMulti = "forget_multi", getattr, setattr, mkdir, unlink, rmdir, rename
  case open, read, write, flush, release, fsync, create
  case opendir, readdir, readdirplus, releasedir, statfs
  case setxattr, getxattr, listxattr, removexattr
  case symlink, readlink, link, mknod
}

/// Counts answered requests: `bucketfs_fuse_requests_total{op}`,
/// `bucketfs_fuse_request_duration_seconds{op}` (arrival to answer) and
/// `bucketfs_fuse_errors_total{op,errno}`. The per-operation series are made
/// once; counting is an atomic add and the histogram's own short lock, never
/// under a lock of the session or the filesystem (docs/ARCHITECTURE.md §4).
public final class RequestMetrics: Sendable {
  private struct Series: Sendable {
    let requests: Counter
    let duration: Timer
  }

  private let factory: any MetricsFactory
  private let series: [FUSEOperation: Series]

  /// Reports to `factory`; by default the process's (a no-op unless bootstrapped).
  public init(factory: any MetricsFactory = MetricsSystem.factory) {
    self.factory = factory
    var series: [FUSEOperation: Series] = [:]
    for operation in FUSEOperation.allCases {
      let dimensions = [("op", operation.rawValue)]
      series[operation] = Series(
        requests: Counter(label: "bucketfs_fuse_requests_total", dimensions: dimensions, factory: factory),
        duration: Timer(
          label: "bucketfs_fuse_request_duration_seconds", dimensions: dimensions, factory: factory))
    }
    self.series = series
  }

  /// One request answered, with `error` (0: success).
  func answered(_ arrival: Arrival, error: Int32) {
    guard let series = series[arrival.operation] else { return }
    let elapsed = ContinuousClock.now - arrival.instant
    series.requests.increment()
    series.duration.recordNanoseconds(
      elapsed.components.seconds * 1_000_000_000 + elapsed.components.attoseconds / 1_000_000_000)
    guard error != 0 else { return }
    // Rare next to requests, so made when it happens (the backend returns the existing series).
    Counter(
      label: "bucketfs_fuse_errors_total",
      dimensions: [("op", arrival.operation.rawValue), ("errno", Self.errnoName(error))], factory: factory
    ).increment()
  }

  /// `ENOENT` for 2; the number for a value glibc has no name for.
  public static func errnoName(_ code: Int32) -> String {
    cfuse_errno_name(code).map { String(cString: $0) } ?? String(code)
  }
}

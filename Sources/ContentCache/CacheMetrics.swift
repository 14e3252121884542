import CoreMetrics

/// The read cache's series: `bucketfs_read_cache_hits_total` and
/// `bucketfs_read_cache_misses_total` count read calls (a read-ahead
/// segment or a direct read) served from disk or sent to the bucket;
/// `bucketfs_read_cache_bytes` is the disk the entries use;
/// `bucketfs_read_cache_fills_dropped_total` counts reads' bytes (and
/// uploads' entries) not written to the cache because its disk work queue
/// was full.
final class CacheMetrics: Sendable {
  private let hits: Counter
  private let misses: Counter
  private let bytes: Meter
  private let drops: Counter

  init(factory: any MetricsFactory) {
    hits = Counter(label: "bucketfs_read_cache_hits_total", factory: factory)
    misses = Counter(label: "bucketfs_read_cache_misses_total", factory: factory)
    bytes = Meter(label: "bucketfs_read_cache_bytes", factory: factory)
    drops = Counter(label: "bucketfs_read_cache_fills_dropped_total", factory: factory)
  }

  func hit() { hits.increment() }
  func missed() { misses.increment() }
  func dropped() { drops.increment() }
  func stored(_ used: Int64) { bytes.set(Double(used)) }
}

import CoreMetrics
import Prometheus

/// The process's metrics in Prometheus form: a registry, and the
/// swift-metrics factory that fills it. The libraries make their counters
/// from `MetricsSystem.factory`, which is a no-op until the mount bootstraps it.
public struct MetricsRegistry: Sendable {
  let registry: PrometheusCollectorRegistry
  public let factory: any MetricsFactory

  /// Duration buckets from an answer out of memory (100 µs) to a retry
  /// deadline (60 s); the library's default starts at 5 ms, above most
  /// FUSE answers.
  public static let durationBuckets: [Duration] = [
    .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .microseconds(2500),
    .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
    .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10),
    .seconds(30), .seconds(60),
  ]

  public init() {
    let registry = PrometheusCollectorRegistry()
    var factory = PrometheusMetricsFactory(registry: registry)
    factory.defaultDurationHistogramBuckets = Self.durationBuckets
    self.registry = registry
    self.factory = factory
  }

  /// The Prometheus text exposition of every series.
  public func render() -> [UInt8] {
    registry.emitToBuffer()
  }
}

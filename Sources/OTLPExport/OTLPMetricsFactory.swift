import CoreMetrics
import Synchronization
import Tracing

/// A swift-metrics backend whose series are read out for OTLP: cumulative
/// sums for counters, gauges for meters and plain recorders, histograms for
/// timers (seconds) and aggregating recorders. The same label and
/// dimensions give back the same series, as the Prometheus backend does, so
/// the two can run side by side under one `MultiplexMetricsHandler` and show
/// the same names. Counting is an atomic add or a short lock of the one
/// series; reading takes the family table's lock, then each series' own.
public final class OTLPMetricsFactory: MetricsFactory, Sendable {
  /// The bounds, in seconds, of every timer's histogram.
  let durationBounds: [Double]
  /// When the series began counting: the start of every cumulative point.
  let startNanoseconds: UInt64
  private let families = Mutex<[String: Family]>([:])

  public init(
    durationBounds: [Duration], startNanoseconds: UInt64 = DefaultTracerClock.now.nanosecondsSinceEpoch
  ) {
    self.durationBounds = durationBounds.map { $0.seconds }.sorted()
    self.startNanoseconds = startNanoseconds
  }

  public func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
    series(label, .sum, dimensions) { SeriesCounter() }
  }

  public func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
    series(label, .gauge, dimensions) { SeriesGauge() }
  }

  public func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool)
    -> any RecorderHandler
  {
    // Values of no known unit: a histogram of one bucket (count, sum, min, max).
    aggregate
      ? series(label, .histogram(unit: nil), dimensions) { SeriesHistogram(bounds: []) }
      : series(label, .gauge, dimensions) { SeriesGauge() }
  }

  public func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
    series(label, .histogram(unit: "s"), dimensions) { SeriesHistogram(bounds: durationBounds) }
  }

  public func destroyCounter(_ handler: any CounterHandler) { remove(handler) }
  public func destroyMeter(_ handler: any MeterHandler) { remove(handler) }
  public func destroyRecorder(_ handler: any RecorderHandler) { remove(handler) }
  public func destroyTimer(_ handler: any TimerHandler) { remove(handler) }

  /// Every series as it stands, families by name.
  public func snapshot() -> [MetricFamily] {
    let table = families.withLock { $0 }
    return table.keys.sorted().compactMap { name in
      guard let family = table[name] else { return nil }
      let points = family.series.keys.sorted { $0.lexicographicallyPrecedes($1, by: <) }.compactMap {
        dimensions in family.series[dimensions].map { MetricPoint(dimensions: dimensions, value: $0.reading) }
      }
      return MetricFamily(name: name, kind: family.kind, points: points)
    }
  }

  private struct Family {
    let kind: MetricKind
    var series: [[Dimension]: any SeriesReading] = [:]
  }

  private func series<Handler: SeriesReading>(
    _ label: String, _ kind: MetricKind, _ dimensions: [(String, String)], make: () -> Handler
  ) -> Handler {
    let key = dimensions.map { Dimension(name: $0.0, value: $0.1) }.sorted()
    return families.withLock { table in
      var family = table[label] ?? Family(kind: kind)
      // A label asked for as another kind counts into a series nobody reads.
      guard family.kind == kind else { return make() }
      if let existing = family.series[key] as? Handler { return existing }
      let made = make()
      family.series[key] = made
      table[label] = family
      return made
    }
  }

  private func remove(_ handler: AnyObject) {
    families.withLock { table in
      for (name, family) in table {
        guard let found = family.series.first(where: { $0.value === handler }) else { continue }
        table[name]?.series[found.key] = nil
        return
      }
    }
  }
}

/// One label's kind, as OTLP names it.
public enum MetricKind: Sendable, Equatable {
  case sum
  case gauge
  case histogram(unit: String?)
}

public struct Dimension: Sendable, Hashable, Comparable {
  public let name: String
  public let value: String

  public static func < (lhs: Dimension, rhs: Dimension) -> Bool {
    (lhs.name, lhs.value) < (rhs.name, rhs.value)
  }
}

public struct MetricFamily: Sendable {
  public let name: String
  public let kind: MetricKind
  public let points: [MetricPoint]
}

public struct MetricPoint: Sendable {
  public let dimensions: [Dimension]
  public let value: MetricReading
}

public enum MetricReading: Sendable, Equatable {
  case integer(Int64)
  case number(Double)
  /// `counts` has one more entry than the bounds: the last is above them all.
  case histogram(count: Int64, sum: Double, min: Double?, max: Double?, bounds: [Double], counts: [Int64])
}

protocol SeriesReading: AnyObject, Sendable {
  var reading: MetricReading { get }
}

final class SeriesCounter: CounterHandler, SeriesReading {
  private let value = Atomic<Int64>(0)

  func increment(by amount: Int64) { value.add(amount, ordering: .relaxed) }
  func reset() { value.store(0, ordering: .relaxed) }
  var reading: MetricReading { .integer(value.load(ordering: .relaxed)) }
}

final class SeriesGauge: MeterHandler, RecorderHandler, SeriesReading {
  private let value = Mutex<Double>(0)

  func set(_ value: Int64) { set(Double(value)) }
  func set(_ value: Double) { self.value.withLock { $0 = value } }
  func increment(by amount: Double) { value.withLock { $0 += amount } }
  func decrement(by amount: Double) { value.withLock { $0 -= amount } }
  func record(_ value: Int64) { set(Double(value)) }
  func record(_ value: Double) { set(value) }
  var reading: MetricReading { .number(value.withLock { $0 }) }
}

final class SeriesHistogram: TimerHandler, RecorderHandler, SeriesReading {
  private struct Tally {
    var counts: [Int64]
    var count: Int64 = 0
    var sum: Double = 0
    var min: Double?
    var max: Double?
  }

  private let bounds: [Double]
  private let tally: Mutex<Tally>

  init(bounds: [Double]) {
    self.bounds = bounds
    tally = Mutex(Tally(counts: Array(repeating: 0, count: bounds.count + 1)))
  }

  func recordNanoseconds(_ duration: Int64) { record(Double(duration) / 1e9) }
  func record(_ value: Int64) { record(Double(value)) }

  func record(_ value: Double) {
    // OTLP's buckets hold values up to and including their upper bound.
    let bucket = bounds.firstIndex { value <= $0 } ?? bounds.count
    tally.withLock { tally in
      tally.counts[bucket] += 1
      tally.count += 1
      tally.sum += value
      tally.min = Swift.min(tally.min ?? value, value)
      tally.max = Swift.max(tally.max ?? value, value)
    }
  }

  var reading: MetricReading {
    let tally = tally.withLock { $0 }
    return .histogram(
      count: tally.count, sum: tally.sum, min: tally.min, max: tally.max, bounds: bounds, counts: tally.counts
    )
  }
}

extension Duration {
  fileprivate var seconds: Double {
    Double(components.seconds) + Double(components.attoseconds) / 1e18
  }
}

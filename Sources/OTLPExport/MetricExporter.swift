import Logging
import NIOConcurrencyHelpers
import Tracing

/// Pushes every series of an ``OTLPMetricsFactory`` as OTLP/HTTP JSON every
/// `interval` (`OTEL_METRIC_EXPORT_INTERVAL`, 60 s by default), from one task
/// of its own, and once more at shutdown. Points are cumulative, so a failed
/// export loses nothing the next one does not carry; failures are logged
/// once a streak.
public final class MetricExporter: Sendable {
  private struct State {
    var exports = 0
    var failing = false
  }

  private let factory: OTLPMetricsFactory
  private let resource: TraceResource
  private let logger: Logger
  private let poster: OTLPPoster
  private let state = NIOLockedValueBox(State())
  private let stop: AsyncStream<Void>.Continuation
  private let loop: NIOLockedValueBox<Task<Void, Never>?> = NIOLockedValueBox(nil)

  /// Starts the export task; the first export is one interval after.
  public init(
    factory: OTLPMetricsFactory, configuration: OTLPConfiguration, resource: TraceResource,
    interval: Duration, requestTimeout: Duration = .seconds(10), logger: Logger
  ) {
    self.factory = factory
    self.resource = resource
    self.logger = logger
    self.poster = OTLPPoster(configuration: configuration, requestTimeout: requestTimeout)
    let (stopped, stop) = AsyncStream.makeStream(of: Void.self)
    self.stop = stop
    let task = Task { [self] in
      await withTaskGroup(of: Void.self) { group in
        group.addTask {
          while !Task.isCancelled {
            try? await Task.sleep(for: interval)
            if Task.isCancelled { return }
            await self.export()
          }
        }
        for await _ in stopped {}
        group.cancelAll()
      }
      await export()
    }
    loop.withLockedValue { $0 = task }
  }

  /// Exports accepted so far.
  public var exports: Int { state.withLockedValue { $0.exports } }

  /// Sends the series once more and stops, waiting at most `patience`.
  /// Returns whether that last export was accepted in time.
  @discardableResult
  public func shutdown(patience: Duration) async -> Bool {
    let before = exports
    stop.finish()
    let task = loop.withLockedValue { $0 }
    let finished = await awaitEnd(of: task, patience: patience)
    await poster.shutdown()
    let sent = finished && exports > before
    if !sent { logger.warning("metrics: the last export to \(poster.configuration.url) was not accepted") }
    return sent
  }

  private func export() async {
    let body = MetricsRequestJSON.encode(
      factory.snapshot(), resource: resource, startNanoseconds: factory.startNanoseconds,
      nowNanoseconds: DefaultTracerClock.now.nanosecondsSinceEpoch)
    let failure = await poster.post(body)
    let firstOfStreak = state.withLockedValue { state -> Bool in
      defer { state.failing = failure != nil }
      if failure == nil { state.exports += 1 }
      return failure != nil && !state.failing
    }
    if let failure, firstOfStreak {
      logger.warning(
        "metrics: export to \(poster.configuration.url) failed (\(failure)); later failures not logged until one succeeds"
      )
    }
  }
}

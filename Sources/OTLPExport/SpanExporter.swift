import Logging
import NIOConcurrencyHelpers

/// Finished spans queued and sent in batches as OTLP/HTTP JSON, from one
/// task of its own: ``add(_:)`` only appends under a short lock (or drops
/// and counts when the queue is full), so a FUSE operation never waits on
/// an export. A batch is sent when `batchSize` spans are queued or every
/// `interval`; a failed batch is dropped (counted, and logged once a streak).
public final class SpanExporter: Sendable {
  public struct Settings: Sendable {
    /// Spans held at most; past it new spans are dropped.
    public var capacity = 4096
    /// Spans per request.
    public var batchSize = 512
    public var interval: Duration = .seconds(1)
    /// One export request's bound.
    public var requestTimeout: Duration = .seconds(10)

    public init() {}
  }

  private struct State {
    var queue: [FinishedSpan] = []
    var dropped = 0
    var failedBatches = 0
    var sentSpans = 0
    var failing = false
  }

  private let configuration: OTLPConfiguration
  private let resource: TraceResource
  private let settings: Settings
  private let logger: Logger
  private let poster: OTLPPoster
  private let state = NIOLockedValueBox(State())
  private let wake: AsyncStream<Void>.Continuation
  private let loop: NIOLockedValueBox<Task<Void, Never>?> = NIOLockedValueBox(nil)

  /// Starts the export task. Nothing connects until the first batch is sent.
  public init(
    configuration: OTLPConfiguration, resource: TraceResource, settings: Settings = Settings(), logger: Logger
  ) {
    self.configuration = configuration
    self.resource = resource
    self.settings = settings
    self.logger = logger
    self.poster = OTLPPoster(configuration: configuration, requestTimeout: settings.requestTimeout)
    let (signals, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    self.wake = wake
    let task = Task { [self] in
      let ticker = Task {
        while !Task.isCancelled {
          try? await Task.sleep(for: settings.interval)
          wake.yield()
        }
      }
      for await _ in signals {
        await sendQueued()
      }
      ticker.cancel()
      await sendQueued()
    }
    loop.withLockedValue { $0 = task }
  }

  /// Queues a finished span; never waits.
  public func add(_ span: FinishedSpan) {
    let full = state.withLockedValue { state -> Bool? in
      guard state.queue.count < settings.capacity else {
        state.dropped += 1
        return nil
      }
      state.queue.append(span)
      return state.queue.count >= settings.batchSize
    }
    if full == true { wake.yield() }
  }

  /// Spans dropped so far: queue full, or their batch not accepted.
  public var droppedSpans: Int { state.withLockedValue { $0.dropped } }
  public var sentSpans: Int { state.withLockedValue { $0.sentSpans } }

  /// Sends what is queued and stops, waiting at most `patience`; spans
  /// still unsent then are dropped. Returns whether everything was sent.
  @discardableResult
  public func shutdown(patience: Duration) async -> Bool {
    wake.finish()
    let task = loop.withLockedValue { $0 }
    let finished = await awaitEnd(of: task, patience: patience)
    await poster.shutdown()
    let left = state.withLockedValue { state -> Int in
      defer { state.queue = [] }
      state.dropped += state.queue.count
      return state.queue.count
    }
    let dropped = droppedSpans
    if !finished || left > 0 {
      logger.warning("traces: export still under way after \(patience); \(left) span(s) left unsent")
    }
    if dropped > 0 { logger.info("traces: \(dropped) span(s) dropped in all (queue full or export failed)") }
    return finished && left == 0 && dropped == 0
  }

  /// Sends the queue in batches until it is empty.
  private func sendQueued() async {
    while true {
      let batch = state.withLockedValue { state -> [FinishedSpan] in
        let count = min(state.queue.count, settings.batchSize)
        defer { state.queue.removeFirst(count) }
        return Array(state.queue.prefix(count))
      }
      if batch.isEmpty { return }
      await send(batch)
      if Task.isCancelled { return }
    }
  }

  private func send(_ batch: [FinishedSpan]) async {
    let failure = await poster.post(TraceRequestJSON.encode(batch, resource: resource))
    let firstOfStreak = state.withLockedValue { state -> Bool? in
      if failure != nil {
        state.dropped += batch.count
        state.failedBatches += 1
        defer { state.failing = true }
        return !state.failing
      }
      state.sentSpans += batch.count
      state.failing = false
      return nil
    }
    if let failure, firstOfStreak == true {
      logger.warning(
        "traces: export to \(configuration.url) failed (\(failure)); \(batch.count) span(s) dropped, later failures not logged until one succeeds"
      )
    }
  }
}

import NIOConcurrencyHelpers
import Tracing

/// A span's place in a trace, in OTLP's terms: 16 bytes of trace id, 8 of span id.
public struct SpanIdentity: Sendable, Hashable {
  public var traceHigh: UInt64
  public var traceLow: UInt64
  public var spanID: UInt64

  public init(traceHigh: UInt64, traceLow: UInt64, spanID: UInt64) {
    self.traceHigh = traceHigh
    self.traceLow = traceLow
    self.spanID = spanID
  }

  /// 32 lowercase hex digits, as OTLP/JSON writes a trace id.
  public var traceIDHex: String { hex(traceHigh) + hex(traceLow) }
  /// 16 lowercase hex digits.
  public var spanIDHex: String { hex(spanID) }
}

func hex(_ value: UInt64) -> String {
  let digits = String(value, radix: 16)
  return String(repeating: "0", count: 16 - digits.count) + digits
}

private enum SpanIdentityKey: ServiceContextKey {
  typealias Value = SpanIdentity
  static var nameOverride: String? { "otlp-span-identity" }
}

extension ServiceContext {
  /// The span this context belongs to, when an ``OTLPTracer`` started it.
  public internal(set) var spanIdentity: SpanIdentity? {
    get { self[SpanIdentityKey.self] }
    set { self[SpanIdentityKey.self] = newValue }
  }
}

/// A span as it ended: what an export sends.
public struct FinishedSpan: Sendable {
  public var name: String
  public var kind: SpanKind
  public var identity: SpanIdentity
  public var parentSpanID: UInt64?
  public var startNanoseconds: UInt64
  public var endNanoseconds: UInt64
  public var attributes: SpanAttributes
  public var events: [SpanEvent]
  public var links: [(identity: SpanIdentity, attributes: SpanAttributes)]
  public var status: SpanStatus?

  public init(
    name: String, kind: SpanKind, identity: SpanIdentity, parentSpanID: UInt64?, startNanoseconds: UInt64,
    endNanoseconds: UInt64, attributes: SpanAttributes = [:], events: [SpanEvent] = [],
    links: [(identity: SpanIdentity, attributes: SpanAttributes)] = [], status: SpanStatus? = nil
  ) {
    self.name = name
    self.kind = kind
    self.identity = identity
    self.parentSpanID = parentSpanID
    self.startNanoseconds = startNanoseconds
    self.endNanoseconds = endNanoseconds
    self.attributes = attributes
    self.events = events
    self.links = links
    self.status = status
  }
}

/// A `Tracer` whose spans, once ended, go to `finished` (a ``SpanExporter``'s
/// queue in a mount). A span whose context has no ``SpanIdentity`` starts a
/// new trace; otherwise it is that span's child. No trace context is
/// injected into or extracted from requests: bucketfs sends none to the service.
public struct OTLPTracer: Tracer {
  public typealias Span = OTLPSpan

  private let finished: @Sendable (FinishedSpan) -> Void

  public init(finished: @escaping @Sendable (FinishedSpan) -> Void) {
    self.finished = finished
  }

  public func startSpan<Instant: TracerInstant>(
    _ operationName: String, context: @autoclosure () -> ServiceContext, ofKind kind: SpanKind,
    at instant: @autoclosure () -> Instant, function: String, file fileID: String, line: UInt
  ) -> OTLPSpan {
    var context = context()
    var random = SystemRandomNumberGenerator()
    let parent = context.spanIdentity
    let identity = SpanIdentity(
      traceHigh: parent?.traceHigh ?? random.next(), traceLow: parent?.traceLow ?? random.next(),
      spanID: Self.nonZero(&random))
    context.spanIdentity = identity
    return OTLPSpan(
      name: operationName, kind: kind, context: context, parentSpanID: parent?.spanID,
      start: instant().nanosecondsSinceEpoch, finished: finished)
  }

  /// OTLP reserves the all-zero span id for "none".
  private static func nonZero(_ random: inout SystemRandomNumberGenerator) -> UInt64 {
    while true {
      let value: UInt64 = random.next()
      if value != 0 { return value }
    }
  }

  public func forceFlush() {}

  public func inject<Carrier, Inject: Injector>(
    _ context: ServiceContext, into carrier: inout Carrier, using injector: Inject
  ) where Inject.Carrier == Carrier {}

  public func extract<Carrier, Extract: Extractor>(
    _ carrier: Carrier, into context: inout ServiceContext, using extractor: Extract
  ) where Extract.Carrier == Carrier {}
}

/// One span while it runs; its state under a short lock (spans are ended
/// from whichever task finishes the work). Ending it twice ends it once.
public final class OTLPSpan: Tracing.Span, Sendable {
  private struct State {
    var name: String
    var attributes: SpanAttributes = [:]
    var events: [SpanEvent] = []
    var links: [(identity: SpanIdentity, attributes: SpanAttributes)] = []
    var status: SpanStatus?
    var ended = false
  }

  public let context: ServiceContext
  private let kind: SpanKind
  private let parentSpanID: UInt64?
  private let start: UInt64
  private let finished: @Sendable (FinishedSpan) -> Void
  private let state: NIOLockedValueBox<State>

  init(
    name: String, kind: SpanKind, context: ServiceContext, parentSpanID: UInt64?, start: UInt64,
    finished: @escaping @Sendable (FinishedSpan) -> Void
  ) {
    self.context = context
    self.kind = kind
    self.parentSpanID = parentSpanID
    self.start = start
    self.finished = finished
    self.state = NIOLockedValueBox(State(name: name))
  }

  public var operationName: String {
    get { state.withLockedValue { $0.name } }
    set { state.withLockedValue { if !$0.ended { $0.name = newValue } } }
  }

  public var attributes: SpanAttributes {
    get { state.withLockedValue { $0.attributes } }
    set { state.withLockedValue { if !$0.ended { $0.attributes = newValue } } }
  }

  public var isRecording: Bool { state.withLockedValue { !$0.ended } }

  public func setStatus(_ status: SpanStatus) {
    state.withLockedValue { state in
      guard !state.ended else { return }
      // OTLP: OK is final; an error does not replace it.
      if state.status?.code != .ok { state.status = status }
    }
  }

  public func addEvent(_ event: SpanEvent) {
    state.withLockedValue { if !$0.ended { $0.events.append(event) } }
  }

  /// As OpenTelemetry records an exception: an `exception` event.
  public func recordError<Instant: TracerInstant>(
    _ error: any Error, attributes: SpanAttributes, at instant: @autoclosure () -> Instant
  ) {
    var details = attributes
    details.set("exception.type", value: .string(String(describing: type(of: error))))
    details.set("exception.message", value: .string(String(describing: error)))
    addEvent(SpanEvent(name: "exception", at: instant(), attributes: details))
  }

  public func addLink(_ link: SpanLink) {
    guard let identity = link.context.spanIdentity else { return }  // not a span of this tracer
    state.withLockedValue { if !$0.ended { $0.links.append((identity, link.attributes)) } }
  }

  public func end<Instant: TracerInstant>(at instant: @autoclosure () -> Instant) {
    let end = instant().nanosecondsSinceEpoch
    let done: State? = state.withLockedValue { state in
      guard !state.ended else { return nil }
      state.ended = true
      return state
    }
    guard let done, let identity = context.spanIdentity else { return }
    finished(
      FinishedSpan(
        name: done.name, kind: kind, identity: identity, parentSpanID: parentSpanID, startNanoseconds: start,
        endNanoseconds: max(end, start), attributes: done.attributes, events: done.events, links: done.links,
        status: done.status))
  }
}

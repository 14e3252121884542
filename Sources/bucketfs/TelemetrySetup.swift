import CloudStorage
import CoreMetrics
import Credentials
import Logging
import MetricsExport
import OTLPExport
import Tracing

extension Mount {
  /// Traces for this mount (MountOptionTable.otlpEndpoint and the
  /// `OTEL_EXPORTER_OTLP_*` variables): the exporter, installed as the
  /// process's tracer, when an endpoint is configured. Without one nothing
  /// is bootstrapped, no task is started and no connection is ever made.
  func startTraceExport(logger: Logger) throws(MountFailure) -> SpanExporter? {
    let configuration: OTLPConfiguration?
    do {
      configuration = try OTLPConfiguration.resolve(flag: otlpEndpoint, environment: processEnvironment())
    } catch {
      throw MountFailure(message: error.message)
    }
    guard let configuration else { return nil }
    for warning in configuration.warnings { logger.warning("\(warning)") }
    let exporter = SpanExporter(
      configuration: configuration, resource: TraceResource(serviceVersion: Version.current), logger: logger)
    InstrumentationSystem.bootstrap(OTLPTracer(finished: { exporter.add($0) }))
    logger.info("exporting traces to \(configuration.url)")
    return exporter
  }
}

/// The mount's metrics backends: the Prometheus registry behind
/// `--metrics-addr`, the OTLP series behind `--otlp-endpoint` (or the
/// variables), either, both or none. Bootstrapped before the client,
/// filesystem and session make their series; with none they count into a no-op.
struct MetricsBackends {
  let prometheus: MetricsRegistry?
  let otlp: OTLPMetricsFactory?
  let otlpConfiguration: OTLPConfiguration?
  let otlpInterval: Duration

  init(prometheus: Bool, otlpEndpoint: String?, environment: [String: String]) throws(Mount.MountFailure) {
    do {
      otlpConfiguration = try OTLPConfiguration.resolve(
        .metrics, flag: otlpEndpoint, environment: environment)
      otlpInterval = try OTLPConfiguration.metricExportInterval(environment: environment)
    } catch {
      throw Mount.MountFailure(message: error.message)
    }
    self.prometheus = prometheus ? MetricsRegistry() : nil
    otlp = otlpConfiguration.map { _ in OTLPMetricsFactory(durationBounds: MetricsRegistry.durationBuckets) }
    let factories: [any MetricsFactory] = [self.prometheus?.factory, otlp].compactMap { $0 }
    switch factories.count {
    case 0: break
    case 1: MetricsSystem.bootstrap(factories[0])
    default: MetricsSystem.bootstrap(MultiplexMetricsHandler(factories: factories))
    }
  }

  /// The OTLP push, once the mount is made; nil without an endpoint.
  func startOTLPExport(logger: Logger) -> MetricExporter? {
    guard let otlp, let otlpConfiguration else { return nil }
    for warning in otlpConfiguration.warnings { logger.warning("\(warning)") }
    logger.info("exporting metrics to \(otlpConfiguration.url) every \(otlpInterval)")
    return MetricExporter(
      factory: otlp, configuration: otlpConfiguration,
      resource: TraceResource(serviceVersion: Version.current), interval: otlpInterval, logger: logger)
  }
}

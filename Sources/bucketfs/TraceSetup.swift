import CloudStorage
import Credentials
import Logging
import TraceExport
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
    logger.info("exporting traces to \(configuration.tracesURL)")
    return exporter
  }
}

import AsyncHTTPClient
import NIOCore
import NIOHTTP1

/// Sends one signal's export requests (OTLP/HTTP, JSON) to its URL with its
/// headers, over a client of its own that is never traced: a traced export
/// would make spans to export.
struct OTLPPoster: Sendable {
  let configuration: OTLPConfiguration
  let requestTimeout: Duration
  private let http: HTTPClient

  init(configuration: OTLPConfiguration, requestTimeout: Duration) {
    self.configuration = configuration
    self.requestTimeout = requestTimeout
    var http = HTTPClient.Configuration()
    http.tracing.tracer = nil
    http.timeout.connect = .seconds(5)
    http.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 1
    self.http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: http)
  }

  /// POSTs `body`; nil when it was accepted (2xx), else why not, in words.
  func post(_ body: String) async -> String? {
    var request = HTTPClientRequest(url: configuration.url)
    request.method = .POST
    request.headers.add(name: "Content-Type", value: "application/json")
    for header in configuration.headers { request.headers.add(name: header.name, value: header.value) }
    request.body = .bytes(ByteBuffer(string: body))
    do {
      let response = try await http.execute(request, timeout: .nanoseconds(requestTimeout.nanoseconds))
      // The answer (an Export…ServiceResponse) says nothing needed; read it to free the connection.
      _ = try await response.body.collect(upTo: 1 << 20)
      return (200..<300).contains(response.status.code) ? nil : "HTTP \(response.status.code)"
    } catch {
      return String(describing: error)
    }
  }

  func shutdown() async {
    try? await http.shutdown()
  }
}

extension Duration {
  var nanoseconds: Int64 {
    components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000
  }
}

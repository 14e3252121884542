import NIOCore
import NIOHTTP1
import NIOPosix

#if canImport(Glibc)
  import Glibc
#endif

/// Why the metrics server could not start, in words for the mount's one line.
public struct MetricsServerError: Error, CustomStringConvertible {
  public let description: String
}

/// A small HTTP/1.1 server answering `GET /metrics` with the Prometheus text
/// of a ``MetricsRegistry``. It runs on an event loop thread of its own, so a
/// scrape never waits behind storage I/O and never touches a FUSE thread;
/// ``stop()`` closes the port and joins that thread.
public final class MetricsServer: Sendable {
  public let address: MetricsAddress
  private let group: MultiThreadedEventLoopGroup
  private let channel: any Channel

  private init(address: MetricsAddress, group: MultiThreadedEventLoopGroup, channel: any Channel) {
    self.address = address
    self.group = group
    self.channel = channel
  }

  /// Binds `address` (that host only) and starts serving. Blocks until bound.
  public static func start(at address: MetricsAddress, registry: MetricsRegistry) throws(MetricsServerError)
    -> MetricsServer
  {
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    let bootstrap = ServerBootstrap(group: group)
      .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
      .childChannelInitializer { channel in
        channel.eventLoop.makeCompletedFuture {
          try channel.pipeline.syncOperations.configureHTTPServerPipeline()
          try channel.pipeline.syncOperations.addHandler(ScrapeHandler(registry: registry))
        }
      }
    do {
      let channel = try bootstrap.bind(host: address.host, port: address.port).wait()
      return MetricsServer(address: address, group: group, channel: channel)
    } catch {
      try? group.syncShutdownGracefully()
      throw MetricsServerError(description: "cannot serve metrics at \(address): \(Self.reason(error))")
    }
  }

  /// The port bound (the address's).
  public var port: Int { channel.localAddress?.port ?? address.port }

  /// Closes the listening socket and every connection, and ends the thread.
  public func stop() {
    try? channel.close().wait()
    try? group.syncShutdownGracefully()
  }

  private static func reason(_ error: any Error) -> String {
    if let error = error as? IOError { return String(cString: strerror(error.errnoCode)) }
    if let error = error as? SocketAddressError, case .unknown(let host, _) = error {
      return "cannot resolve \(host)"
    }
    return "\(error)"
  }
}

/// One connection's requests: `/metrics` by GET or HEAD; anything else 404/405.
final class ScrapeHandler: ChannelInboundHandler, RemovableChannelHandler {
  typealias InboundIn = HTTPServerRequestPart
  typealias OutboundOut = HTTPServerResponsePart

  private let registry: MetricsRegistry
  private var head: HTTPRequestHead?

  init(registry: MetricsRegistry) {
    self.registry = registry
  }

  func channelRead(context: ChannelHandlerContext, data: NIOAny) {
    switch unwrapInboundIn(data) {
    case .head(let head): self.head = head
    case .body: break
    case .end:
      guard let head else { return }
      self.head = nil
      respond(to: head, context: context)
    }
  }

  private func respond(to head: HTTPRequestHead, context: ChannelHandlerContext) {
    let path = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
    var headers = HTTPHeaders()
    let status: HTTPResponseStatus
    var body: ByteBuffer
    if path != "/metrics" {
      status = .notFound
      body = ByteBuffer(string: "metrics are at /metrics\n")
      headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
    } else if head.method != .GET && head.method != .HEAD {
      status = .methodNotAllowed
      body = ByteBuffer()
      headers.add(name: "Allow", value: "GET, HEAD")
    } else {
      status = .ok
      body = ByteBuffer(bytes: registry.render())
      headers.add(name: "Content-Type", value: "text/plain; version=0.0.4; charset=utf-8")
    }
    headers.add(name: "Content-Length", value: String(body.readableBytes))
    let keepAlive = head.isKeepAlive
    if !keepAlive { headers.add(name: "Connection", value: "close") }
    let responseHead = HTTPResponseHead(version: head.version, status: status, headers: headers)
    context.write(wrapOutboundOut(.head(responseHead)), promise: nil)
    if head.method != .HEAD && body.readableBytes > 0 {
      context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
    }
    let written = context.writeAndFlush(wrapOutboundOut(.end(nil)))
    if !keepAlive {
      written.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
    }
  }
}

import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// One handshake that only looks at the server's certificates: BoringSSL's
/// CERTIFICATE_VERIFY_FAILED does not say what was wrong with them, so on
/// that error (and only then) this fetches the chain to tell.
enum CertificateProbe {
  /// The chain `host:port` presents (leaf first), or nil if none came within 3 s.
  static func chain(host: String, port: Int, group: any EventLoopGroup) async -> [NIOSSLCertificate]? {
    let seen = Chain()
    do {
      var configuration = TLSConfiguration.makeClientConfiguration()
      // The callback below stands in for verification: it keeps the chain and refuses it.
      configuration.certificateVerification = .noHostnameVerification
      let context = try NIOSSLContext(configuration: configuration)
      let serverName = host.first == "[" || host.allSatisfy({ $0.isNumber || $0 == "." }) ? nil : host
      let channel = try await ClientBootstrap(group: group)
        .connectTimeout(.seconds(3))
        .channelInitializer { channel in
          channel.eventLoop.makeCompletedFuture {
            let handler = try NIOSSLClientHandler(
              context: context, serverHostname: serverName,
              customVerificationCallback: { certificates, promise in
                seen.set(certificates)
                promise.succeed(.failed)
              })
            try channel.pipeline.syncOperations.addHandler(handler)
          }
        }
        .connect(host: host.trimmingCharacters(in: "[]"), port: port).get()
      // The handshake ends in the refusal above; wait for the close it brings, at most 3 s.
      let closed = channel.closeFuture
      let timer = channel.eventLoop.scheduleTask(in: .seconds(3)) { channel.close(promise: nil) }
      try? await closed.get()
      timer.cancel()
    } catch {
      return seen.get()
    }
    return seen.get()
  }

  private final class Chain: Sendable {
    private let value = Mutex<[NIOSSLCertificate]?>(nil)
    func set(_ chain: [NIOSSLCertificate]) { value.withLock { $0 = chain } }
    func get() -> [NIOSSLCertificate]? { value.withLock { $0 } }
  }
}

extension String {
  fileprivate func trimmingCharacters(in set: String) -> String {
    var text = Substring(self)
    while let first = text.first, set.contains(first) { text = text.dropFirst() }
    while let last = text.last, set.contains(last) { text = text.dropLast() }
    return String(text)
  }
}

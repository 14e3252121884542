import AsyncHTTPClient
import NIOCore
import NIOHTTP1

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// Finds the metadata server, as google-auth's `_metadata.ping` does: a GET with
/// `Metadata-Flavor: Google` that counts only when answered 200 with `Metadata-Flavor: Google`
/// (so a captive portal or another cloud's server is not taken for it), a few tries, about
/// 3 s at most in all. Asked at `GCE_METADATA_IP` when set, at 169.254.169.254 when the
/// firmware says Google (Compute Engine, GKE nodes), and at `metadata.google.internal`
/// everywhere, since containers (GKE Sandbox, CI runners) often hide the firmware.
public enum MetadataServerProbe {
  /// Where a metadata server answered, if anywhere. `true` stands for the well-known address
  /// (tests and callers that only say yes or no).
  public struct Answer: Sendable, Equatable, ExpressibleByBooleanLiteral {
    public var host: String?

    public init(host: String?) { self.host = host }

    public init(booleanLiteral value: Bool) {
      host = value ? MetadataServerCredentials.defaultHost : nil
    }
  }

  /// The metadata server's DNS name inside Google Cloud.
  public static let defaultName = "metadata.google.internal"

  /// Asks the hosts ``candidates(environment:firmwareSaysGoogle:)`` names.
  public static func locate(environment: [String: String], http: HTTPClient = .shared) -> Answer {
    Answer(
      host: ping(candidates(environment: environment, firmwareSaysGoogle: firmwareSaysGoogle()), http: http))
  }

  /// In order of preference: `GCE_METADATA_IP` (else 169.254.169.254 on Google's firmware),
  /// then `metadata.google.internal`.
  static func candidates(environment: [String: String], firmwareSaysGoogle: Bool) -> [String] {
    var hosts: [String] = []
    if let address = environment["GCE_METADATA_IP"], !address.isEmpty {
      hosts.append(address)
    } else if firmwareSaysGoogle {
      hosts.append(MetadataServerCredentials.defaultHost)
    }
    hosts.append(defaultName)
    return hosts
  }

  /// The first of `hosts` (`host` or `host:port`) that answers as a metadata server: all are
  /// asked at once, each attempt bounded by `attemptTimeout`; only failures to connect are
  /// tried again (`attempts` in all), an answer without the header is final. Blocks the
  /// calling thread, which must not be one of `http`'s event loops.
  static func ping(
    _ hosts: [String], http: HTTPClient, attempts: Int = 3, attemptTimeout: TimeAmount = .milliseconds(800)
  ) -> String? {
    var pending = hosts
    for attempt in 0..<attempts {
      if attempt > 0 { usleep(UInt32(100_000 << (attempt - 1))) }
      let futures = pending.map { host -> EventLoopFuture<Bool> in
        guard var request = try? HTTPClient.Request(url: "http://\(host)/", method: .GET) else {
          return http.eventLoopGroup.next().makeSucceededFuture(false)
        }
        request.headers.add(name: "Metadata-Flavor", value: "Google")
        return http.execute(request: request, deadline: .now() + attemptTimeout).map { response in
          response.status == .ok && response.headers.first(name: "Metadata-Flavor") == "Google"
        }
      }
      var unreachable: [String] = []
      for (host, future) in zip(pending, futures) {
        switch Result(catching: { try future.wait() }) {
        case .success(true): return host
        case .success(false): continue  // something answered, and it is not a metadata server
        case .failure: unreachable.append(host)
        }
      }
      pending = unreachable
      if pending.isEmpty { break }
    }
    return nil
  }

  static func firmwareSaysGoogle() -> Bool {
    for path in ["/sys/class/dmi/id/product_name", "/sys/class/dmi/id/bios_vendor"] {
      guard let file = fopen(path, "r") else { continue }
      defer { fclose(file) }
      var buffer = [CChar](repeating: 0, count: 256)
      if fgets(&buffer, Int32(buffer.count), file) != nil,
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
          .contains("Google")
      {
        return true
      }
    }
    return false
  }
}

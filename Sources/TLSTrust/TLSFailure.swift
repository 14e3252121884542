import NIOCore
import NIOSSL

#if canImport(Glibc)
  import Glibc
#endif

/// A TLS failure that no retry mends: the server's certificate was refused
/// (unknown issuer, expired, another host's) or the handshake failed on the
/// protocol. A reset or EOF during the handshake is the network's, not this.
public struct TLSFailure: Error, Sendable, Equatable, CustomStringConvertible {
  public enum Reason: Sendable, Equatable {
    /// The chain leads to no trusted root.
    case unknownIssuer
    /// A lone certificate that signs itself, not among the trusted.
    case selfSigned
    /// A certificate of the chain is past its notAfter (a UTC date).
    case expired(String)
    /// A certificate of the chain is before its notBefore.
    case notYetValid(String)
    /// The certificate does not name the host asked for.
    case nameMismatch
    /// The handshake failed on the protocol (versions, ciphers, a server that speaks no TLS): BoringSSL's reason.
    case handshake(String)
  }

  public let host: String
  public let port: Int
  public let reason: Reason

  public init(host: String, port: Int, reason: Reason) {
    self.host = host
    self.port = port
    self.reason = reason
  }

  public var description: String {
    let server = "\(host):\(port)"
    let hint = "--ca-file names a CA bundle"
    switch reason {
    case .unknownIssuer: return "TLS: certificate for \(server) is not trusted (unknown issuer); \(hint)"
    case .selfSigned: return "TLS: certificate for \(server) is not trusted (self-signed); \(hint)"
    case .expired(let date): return "TLS: certificate for \(server) has expired (not valid after \(date))"
    case .notYetValid(let date):
      return "TLS: certificate for \(server) is not valid yet (not valid before \(date))"
    case .nameMismatch: return "TLS: certificate for \(server) does not name \(host) (name mismatch)"
    case .handshake(let detail): return "TLS: handshake with \(server) failed (\(detail))"
    }
  }

  /// What `error` says, if it is such a failure. A refused certificate comes
  /// as BoringSSL's CERTIFICATE_VERIFY_FAILED without its cause:
  /// ``unknownIssuer`` until ``CertificateProbe`` looks.
  public static func reason(of error: any Error) -> Reason? {
    if let error = error as? NIOSSLExtraError {
      if error == .failedToValidateHostname || error == .serverHostnameImpossibleToMatch {
        return .nameMismatch
      }
      return nil
    }
    guard let error = error as? NIOSSLError else { return nil }
    switch error {
    case .handshakeFailed(let boring):
      let reasons = Self.reasons(boring)
      if reasons.contains("CERTIFICATE_VERIFY_FAILED") { return .unknownIssuer }
      // EOF or a reset mid-handshake: the network's, retried like any other.
      guard let first = reasons.first else { return nil }
      return .handshake(first)
    case .noCertificateToValidate: return .handshake("the server sent no certificate")
    case .unableToValidateCertificate: return .unknownIssuer
    case .cannotMatchULabel: return .nameMismatch
    default: return nil
    }
  }

  /// `error` as a failure for `host:port`, its cause looked for with one
  /// more handshake when the error does not say it.
  public static func diagnose(_ error: any Error, host: String, port: Int, group: any EventLoopGroup) async
    -> TLSFailure?
  {
    guard let reason = reason(of: error) else { return nil }
    guard reason == .unknownIssuer else { return TLSFailure(host: host, port: port, reason: reason) }
    let chain = await CertificateProbe.chain(host: host, port: port, group: group)
    return TLSFailure(host: host, port: port, reason: chain.map { Self.cause(of: $0) } ?? .unknownIssuer)
  }

  /// Why a refused chain was refused, from what it shows: dates first
  /// (facts), then a lone self-signed certificate, else an unknown issuer.
  static func cause(of chain: [NIOSSLCertificate], now: time_t = time(nil)) -> Reason {
    for certificate in chain {
      if certificate.notValidAfter < now { return .expired(utc(certificate.notValidAfter)) }
      if certificate.notValidBefore > now { return .notYetValid(utc(certificate.notValidBefore)) }
    }
    if chain.count == 1, let leaf = chain.first, leaf.subjectName == leaf.issuerName { return .selfSigned }
    return .unknownIssuer
  }

  /// BoringSSL's reason names in an error stack ("CERTIFICATE_VERIFY_FAILED"), in order.
  static func reasons(_ error: BoringSSLError) -> [String] {
    guard case .sslError(let stack) = error else { return [] }
    return stack.compactMap { entry in
      // "Error: 268435581 error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED at FILE:LINE"
      let text = entry.description
      guard let marker = text.firstRange(of: "OPENSSL_internal:") else { return nil }
      let rest = text[marker.upperBound...]
      return String(rest.prefix { $0 != " " })
    }
  }

  static func utc(_ time: time_t) -> String {
    var seconds = time
    var parts = tm()
    guard gmtime_r(&seconds, &parts) != nil else { return "\(time)" }
    var buffer = [CChar](repeating: 0, count: 32)
    let count = strftime(&buffer, buffer.count, "%Y-%m-%d %H:%M:%S UTC", &parts)
    return String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }
}

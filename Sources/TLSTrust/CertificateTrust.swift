import NIOSSL

#if canImport(Glibc)
  import Glibc
#endif

/// The certificates a mount trusts, for every HTTPS connection it makes (the
/// service and the token endpoints): `--ca-file` in place of the system
/// store; else `SSL_CERT_FILE` and `SSL_CERT_DIR` as OpenSSL reads them (each
/// replaces its half of the system default: the bundle file, the hashed
/// directories); else the system store. Everything is read and checked here,
/// at mount, so a bad file is one clear line and not a failure per request.
public struct CertificateTrust: Sendable {
  /// Where the roots come from, for the log.
  public let origin: String
  /// The client TLS configuration: full verification (chain, dates, host name) against these roots.
  public let configuration: TLSConfiguration

  /// Debian's (and OpenSSL's there) system bundle and hashed directory, as NIOSSL finds them.
  static let systemFile = "/etc/ssl/certs/ca-certificates.crt"
  static let systemDirectory = "/etc/ssl/certs"

  public struct Invalid: Error, CustomStringConvertible {
    public let description: String
  }

  public init(caFile: String?, environment: [String: String]) throws(Invalid) {
    var configuration = TLSConfiguration.makeClientConfiguration()
    configuration.certificateVerification = .fullVerification
    func set(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
    if let caFile {
      configuration.trustRoots = .certificates(try Self.bundle(caFile, named: "--ca-file \(caFile)"))
      origin = "--ca-file \(caFile)"
    } else if set("SSL_CERT_FILE") != nil || set("SSL_CERT_DIR") != nil {
      var roots: [NIOSSLAdditionalTrustRoots] = []
      var parts: [String] = []
      if let file = set("SSL_CERT_FILE") {
        roots.append(.certificates(try Self.bundle(file, named: "SSL_CERT_FILE \(file)")))
        parts.append("SSL_CERT_FILE \(file)")
      } else if Self.kind(Self.systemFile) == S_IFREG {
        roots.append(.file(Self.systemFile))
      }
      // A list, as OpenSSL takes it (empty entries skipped). NIOSSL looks one
      // hashed directory up per connection; the certificates of any further
      // ones are read now.
      var directories = [Self.systemDirectory].filter { Self.kind($0) == S_IFDIR }
      if let list = set("SSL_CERT_DIR") {
        directories = list.split(separator: ":").map(String.init)
        for directory in directories where Self.kind(directory) != S_IFDIR {
          throw Invalid(description: "SSL_CERT_DIR: \(directory) is not a directory")
        }
        parts.append("SSL_CERT_DIR \(list)")
      }
      if let first = directories.first {
        configuration.trustRoots = .file(first)
      } else {
        configuration.trustRoots = .certificates([])
      }
      for directory in directories.dropFirst() { roots.append(.certificates(Self.hashed(in: directory))) }
      configuration.additionalTrustRoots = roots
      origin = parts.joined(separator: " and ")
    } else {
      configuration.trustRoots = .default
      origin = "the system store"
    }
    // Loads the roots the way every connection will: a failure shows now.
    do {
      _ = try NIOSSLContext(configuration: configuration)
    } catch {
      throw Invalid(description: "cannot use the CA certificates of \(origin): \(error)")
    }
    self.configuration = configuration
  }

  /// The certificates of a PEM bundle; at least one, or why not.
  static func bundle(_ path: String, named what: String) throws(Invalid) -> [NIOSSLCertificate] {
    let bytes = try contents(of: path, what: what)
    guard bytes.count > 0, String(decoding: bytes, as: UTF8.self).contains("-----BEGIN CERTIFICATE-----")
    else {
      throw Invalid(description: "\(what): holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    }
    let certificates: [NIOSSLCertificate]
    do {
      certificates = try NIOSSLCertificate.fromPEMBytes(bytes)
    } catch {
      throw Invalid(description: "\(what): not a PEM bundle of CA certificates (\(error))")
    }
    guard !certificates.isEmpty else {
      throw Invalid(description: "\(what): holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    }
    return certificates
  }

  /// The file's bytes; a bundle past 16 MiB is taken for a mistake.
  private static func contents(of path: String, what: String) throws(Invalid) -> [UInt8] {
    let descriptor = open(path, O_RDONLY | O_CLOEXEC)
    guard descriptor >= 0 else { throw Invalid(description: "\(what): \(String(cString: strerror(errno)))") }
    defer { close(descriptor) }
    var status = stat()
    guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
      throw Invalid(description: "\(what): not a regular file")
    }
    guard status.st_size <= 16 << 20 else { throw Invalid(description: "\(what): larger than 16 MiB") }
    var bytes = [UInt8](repeating: 0, count: Int(status.st_size))
    var done = 0
    while done < bytes.count {
      let got = bytes.withUnsafeMutableBytes {
        Glibc.read(descriptor, $0.baseAddress! + done, $0.count - done)
      }
      if got < 0 && errno == EINTR { continue }
      guard got > 0 else {
        throw Invalid(
          description: "\(what): \(got < 0 ? String(cString: strerror(errno)) : "shorter than it was")")
      }
      done += got
    }
    return bytes
  }

  /// The certificates of a c_rehash directory (entries named HHHHHHHH.N); unreadable ones are skipped, as OpenSSL does.
  static func hashed(in directory: String) -> [NIOSSLCertificate] {
    guard let stream = opendir(directory) else { return [] }
    defer { closedir(stream) }
    var found: [NIOSSLCertificate] = []
    while let entry = readdir(stream) {
      let name = withUnsafeBytes(of: entry.pointee.d_name) {
        String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
      }
      let parts = name.split(separator: ".")
      guard parts.count == 2, parts[0].count == 8, parts[0].allSatisfy(\.isHexDigit),
        parts[1].allSatisfy(\.isNumber)
      else { continue }
      found += (try? NIOSSLCertificate.fromPEMFile(directory + "/" + name)) ?? []
    }
    return found
  }

  private static func kind(_ path: String) -> mode_t? {
    var status = stat()
    guard stat(path, &status) == 0 else { return nil }
    return status.st_mode & S_IFMT
  }
}

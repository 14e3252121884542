import NIOSSL
import XCTest

@testable import TLSTrust

#if canImport(Glibc)
  import Glibc
#endif

/// --ca-file and the environment: what is trusted, and the one line a bad bundle gets.
final class CertificateTrustTests: XCTestCase {
  private var directory = ""

  override func setUp() {
    var template = Array("/tmp/tlstrust-XXXXXX".utf8CString)
    directory = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)) }
  }

  override func tearDown() {
    for name in ["ca.pem", "empty.pem", "junk.pem"] { unlink(directory + "/" + name) }
    rmdir(directory)
  }

  private func write(_ name: String, _ text: String) -> String {
    let path = directory + "/" + name
    let file = fopen(path, "w")!
    fputs(text, file)
    fclose(file)
    return path
  }

  func testACAFileReplacesTheSystemStore() throws {
    let path = write("ca.pem", Self.caPEM)
    let trust = try CertificateTrust(caFile: path, environment: ["SSL_CERT_FILE": "/nonexistent"])
    XCTAssertEqual(trust.origin, "--ca-file \(path)")
    guard case .certificates(let roots)? = trust.configuration.trustRoots else {
      return XCTFail("roots: \(String(describing: trust.configuration.trustRoots))")
    }
    XCTAssertEqual(roots.count, 1)
    XCTAssertTrue(trust.configuration.additionalTrustRoots.isEmpty)
  }

  func testAMissingEmptyOrJunkBundleIsOneClearError() {
    let cases = [
      (directory + "/absent.pem", "No such file or directory"),
      (write("empty.pem", ""), "holds no PEM certificate"),
      (
        write("junk.pem", "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"),
        "not a PEM bundle"
      ),
      (directory, "not a regular file"),
    ]
    for (path, expected) in cases {
      XCTAssertThrowsError(try CertificateTrust(caFile: path, environment: [:])) { error in
        let text = "\(error)"
        XCTAssertTrue(text.contains(expected) && text.contains("--ca-file \(path)"), text)
        XCTAssertFalse(text.contains("\n"), text)
      }
    }
  }

  func testSSLCertFileAndDirectoryAreReadAsOpenSSLReadsThem() throws {
    let path = write("ca.pem", Self.caPEM)
    let fileOnly = try CertificateTrust(caFile: nil, environment: ["SSL_CERT_FILE": path])
    XCTAssertEqual(fileOnly.origin, "SSL_CERT_FILE \(path)")
    // The file replaces the system bundle; the system's directory stays, as with OpenSSL.
    XCTAssertEqual(fileOnly.configuration.additionalTrustRoots.count, 1)
    XCTAssertEqual(fileOnly.configuration.trustRoots, .file("/etc/ssl/certs"))
    let both = try CertificateTrust(
      caFile: nil, environment: ["SSL_CERT_FILE": path, "SSL_CERT_DIR": "\(directory)::/etc/ssl/certs"])
    XCTAssertEqual(both.configuration.trustRoots, .file(directory))
    XCTAssertEqual(both.configuration.additionalTrustRoots.count, 2)
    XCTAssertThrowsError(
      try CertificateTrust(caFile: nil, environment: ["SSL_CERT_DIR": directory + "/absent"]))
    XCTAssertThrowsError(
      try CertificateTrust(caFile: nil, environment: ["SSL_CERT_FILE": directory + "/absent"]))
    let system = try CertificateTrust(caFile: nil, environment: ["SSL_CERT_FILE": ""])
    XCTAssertEqual(system.origin, "the system store")
  }

  func testARefusedChainIsToldByItsDates() throws {
    let old = try NIOSSLCertificate.fromPEMBytes(Array(Self.expiredPEM.utf8))
    let ca = try NIOSSLCertificate.fromPEMBytes(Array(Self.caPEM.utf8))
    XCTAssertEqual(TLSFailure.cause(of: old), .expired("2001-01-01 00:00:00 UTC"))
    XCTAssertEqual(TLSFailure.cause(of: old, now: 900_000_000), .notYetValid("2000-01-01 00:00:00 UTC"))
    XCTAssertEqual(TLSFailure.cause(of: ca), .selfSigned)
    XCTAssertEqual(TLSFailure.cause(of: old, now: 960_000_000), .unknownIssuer)
  }

  func testMessagesNameTheServerAndTheProblem() {
    XCTAssertEqual(
      TLSFailure(host: "localhost", port: 8443, reason: .unknownIssuer).description,
      "TLS: certificate for localhost:8443 is not trusted (unknown issuer); --ca-file names a CA bundle")
    XCTAssertEqual(
      TLSFailure(host: "localhost", port: 8443, reason: .nameMismatch).description,
      "TLS: certificate for localhost:8443 does not name localhost (name mismatch)")
  }

  func testWhichErrorsAreFinal() {
    XCTAssertEqual(TLSFailure.reason(of: NIOSSLExtraError.failedToValidateHostname), .nameMismatch)
    XCTAssertNil(TLSFailure.reason(of: NIOSSLError.handshakeFailed(.sslError([.eofDuringHandshake]))))
    XCTAssertNil(TLSFailure.reason(of: NIOSSLError.uncleanShutdown))
    XCTAssertNil(TLSFailure.reason(of: CancellationError()))
  }

  static let caPEM = """
    -----BEGIN CERTIFICATE-----
    MIIBjDCCATOgAwIBAgIULsCjXxVI421Uh7nU1PYS5Lro7nYwCgYIKoZIzj0EAwIw
    GzEZMBcGA1UEAwwQYnVja2V0ZnMgdGVzdCBDQTAgFw0yNjEyMDEyMTU2MTJaGA8y
    MTI2MTEwNzIxNTYxMlowGzEZMBcGA1UEAwwQYnVja2V0ZnMgdGVzdCBDQTBZMBMG
    ByqGSM49AgEGCCqGSM49AwEHA0IABAVxJbjC2bTQi1gicgiBgej4IwZgaUE88XeF
    L89IWhK3QaDvyMZ/kGJgzdnMlRT15+W2VeycTD5twsegesa9/2KjUzBRMB0GA1Ud
    DgQWBBTwjt3btsoGqeYim9zsOJ7xOyQbMzAfBgNVHSMEGDAWgBTwjt3btsoGqeYi
    m9zsOJ7xOyQbMzAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0cAMEQCIDW+
    m87CrX/z8ydCn2K5s0X1KLGTTbVA2JMScbolTcQHAiBRnJdK+M/hwhwzxc+zP+nR
    aH+of8G9w3PM300owvPD1w==
    -----END CERTIFICATE-----

    """

  /// Signed by the CA above, valid in 2000 only.
  static let expiredPEM = """
    -----BEGIN CERTIFICATE-----
    MIIBezCCASKgAwIBAgIBATAKBggqhkjOPQQDAjAbMRkwFwYDVQQDDBBidWNrZXRm
    cyB0ZXN0IENBMB4XDTAwMDEwMTAwMDAwMFoXDTAxMDEwMTAwMDAwMFowFDESMBAG
    A1UEAwwJbG9jYWxob3N0MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE64K59NY7
    //3WbIcHgPfYXvbFvH0llpQ7iYWpA/fzyyyzciYVERRIBd+JsD9vyoVIvZ0DuGFx
    CNXwNP4iP0OXdKNeMFwwGgYDVR0RBBMwEYIJbG9jYWxob3N0hwR/AAABMB0GA1Ud
    DgQWBBRXkkKR96ev2dE+cYihTaCdbxt9XjAfBgNVHSMEGDAWgBTwjt3btsoGqeYi
    m9zsOJ7xOyQbMzAKBggqhkjOPQQDAgNHADBEAiAmLbgYl5YvPvoYeDGu9RDf9uZB
    d+DAfipPp2qfa0wlRAIgfVi3/4O40tTbt64yBxdWDY5LGJn2T67dKEcjNj7OUIA=
    -----END CERTIFICATE-----

    """
}

import _CryptoExtras

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

/// RS256 JSON Web Signatures (RFC 7515, compact form) made with a service-account key.
enum JWS {
  struct Header: Encodable {
    let alg: String
    let typ: String
    let kid: String?
  }

  /// `header.claims.signature`, each base64url without padding; the header names the key.
  static func sign<Claims: Encodable>(_ claims: Claims, key: ServiceAccountKey) throws -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = .sortedKeys
    let header: Data
    let body: Data
    do {
      header = try encoder.encode(Header(alg: "RS256", typ: "JWT", kid: key.privateKeyID))
      body = try encoder.encode(claims)
    } catch {
      throw CredentialsError.invalidFile(path: key.clientEmail, reason: "the token request cannot be encoded")
    }
    let signingInput = Base64URL.encode(Array(header)) + "." + Base64URL.encode(Array(body))
    let signature: _RSA.Signing.RSASignature
    do {
      signature = try key.signingKey.signature(for: Array(signingInput.utf8), padding: .insecurePKCS1v1_5)
    } catch {
      throw CredentialsError.invalidFile(path: key.clientEmail, reason: "the private key cannot sign")
    }
    return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
  }
}

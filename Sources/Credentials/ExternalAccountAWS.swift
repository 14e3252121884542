import Logging

/// The AWS subject-token source (`credential_source.environment_id` aws1): the file's
/// fields become ``AWSCredentialSource/Settings``, and the signed GetCallerIdentity request
/// that source makes is the subject token.
/// The `aws1` fields of a `credential_source` (a public face for the AWS source's settings).
public struct AWSSubjectTokenSettings: Sendable {
  let settings: AWSCredentialSource.Settings

  init(_ fields: JSONFields, environmentID: String) throws {
    settings = try AWSCredentialSource.Settings(fields, environmentID: environmentID)
  }

  func subjectToken(_ context: SubjectTokenSource.Context) async throws -> String {
    try await settings.subjectToken(context)
  }
}

extension AWSCredentialSource.Settings {
  init(_ fields: JSONFields, environmentID: String) throws {
    guard environmentID == "aws1" else {
      let shown =
        environmentID.count <= 20 && environmentID.allSatisfy { $0.isLetter || $0.isNumber }
        ? environmentID : "?"
      throw fields.invalid("field credential_source.environment_id \(shown) is not supported (only aws1)")
    }
    // The instance metadata service answers at link-local addresses over plain http.
    func metadataURL(_ key: String) throws -> String? {
      guard let url = try fields.string(key) else { return nil }
      let lower = url.lowercased()
      if lower.hasPrefix("http://[fd00:ec2::254]") { return url }
      try SecureURL.checkSubjectTokenURL(url, field: "credential_source.\(key)", path: fields.path)
      return url
    }
    let verification = try fields.required("regional_cred_verification_url")
    guard verification.lowercased().hasPrefix("https://") else {
      throw fields.invalid("field credential_source.regional_cred_verification_url is not an https URL")
    }
    self.init(
      regionURL: try metadataURL("region_url"), url: try metadataURL("url"),
      imdsv2SessionTokenURL: try metadataURL("imdsv2_session_token_url"),
      regionalCredVerificationURL: verification)
  }

  func subjectToken(_ context: SubjectTokenSource.Context) async throws -> String {
    try await AWSCredentialSource(
      source: self, environment: context.environment, http: context.http, logger: context.logger
    ).subjectToken(audience: context.audience)
  }
}

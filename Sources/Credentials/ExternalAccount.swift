/// An `external_account` file: workload or workforce identity federation. A token from
/// another identity provider (the subject token, from `credential_source`) is exchanged at
/// Google's Security Token Service for an access token, which may then impersonate a service
/// account. The client secret stays inside the module.
public struct ExternalAccount: Sendable, CustomStringConvertible {
  public let audience: String
  public let subjectTokenType: String
  public let tokenURL: String
  public let source: SubjectTokenSource
  /// `…/serviceAccounts/EMAIL:generateAccessToken`, when the STS token is to impersonate.
  public let impersonationURL: String?
  /// `service_account_impersonation.token_lifetime_seconds` (default an hour).
  public let impersonatedLifetime: Int
  public let clientID: String?
  let clientSecret: String?
  /// Sent to STS as `options.userProject` for a workforce pool used without a client.
  public let workforcePoolUserProject: String?
  public let quotaProject: String?
  public let universeDomain: String

  public var description: String {
    var text = "external account \(audience) (\(source))"
    if let email = impersonationURL.flatMap(ImpersonationURL.serviceAccount) {
      text += ", impersonating \(email)"
    }
    return text
  }

  init(_ fields: JSONFields) throws {
    audience = try fields.required("audience")
    subjectTokenType = try fields.required("subject_token_type")
    guard let tokenURL = try fields.secureURL("token_url") else {
      throw fields.invalid("field token_url is missing")
    }
    self.tokenURL = tokenURL
    impersonationURL = try fields.secureURL("service_account_impersonation_url", required: false)
    if let impersonationURL, ImpersonationURL.serviceAccount(impersonationURL) == nil {
      throw fields.invalid(
        "field service_account_impersonation_url does not end in serviceAccounts/EMAIL:generateAccessToken")
    }
    var lifetime = 3600
    if let options = try fields.object("service_account_impersonation"),
      let seconds = try options.number("token_lifetime_seconds")
    {
      // The IAM API's bounds: 10 minutes to 12 hours.
      guard seconds.rounded() == seconds, (600...43200).contains(seconds) else {
        throw fields.invalid(
          "field service_account_impersonation.token_lifetime_seconds is not a whole number from 600 to 43200"
        )
      }
      lifetime = Int(seconds)
    }
    impersonatedLifetime = lifetime
    clientID = try fields.string("client_id")
    clientSecret = try fields.string("client_secret")
    workforcePoolUserProject = try fields.string("workforce_pool_user_project")
    quotaProject = try fields.string("quota_project_id")
    universeDomain = try fields.universeDomain()
    _ = try fields.secureURL("token_info_url", required: false)  // checked, though not used
    guard let credentialSource = try fields.object("credential_source") else {
      throw fields.invalid("field credential_source is missing")
    }
    source = try SubjectTokenSource(credentialSource)
  }
}

/// The `generateAccessToken` URL of the IAM Credentials API.
enum ImpersonationURL {
  /// The service account a `…/serviceAccounts/EMAIL:generateAccessToken` URL names.
  static func serviceAccount(_ url: String) -> String? {
    guard let end = url.ranges(of: ":generateAccessToken").last,
      let slash = url[..<end.lowerBound].lastIndex(of: "/")
    else { return nil }
    let email = url[url.index(after: slash)..<end.lowerBound]
    return email.isEmpty ? nil : String(email)
  }
}

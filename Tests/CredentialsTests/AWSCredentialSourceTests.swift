import AsyncHTTPClient
import Foundation
import Logging
import XCTest

@testable import Credentials

/// The AWS credential source against a local stand-in for the AWS instance metadata service.
final class AWSCredentialSourceTests: XCTestCase {
  typealias Google = AWSSignatureV4Tests
  static let audience =
    "//iam.googleapis.com/projects/123456/locations/global/workloadIdentityPools/POOL_ID/providers/PROVIDER_ID"
  static let verification = "https://sts.{region}.amazonaws.com?Action=GetCallerIdentity&Version=2011-06-15"
  static let sessionToken = "imdsv2-session-token-must-stay-private"

  /// What google-auth-library-python makes of Google's test credentials in us-east-2 at
  /// 2020-08-11T06:55:22Z (its signature, serialized by Python's json.dumps and quote).
  static let googleSubjectToken =
    "%7B%22headers%22%3A%5B%7B%22key%22%3A%22Authorization%22%2C%22value%22%3A%22AWS4-HMAC-SHA256%20C"
    + "redential%3DAKIAIOSFODNN7EXAMPLE/20200811/us-east-2/sts/aws4_request%2C%20SignedHeaders%3Dhost%3"
    + "Bx-amz-date%3Bx-amz-security-token%2C%20Signature%3D596aa990b792d763465d73703e684ca273c45536c6d3"
    + "22c31be01a41d02e5b60%22%7D%2C%7B%22key%22%3A%22host%22%2C%22value%22%3A%22sts.us-east-2.amazonaw"
    + "s.com%22%7D%2C%7B%22key%22%3A%22x-amz-date%22%2C%22value%22%3A%2220200811T065522Z%22%7D%2C%7B%22"
    + "key%22%3A%22x-amz-security-token%22%2C%22value%22%3A%22AQoEXAMPLEH4aoAH0gNCAPyJxz4BlCFFxWNE1OPTg"
    + "k5TthT%2BFvwqnKwRcOIfrRh3c/LTo6UDdyJwOOvEVPvLXCrrrUtdnniCEXAMPLE/IvU1dYUg2RVAJBanLiHb4IgRmpRV3zr"
    + "kuWJOgQs8IZZaIv2BXIa2R4OlgkBN9bkUDNCJiBeb/AXlzBBko7b15fjrBs2%2BcTQtpZ3CYWFXG8C5zqx37wnOE49mRl/%2"
    + "BOtkIKGO7fAE%22%7D%2C%7B%22key%22%3A%22x-goog-cloud-target-resource%22%2C%22value%22%3A%22//iam."
    + "googleapis.com/projects/123456/locations/global/workloadIdentityPools/POOL_ID/providers/PROVIDER"
    + "_ID%22%7D%5D%2C%22method%22%3A%22POST%22%2C%22url%22%3A%22https%3A//sts.us-east-2.amazonaws.com%"
    + "3FAction%3DGetCallerIdentity%26Version%3D2011-06-15%22%7D"

  /// The metadata service: IMDSv2 when `requireSessionToken` (every GET must carry the token),
  /// region us-east-2 (zone us-east-2b), role gcp-aws-role with Google's test credentials;
  /// `roleStatus` answers the role-name URL.
  func metadataHandler(requireSessionToken: Bool, roleStatus: Int = 200) -> LocalHTTPServer.Handler {
    { request in
      func text(_ status: Int, _ body: String) -> LocalHTTPServer.Response {
        LocalHTTPServer.Response(status: status, headers: [("Content-Type", "text/plain")], body: body)
      }
      if request.method == "PUT" && request.path == "/latest/api/token" {
        guard request.header("X-aws-ec2-metadata-token-ttl-seconds") == "300" else { return text(400, "ttl") }
        return text(200, Self.sessionToken)
      }
      if requireSessionToken && request.header("X-aws-ec2-metadata-token") != Self.sessionToken {
        return text(401, "")
      }
      switch (request.method, request.path) {
      case ("GET", "/latest/meta-data/placement/availability-zone"): return text(200, "us-east-2b")
      case ("GET", "/latest/meta-data/iam/security-credentials"):
        return text(roleStatus, roleStatus == 200 ? "gcp-aws-role" : "backend error")
      case ("GET", "/latest/meta-data/iam/security-credentials/gcp-aws-role"):
        return .json(
          200,
          try! jsonObject([
            "Code": "Success", "AccessKeyId": Google.googleKey, "SecretAccessKey": Google.googleSecret,
            "Token": Google.googleToken, "Type": "AWS-HMAC",
          ]))
      default: return text(404, "")
      }
    }
  }

  func settings(_ server: LocalHTTPServer, imdsv2: Bool) -> AWSCredentialSource.Settings {
    AWSCredentialSource.Settings(
      regionURL: server.url + "/latest/meta-data/placement/availability-zone",
      url: server.url + "/latest/meta-data/iam/security-credentials",
      imdsv2SessionTokenURL: imdsv2 ? server.url + "/latest/api/token" : nil,
      regionalCredVerificationURL: Self.verification)
  }

  func source(
    _ settings: AWSCredentialSource.Settings, environment: [String: String] = [:], http: HTTPClient,
    logger: Logger = quietLogger()
  ) -> AWSCredentialSource {
    var source = AWSCredentialSource(source: settings, environment: environment, http: http, logger: logger)
    source.clock = { Google.googleTime }
    return source
  }

  func testIMDSv2SessionTokenGoesWithEveryMetadataRequest() async throws {
    let (logger, lines) = capturingLogger()
    try await withLocalServer(metadataHandler(requireSessionToken: true)) { server in
      try await withHTTPClient { http in
        let token = try await source(settings(server, imdsv2: true), http: http, logger: logger)
          .subjectToken(audience: Self.audience)
        XCTAssertEqual(token, Self.googleSubjectToken)
        let requests = server.requests
        XCTAssertEqual(
          requests.map { "\($0.method) \($0.path)" },
          [
            "PUT /latest/api/token", "GET /latest/meta-data/placement/availability-zone",
            "GET /latest/meta-data/iam/security-credentials",
            "GET /latest/meta-data/iam/security-credentials/gcp-aws-role",
          ])
        for request in requests.dropFirst() {
          XCTAssertEqual(request.header("X-aws-ec2-metadata-token"), Self.sessionToken, request.path)
        }
        XCTAssertEqual(requests.last?.header("Content-Type"), "application/json")
      }
    }
    for line in lines.current {
      for secret in [Google.googleSecret, Google.googleToken, Self.sessionToken, "596aa990b792d763465d7370"] {
        XCTAssertFalse(line.contains(secret), line)
      }
    }
  }

  func testWithoutIMDSv2NoSessionToken() async throws {
    try await withLocalServer(metadataHandler(requireSessionToken: false)) { server in
      try await withHTTPClient { http in
        let token = try await source(settings(server, imdsv2: false), http: http)
          .subjectToken(audience: Self.audience)
        XCTAssertEqual(token, Self.googleSubjectToken)
        XCTAssertEqual(server.requests.count, 3)
        XCTAssertFalse(
          server.requests.contains { $0.method == "PUT" || $0.header("X-aws-ec2-metadata-token") != nil })
      }
    }
  }

  /// Region and keys in the environment: the metadata service is not asked at all, IMDSv2 or not.
  func testEnvironmentCredentialsAndRegionNeedNoMetadataServer() async throws {
    let environment = [
      "AWS_REGION": "us-east-2", "AWS_ACCESS_KEY_ID": Google.googleKey,
      "AWS_SECRET_ACCESS_KEY": Google.googleSecret, "AWS_SESSION_TOKEN": Google.googleToken,
    ]
    try await withLocalServer(metadataHandler(requireSessionToken: true)) { server in
      try await withHTTPClient { http in
        let token = try await source(settings(server, imdsv2: true), environment: environment, http: http)
          .subjectToken(audience: Self.audience)
        XCTAssertEqual(token, Self.googleSubjectToken)
        XCTAssertEqual(server.requests.count, 0)
      }
    }
    // Without a session token nothing names one.
    try await withHTTPClient { http in
      var plain = environment
      plain["AWS_SESSION_TOKEN"] = nil
      let token = try await source(
        .init(regionalCredVerificationURL: Self.verification), environment: plain, http: http
      ).subjectToken(audience: Self.audience)
      let decoded = try XCTUnwrap(token.removingPercentEncoding)
      XCTAssertFalse(decoded.contains("x-amz-security-token"), decoded)
      XCTAssertTrue(
        decoded.contains("Signature=9e722e5b7bfa163447e2a14df118b45ebd283c5aea72019bdf921d6e7dc01a9a"))
    }
  }

  /// AWS_DEFAULT_REGION alone: no region request, but the role is still asked, with IMDSv2.
  func testEnvironmentRegionWithMetadataCredentials() async throws {
    try await withLocalServer(metadataHandler(requireSessionToken: true)) { server in
      try await withHTTPClient { http in
        let token = try await source(
          settings(server, imdsv2: true), environment: ["AWS_DEFAULT_REGION": "us-east-2"], http: http
        ).subjectToken(audience: Self.audience)
        XCTAssertEqual(token, Self.googleSubjectToken)
        XCTAssertEqual(
          server.requests.map(\.path),
          [
            "/latest/api/token", "/latest/meta-data/iam/security-credentials",
            "/latest/meta-data/iam/security-credentials/gcp-aws-role",
          ])
      }
    }
  }

  func testRoleURLAnswering500IsAClearError() async throws {
    try await withLocalServer(metadataHandler(requireSessionToken: false, roleStatus: 500)) { server in
      try await withHTTPClient { http in
        let message = await errorDescription {
          try await source(settings(server, imdsv2: false), http: http).subjectToken(audience: Self.audience)
        }
        XCTAssertEqual(
          message,
          "the AWS metadata server at \(server.url)/latest/meta-data/iam/security-credentials refused the role "
            + "name: HTTP 500")
      }
    }
  }

  func testURLsOutsideTheMetadataServerAreRefusedUnasked() async throws {
    try await withHTTPClient { http in
      let cases: [(AWSCredentialSource.Settings, String)] = [
        (
          .init(
            regionURL: "http://example.com/latest/meta-data/placement/availability-zone",
            regionalCredVerificationURL: Self.verification),
          "credential_source.region_url names host example.com: only the AWS metadata server "
            + "(169.254.169.254, [fd00:ec2::254]) or loopback may be asked for AWS credentials"
        ),
        (
          .init(url: "https://169.254.169.254/latest", regionalCredVerificationURL: Self.verification),
          "credential_source.url must be an http:// URL of the AWS metadata server"
        ),
        (
          .init(regionalCredVerificationURL: "http://sts.{region}.amazonaws.com"),
          "credential_source.regional_cred_verification_url is not an https URL"
        ),
      ]
      for (settings, expected) in cases {
        let message = await errorDescription {
          try await source(settings, environment: ["AWS_REGION": "us-east-2"], http: http)
            .subjectToken(audience: Self.audience)
        }
        XCTAssertEqual(message, expected)
      }
      // The metadata service's own addresses pass the check.
      for url in ["http://169.254.169.254/latest/api/token", "http://[fd00:ec2::254]/latest/api/token"] {
        XCTAssertNoThrow(try AWSCredentialSource.checkMetadataURL(url, field: "imdsv2_session_token_url"))
      }
    }
  }

  func testJSONStringsAreWrittenAsPythonWritesThem() {
    XCTAssertEqual(AWSCredentialSource.jsonString("a\"b\\c\nd/é"), #""a\"b\\c\nd/\u00e9""#)
  }
}

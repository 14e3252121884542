import XCTest

@testable import Credentials

/// The SigV4 signer against AWS's published test suite (aws-sig-v4-test-suite: the canonical
/// request, string to sign and Authorization of each case) and against the signatures
/// google-auth-library-python's tests expect for the GetCallerIdentity request.
final class AWSSignatureV4Tests: XCTestCase {
  // The suite's credentials, region, service and time (2015-08-30T12:36:00Z).
  let suite = AWSSignatureV4.Credentials(
    accessKeyID: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
  let suiteTime: Int64 = 1_440_938_160
  let signer = AWSSignatureV4(region: "us-east-1", service: "service")
  let suiteHeaders = [("Host", "example.amazonaws.com"), ("X-Amz-Date", "20150830T123600Z")]
  let emptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

  func sign(
    _ method: String, query: String = "", headers extra: [(String, String)] = [], body: String = "",
    credentials: AWSSignatureV4.Credentials? = nil
  ) -> AWSSignatureV4.Signed {
    signer.sign(
      method: method, path: "/", query: query, headers: suiteHeaders + extra, payload: Array(body.utf8),
      credentials: credentials ?? suite, time: suiteTime)
  }

  func testGetVanilla() {
    let signed = sign("GET")
    XCTAssertEqual(signed.amzDate, "20150830T123600Z")
    XCTAssertEqual(
      signed.canonicalRequest,
      "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n\(emptyHash)")
    XCTAssertEqual(
      signed.stringToSign,
      "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
        + "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63")
    XCTAssertEqual(
      signed.authorization,
      "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        + "SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
    )
  }

  /// get-vanilla-query: `GET /` with an empty query signs as get-vanilla.
  func testGetVanillaQuery() {
    let signed = signer.sign(
      method: "GET", path: "", query: "", headers: suiteHeaders, payload: [], credentials: suite,
      time: suiteTime)
    XCTAssertTrue(
      signed.authorization.hasSuffix(
        "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"))
  }

  func testGetVanillaQueryOrderKey() {
    let signed = sign("GET", query: "Param1=value2&Param1=Value1")
    XCTAssertEqual(
      signed.canonicalRequest,
      "GET\n/\nParam1=Value1&Param1=value2\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
        + "host;x-amz-date\n\(emptyHash)")
    XCTAssertEqual(
      signed.stringToSign,
      "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
        + "704b4cef673542d84cdff252633f065e8daeba5f168b77116f8b1bcaf3d38f89")
    XCTAssertEqual(
      signed.authorization,
      "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        + "SignedHeaders=host;x-amz-date, Signature=eedbc4e291e521cf13422ffca22be7d2eb8146eecf653089df300a15b2382bd1"
    )
  }

  func testPostVanilla() {
    XCTAssertEqual(
      sign("POST").authorization,
      "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        + "SignedHeaders=host;x-amz-date, Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"
    )
  }

  func testPostXWWWFormURLEncoded() {
    let signed = sign(
      "POST", headers: [("Content-Type", "application/x-www-form-urlencoded")], body: "Param1=value1")
    XCTAssertEqual(
      signed.canonicalRequest,
      "POST\n/\n\ncontent-type:application/x-www-form-urlencoded\nhost:example.amazonaws.com\n"
        + "x-amz-date:20150830T123600Z\n\ncontent-type;host;x-amz-date\n"
        + "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e")
    XCTAssertEqual(
      signed.stringToSign,
      "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
        + "42a5e5bb34198acb3e84da4f085bb7927f2bc277ca766e6d19c73c2154021281")
    XCTAssertEqual(
      signed.authorization,
      "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        + "SignedHeaders=content-type;host;x-amz-date, "
        + "Signature=ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a")
  }

  func testGetHeaderValueTrim() {
    let signed = sign("GET", headers: [("My-Header1", " value1"), ("My-Header2", #" "a   b   c""#)])
    XCTAssertTrue(signed.canonicalRequest.contains("my-header1:value1\nmy-header2:\"a b c\"\n"))
    XCTAssertEqual(
      signed.authorization,
      "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        + "SignedHeaders=host;my-header1;my-header2;x-amz-date, "
        + "Signature=acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736")
  }

  /// post-sts-header-before: the session token signed as a header.
  func testPostSTSHeaderBefore() {
    let token =
      "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflfK"
      + "D8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HFvl"
      + "Rd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4"
      + "rvx3iSIlTJabIQwj2ICCR/oLxBA=="
    XCTAssertEqual(
      sign("POST", headers: [("X-Amz-Security-Token", token)]).authorization,
      "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        + "SignedHeaders=host;x-amz-date;x-amz-security-token, "
        + "Signature=85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead")
  }

  // MARK: google-auth-library-python's expectations (tests/test_aws.py)

  static let googleKey = "AKIAIOSFODNN7EXAMPLE"
  static let googleSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
  static let googleToken =
    "AQoEXAMPLEH4aoAH0gNCAPyJxz4BlCFFxWNE1OPTgk5TthT+FvwqnKwRcOIfrRh3c/LTo6UDdyJwOOvEVPvLXCrrrUtdnniCEXAMPLE/"
    + "IvU1dYUg2RVAJBanLiHb4IgRmpRV3zrkuWJOgQs8IZZaIv2BXIa2R4OlgkBN9bkUDNCJiBeb/AXlzBBko7b15fjrBs2+cTQtpZ3CYWFXG8"
    + "C5zqx37wnOE49mRl/+OtkIKGO7fAE"
  /// 2020-08-11T06:55:22Z.
  static let googleTime: Int64 = 1_597_128_922

  func testGetCallerIdentityAsGoogleSignsIt() {
    let sts = AWSSignatureV4(region: "us-east-2", service: "sts")
    for (token, expected) in [
      (nil, "9e722e5b7bfa163447e2a14df118b45ebd283c5aea72019bdf921d6e7dc01a9a"),
      (Self.googleToken, "596aa990b792d763465d73703e684ca273c45536c6d322c31be01a41d02e5b60"),
    ] as [(String?, String)] {
      var headers = [("host", "sts.us-east-2.amazonaws.com"), ("x-amz-date", "20200811T065522Z")]
      if let token { headers.append(("x-amz-security-token", token)) }
      let signed = sts.sign(
        method: "POST", path: "", query: "Action=GetCallerIdentity&Version=2011-06-15", headers: headers,
        payload: [],
        credentials: .init(
          accessKeyID: Self.googleKey, secretAccessKey: Self.googleSecret, sessionToken: token),
        time: Self.googleTime)
      XCTAssertEqual(
        signed.authorization,
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20200811/us-east-2/sts/aws4_request, SignedHeaders="
          + (token == nil ? "host;x-amz-date" : "host;x-amz-date;x-amz-security-token")
          + ", Signature=\(expected)")
    }
  }

  func testCanonicalPathResolvesDotSegments() {
    XCTAssertEqual(AWSSignatureV4.canonicalPath(""), "/")
    XCTAssertEqual(AWSSignatureV4.canonicalPath("/./foo"), "/foo")
    XCTAssertEqual(AWSSignatureV4.canonicalPath("/foo/bar/../.."), "/")
    XCTAssertEqual(AWSSignatureV4.canonicalPath("/a/b/"), "/a/b/")
  }
}

import AsyncHTTPClient
import Foundation
import NIOPosix
import XCTest

@testable import Credentials

/// Finding the metadata server where the firmware says nothing, and trusting only answers
/// that carry `Metadata-Flavor: Google`.
final class MetadataProbeTests: XCTestCase {
  static let tokenBody = #"{"access_token":"vm-token","expires_in":3599,"token_type":"Bearer"}"#

  /// A metadata server stand-in; `flavored`: whether its answers say `Metadata-Flavor: Google`.
  func handler(flavored: Bool) -> LocalHTTPServer.Handler {
    { request in
      guard request.header("Metadata-Flavor") == "Google" else { return .json(403, "no flavor") }
      let headers = [("Content-Type", "application/json")] + (flavored ? [("Metadata-Flavor", "Google")] : [])
      let body = request.path == "/" ? "computeMetadata/" : Self.tokenBody
      return LocalHTTPServer.Response(status: 200, headers: headers, body: body)
    }
  }

  func testPingTakesOnlyAnAnswerWithTheHeader() async throws {
    try await withLocalServer(handler(flavored: true)) { real in
      try await withLocalServer(handler(flavored: false)) { impostor in
        try await withHTTPClient { http in
          let realHost = "127.0.0.1:\(real.port)"
          let impostorHost = "127.0.0.1:\(impostor.port)"
          XCTAssertEqual(MetadataServerProbe.ping([realHost], http: http), realHost)
          XCTAssertEqual(real.requests.first?.header("Metadata-Flavor"), "Google")
          XCTAssertEqual(real.requests.first?.path, "/")
          XCTAssertNil(MetadataServerProbe.ping([impostorHost], http: http))
          XCTAssertEqual(impostor.requests.count, 1, "an answer without the header is final: no retry")
          XCTAssertEqual(MetadataServerProbe.ping([impostorHost, realHost], http: http), realHost)
        }
      }
    }
  }

  func testPingOfNothingListeningEndsWithinItsBound() async throws {
    // A port that was free a moment ago: connections are refused, every try fails at once.
    let port = try await withLocalServer({ _ in .json(200, "") }) { $0.port }
    try await withHTTPClient { http in
      let start = ContinuousClock.now
      XCTAssertNil(
        MetadataServerProbe.ping(
          ["127.0.0.1:\(port)"], http: http, attempts: 3, attemptTimeout: .milliseconds(300)))
      XCTAssertLessThan(ContinuousClock.now - start, .seconds(3))
    }
  }

  func testDiscoveryUsesTheHostTheProbeFound() async throws {
    let home = try temporaryDirectory(self)
    try await withLocalServer(handler(flavored: true)) { server in
      try await withHTTPClient { http in
        let provider = try discover(
          explicitFile: nil, environment: ["HOME": home.path], http: http, logger: quietLogger(),
          metadataServerAvailable: { MetadataServerProbe.Answer(host: "127.0.0.1:\(server.port)") })
        let metadata = try XCTUnwrap(provider as? MetadataServerCredentials)
        XCTAssertEqual(metadata.host, "127.0.0.1:\(server.port)")
        let token = try await provider.token(refresh: false)
        XCTAssertEqual(token, "vm-token")
      }
    }
  }

  func testATokenWithoutTheHeaderIsRefused() async throws {
    try await withLocalServer(handler(flavored: false)) { server in
      try await withHTTPClient { http in
        let provider = MetadataServerCredentials(
          host: "127.0.0.1:\(server.port)", http: http, logger: quietLogger())
        let message = await errorDescription { try await provider.token(refresh: false) }
        XCTAssertEqual(
          message,
          "token endpoint http://127.0.0.1:\(server.port)/computeMetadata/v1/instance/service-accounts/default/token "
            + "sent an unusable answer: no Metadata-Flavor: Google header in the answer")
        XCTAssertFalse(message.contains("vm-token"))
      }
    }
  }
}

import CloudStorage
import Foundation
import XCTest

/// `--app-name` reaches the User-Agent, and only names safe in a header are taken.
final class UserAgentTests: XCTestCase {
  func testUserAgentCarriesVersionAndAppName() {
    XCTAssertEqual(Version.userAgent(appName: nil), "bucketfs/\(Version.current)")
    XCTAssertEqual(Version.userAgent(appName: "photos-prod"), "bucketfs/\(Version.current) (photos-prod)")
  }

  /// The build writes VERSION's one line into the code (Plugins/VersionSource), nothing else.
  func testTheVersionIsTheOneInTheVersionFile() throws {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
      .deletingLastPathComponent()
    let file = try String(contentsOf: root.appendingPathComponent("VERSION"), encoding: .utf8)
    XCTAssertEqual(Version.current, file.trimmingCharacters(in: .newlines))
    XCTAssertFalse(Version.current.isEmpty)
  }

  func testAppNamesThatWouldBreakAHeaderAreRefused() {
    XCTAssertTrue(Version.isValidAppName("team/photos_1.2+x"))
    for bad in ["", "a b", "a\r\nX-Evil: 1", "(x)", "é", String(repeating: "a", count: 101)] {
      XCTAssertFalse(Version.isValidAppName(bad), bad)
    }
  }
}

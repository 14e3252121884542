import CloudStorage
import XCTest

/// `--app-name` reaches the User-Agent, and only names safe in a header are taken.
final class UserAgentTests: XCTestCase {
  func testUserAgentCarriesVersionAndAppName() {
    XCTAssertEqual(Version.userAgent(appName: nil), "bucketfs/\(Version.current)")
    XCTAssertEqual(Version.userAgent(appName: "photos-prod"), "bucketfs/\(Version.current) (photos-prod)")
  }

  func testAppNamesThatWouldBreakAHeaderAreRefused() {
    XCTAssertTrue(Version.isValidAppName("team/photos_1.2+x"))
    for bad in ["", "a b", "a\r\nX-Evil: 1", "(x)", "é", String(repeating: "a", count: 101)] {
      XCTAssertFalse(Version.isValidAppName(bad), bad)
    }
  }
}

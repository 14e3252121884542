import ObjectStore
import XCTest

/// The one FNV-1a: inode numbers, stage and cache directories and cache
/// entry files are named by it, so its values must never change.
final class FNV1aTests: XCTestCase {
  func testKnownValues() {
    XCTAssertEqual(FNV1a.hash(""), 0xcbf2_9ce4_8422_2325)
    XCTAssertEqual(FNV1a.hash("a"), 0xaf63_dc4c_8601_ec8c)
    XCTAssertEqual(FNV1a.hex("foobar"), "85944171f73967e8")
    XCTAssertEqual(FNV1a.hex(""), "cbf29ce484222325")
    XCTAssertEqual(FNV1a.hex("a").count, 16)
  }
}

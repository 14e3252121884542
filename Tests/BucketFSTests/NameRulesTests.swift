import XCTest

@testable import BucketFS

final class NameRulesTests: XCTestCase {
  func testValidComponents() {
    let table: [(String, Bool)] = [
      ("happyItem", true), ("a b.txt", true), ("ünïcødé", true), ("日本語", true), (".hidden", true),
      ("...", true), ("", false), (".", false), ("..", false), ("a/b", false), ("nul\u{0}byte", false),
      (String(repeating: "x", count: 255), true), (String(repeating: "x", count: 256), false),
      // 255 bytes is the limit, not 255 characters.
      (String(repeating: "é", count: 127), true), (String(repeating: "é", count: 128), false),
    ]
    for (component, valid) in table {
      XCTAssertEqual(Names.isValidComponent(component), valid, "\(component.debugDescription)")
    }
  }

  func testFileComponents() {
    let table: [(item: String, prefix: String, expected: String?)] = [
      ("correctPrefix/happyItem", "correctPrefix/", "happyItem"),
      ("lonelyItem/", "lonelyItem/", nil),  // the directory's own placeholder
      ("top", "", "top"),
      ("dir/..", "dir/", nil),
      ("dir/" + String(repeating: "y", count: 300), "dir/", nil),
      ("other/x", "dir/", nil),
    ]
    for row in table {
      XCTAssertEqual(
        Names.fileComponent(item: row.item, under: row.prefix).map(String.init), row.expected, row.item)
    }
  }

  func testDirectoryComponents() {
    let table: [(listed: String, prefix: String, expected: String?)] = [
      ("correctPrefix/", "", "correctPrefix"),
      ("wrongPrefix//", "wrongPrefix/", nil),  // an empty component
      ("a/b/", "a/", "b"),
      ("a/./", "a/", nil),
      ("a/b", "a/", nil),
    ]
    for row in table {
      XCTAssertEqual(
        Names.directoryComponent(listed: row.listed, under: row.prefix).map(String.init), row.expected,
        row.listed)
    }
  }

  func testRootPrefixOfSubtreeMounts() {
    XCTAssertEqual(Names.rootPrefix(""), "")
    XCTAssertEqual(Names.rootPrefix("/"), "")
    XCTAssertEqual(Names.rootPrefix("/some/prefix"), "some/prefix/")
    XCTAssertEqual(Names.rootPrefix("/some/prefix/"), "some/prefix/")
    XCTAssertNil(Names.rootPrefix("/some/../x"))
  }

  func testByteWiseOrderMatchesTheService() {
    XCTAssertTrue(Names.precedes("X", "X!a"))
    XCTAssertTrue(Names.precedes("X!a", "X/"))
    XCTAssertTrue(Names.precedes("Z", "a"))
    XCTAssertTrue(Names.precedes("e\u{301}", "é"))  // decomposed sorts before precomposed as bytes
  }

  func testRFC3339() {
    let table: [(String, Int?, Int)] = [
      ("1970-01-01T00:00:00Z", 0, 0),
      ("2024-05-01T10:20:30.123Z", 1_714_558_830, 123_000_000),
      ("2024-05-01T12:20:30+02:00", 1_714_558_830, 0),
      ("2024-05-01T10:20:30.5-00:30", 1_714_560_630, 500_000_000),
      ("2024-13-01T10:20:30Z", nil, 0),
      ("yesterday", nil, 0),
      ("", nil, 0),
    ]
    for (text, seconds, nanos) in table {
      let parsed = RFC3339.parse(text)
      XCTAssertEqual(parsed?.seconds, seconds, text)
      if seconds != nil { XCTAssertEqual(parsed?.nanoseconds, nanos, text) }
    }
    XCTAssertEqual(RFC3339.parseMtime("1700000000")?.seconds, 1_700_000_000)
  }
}

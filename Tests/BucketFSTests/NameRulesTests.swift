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

  /// The byte-wise comparisons (memcmp where the bytes are contiguous)
  /// agree with a walk of the UTF-8 views, for small and long names, equal
  /// prefixes, NFC against NFD, and substrings.
  func testByteWiseComparisonsAgreeWithTheUTF8Views() {
    var random = SystemRandomNumberGenerator()
    let pieces = ["a", "b", "é", "e\u{301}", "/", "日本", "\u{0}", "z", String(repeating: "x", count: 20)]
    func name() -> String {
      (0..<Int.random(in: 0...6, using: &random)).map { _ in pieces.randomElement()! }.joined()
    }
    for _ in 0..<2000 {
      let (a, b) = (name(), name())
      for (x, y) in [(a, b), (a, a), (a, a + "q"), (String(a.reversed()), a)] {
        XCTAssertEqual(
          Names.same(x, y), Array(x.utf8) == Array(y.utf8), "\(x.debugDescription) \(y.debugDescription)")
        XCTAssertEqual(Names.precedes(x, y), Array(x.utf8).lexicographicallyPrecedes(Array(y.utf8)))
        XCTAssertEqual(
          Names.same(x.dropFirst(), y.dropFirst()), Array(x.dropFirst().utf8) == Array(y.dropFirst().utf8))
      }
    }
    XCTAssertFalse(Names.same("caf\u{e9}", "cafe\u{301}"))
    XCTAssertTrue(Names.same("", Substring("")))
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

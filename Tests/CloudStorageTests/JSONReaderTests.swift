import Foundation
import NIOCore
import StorageFake
import XCTest

@testable import CloudStorage

/// The list-page reader against Foundation's JSONSerialization, on text with
/// every kind of escape and value it must read or skip.
final class JSONReaderTests: XCTestCase {
  private func read<T>(_ text: String, _ body: (inout JSONReader) throws -> T) throws -> T {
    try Array(text.utf8).withUnsafeBytes { try JSONReader.read($0, body) }
  }

  /// Strings as JSONSerialization reads them.
  private func oracle(_ text: String) throws -> Any {
    try JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])
  }

  func testStringsMatchJSONSerialization() throws {
    let literals = [
      #""plain""#, #""""#, #""a\"b\\c\/d""#, #""\b\f\n\r\t""#, #""\u0041\u00e9\u4e2d""#,
      #""\ud83d\ude00 emoji""#, #""ünïcødé 文字 🎉""#, #""\u0000 nul""#, #""tab\tend""#,
      #""wrongPrefix\/\/sadItem""#,
    ]
    for literal in literals {
      let expected = try XCTUnwrap(try oracle(literal) as? String, literal)
      XCTAssertEqual(try read(literal) { try $0.readString() }, expected, literal)
    }
  }

  func testRandomStringsRoundTripThroughJSONEncoder() throws {
    var generator = SplitMix64.forTest(seed: 31)
    let pool: [Character] = Array("aZ09/_-. \"\\\n\t\u{1}\u{7f}éß中🎉\u{10FFFF}")
    for _ in 0..<300 {
      let original = String(
        (0..<Int.random(in: 0...24, using: &generator)).map { _ in pool.randomElement(using: &generator)! })
      let text = String(decoding: try JSONEncoder().encode([original]), as: UTF8.self)
      let decoded = try read(text) { reader -> [String] in
        var out: [String] = []
        try reader.readArray { out.append(try $0.readString()) }
        return out
      }
      XCTAssertEqual(decoded, [original])
    }
  }

  /// Skipping finds the end of any string, escaped quotes and backslash runs
  /// included, so the value after it reads whole.
  func testSkippedStringsEndWhereTheyEnd() throws {
    var generator = SplitMix64.forTest(seed: 50)
    let pool: [Character] = Array("a\"\\\\/{}[],:é🎉")
    for _ in 0..<500 {
      let skipped = String(
        (0..<Int.random(in: 0...16, using: &generator)).map { _ in pool.randomElement(using: &generator)! })
      let kept = String(
        (0..<Int.random(in: 0...8, using: &generator)).map { _ in pool.randomElement(using: &generator)! })
      let text = String(decoding: try JSONEncoder().encode(["a": skipped, "b": kept]), as: UTF8.self)
      let read = try read(text) { reader -> String? in
        var value: String?
        try reader.readObject { key, reader in
          if key == "b" { value = try reader.readString() } else { try reader.skipValue() }
        }
        return value
      }
      XCTAssertEqual(read, kept, text)
      let token = ObjectList.nextPageToken(
        in: ByteBuffer(string: #"{"x":{"# + text.dropFirst() + #","nextPageToken":"t"}"#))
      XCTAssertEqual(token, "t", text)
    }
  }

  /// The token read from the end or by a scan from the start is always the
  /// one a full read finds, wherever the members stand and whatever nested
  /// keys or string contents look like it.
  func testNextPageTokenMatchesTheFullRead() throws {
    var generator = SplitMix64.forTest(seed: 74)
    func encoded(_ text: String) throws -> String {
      String(decoding: try JSONEncoder().encode(text), as: UTF8.self)
    }
    let pool: [Character] = Array("aZ/\"\\{}:, é🎉")
    func random() -> String {
      String(
        (0..<Int.random(in: 0...10, using: &generator)).map { _ in pool.randomElement(using: &generator)! })
    }
    let decoys = [#","nextPageToken":"x"}"#, #"nextPageToken"#, #"\"nextPageToken\":\"y\"}"#]
    for _ in 0..<400 {
      let item =
        #"{"name":"p/a","metadata":{"nextPageToken":"#
        + (try encoded(decoys.randomElement(using: &generator)! + random())) + "}}"
      var members = [
        #""kind":"storage#objects""#, #""items":["# + item + "]",
        #""prefixes":[ "# + (try encoded(random())) + " ]",
        #""note":"# + (try encoded(decoys.randomElement(using: &generator)! + random())),
      ]
      if Bool.random(using: &generator) { members.append(#""nextPageToken" : "# + (try encoded(random()))) }
      members.shuffle(using: &generator)
      let space = [" ", "", "\n"].randomElement(using: &generator)!
      let text = "{" + space + members.joined(separator: "," + space) + space + "}" + space
      let full = try read(text) { try ObjectList(reading: &$0) }.nextPageToken
      XCTAssertEqual(ObjectList.nextPageToken(in: ByteBuffer(string: text)), full, text)
      // Last, it is read from the end; anywhere else, not.
      let trailing = Array(text.utf8).withUnsafeBytes {
        JSONReader.trailingString(named: "nextPageToken", in: $0)
      }
      XCTAssertEqual(trailing, members.last!.hasPrefix(#""nextPageToken""#) ? full : nil, text)
    }
  }

  func testMalformedTextThrowsInsteadOfGuessing() {
    let bad = [
      #""unterminated"#, #""bad \q escape""#, #""\ud83d alone""#, #""\udc00 low first""#, #""\u12 short""#,
      #""\u+123""#,
      "\"raw \u{1} control\"", #"{"a":1,}"#, #"[1,]"#, #"{"a" 1}"#, #"{"a":1} trailing"#, #"{"a":tru}"#,
      #"{"a":-}"#, "", "[",
    ]
    for text in bad {
      XCTAssertThrowsError(
        try read(text) { reader -> Void in
          if text.hasPrefix("\"") { _ = try reader.readString() } else { try reader.skipValue() }
        }, text)
    }
    // Invalid UTF-8 inside a string.
    let invalid: [UInt8] = Array(#""ab"#.utf8) + [0xFF, 0x22]
    XCTAssertThrowsError(try invalid.withUnsafeBytes { try JSONReader.read($0) { try $0.readString() } })
  }

  /// Each level of nesting is a recursion: an answer nested a million deep
  /// throws at the limit instead of overflowing the stack.
  func testNestingPastTheLimitThrowsInsteadOfOverflowingTheStack() throws {
    func nested(_ depth: Int, _ open: String, _ inner: String, _ close: String) -> String {
      String(repeating: open, count: depth) + inner + String(repeating: close, count: depth)
    }
    let skip: (inout JSONReader) throws -> Void = { reader in
      try reader.readObject { _, reader in try reader.skipValue() }
    }
    for deep in [
      nested(1_000_000, "[", "", "]"), nested(1_000_000, #"{"a":"#, "1", "}"), nested(513, "[", "", "]"),
    ] {
      XCTAssertThrowsError(try read(#"{"x":"# + deep + "}", skip))
      XCTAssertThrowsError(
        try read(#"{"items":[{"name":"a","x":"# + deep + "}]}") { try ObjectList(reading: &$0) })
    }
    // Up to the limit, counting the object around it, it reads.
    XCTAssertNoThrow(try read(#"{"x":"# + nested(JSONReader.maxDepth - 1, "[", "", "]") + "}", skip))
    XCTAssertNoThrow(try read(#"{"x":"# + nested(JSONReader.maxDepth - 1, #"{"a":"#, "1", "}") + "}", skip))
  }

  func testListPageReadsWhatItNeedsAndSkipsTheRest() throws {
    let text = #"""
      {"kind": "storage#objects",
       "items": [
        {"kind":"storage#object","name":"dir/a\"q","bucket":"b","size":"12","generation":"1795268437723913",
         "metageneration":3,"acl":[{"entity":"x","projectTeam":{},"n":1.5e3,"ok":true,"no":false,"z":null}],
         "timeCreated":"2026-11-21T13:40:37.716874Z","updated":"2026-11-21T13:40:38Z","contentType":null,
         "metadata":{"owner":"ana","gone":null,"ключ":"значение"}},
        {"name":"dir/b","size":0,"generation":"7","metageneration":"1","metadata":null}
       ],
       "prefixes": ["dir/sub/", null],
       "nextPageToken": "dir/b"
      }
      """#
    let page = try read(text) { try ObjectList(reading: &$0) }
    XCTAssertEqual(page.items.map(\.name), ["dir/a\"q", "dir/b"])
    XCTAssertEqual(page.items[0].size, 12)
    XCTAssertEqual(page.items[0].generation, 1_795_268_437_723_913)
    XCTAssertEqual(page.items[0].metageneration, 3)
    XCTAssertNil(page.items[0].contentType)
    XCTAssertEqual(page.items[0].metadata, ["owner": "ana", "ключ": "значение"])
    XCTAssertEqual(page.items[1].size, 0)
    XCTAssertNil(page.items[1].metadata)
    XCTAssertEqual(page.prefixes, ["dir/sub/"])
    XCTAssertEqual(page.nextPageToken, "dir/b")

    XCTAssertThrowsError(try read(#"{"items":[{"size":"1"}]}"#) { try ObjectList(reading: &$0) }, "no name")
    XCTAssertThrowsError(try read(#"{"items":[{"name":"a","size":"x1"}]}"#) { try ObjectList(reading: &$0) })
    XCTAssertEqual(try read("{}") { try ObjectList(reading: &$0) }.items.count, 0)
  }
}

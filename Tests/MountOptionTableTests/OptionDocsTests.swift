import BucketFS
import CloudStorage
import Foundation
import MountOptionTable
import ServiceAccess
import XCTest

/// The options table is the one source of each option's name, default and
/// meaning: README.md shows it as it is, docs/SEMANTICS.md states each
/// default at most once and as the table has it, and the libraries'
/// own defaults (used when a caller sets nothing) agree with it.
final class OptionDocsTests: XCTestCase {
  static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

  static func document(_ path: String) throws -> String {
    try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
  }

  func testReadmeShowsTheTable() throws {
    let readme = try Self.document("README.md")
    let lines = readme.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    guard let start = lines.firstIndex(of: "| option | default | meaning |") else {
      return XCTFail("README.md has no options table")
    }
    let shown = lines[start...].prefix { $0.hasPrefix("|") }.joined(separator: "\n")
    let expected = MountOptionTable.markdownTable
    guard shown != expected else { return }
    let shownRows = shown.split(separator: "\n").map(String.init)
    let expectedRows = expected.split(separator: "\n").map(String.init)
    for row in shownRows where !expectedRows.contains(row) {
      XCTFail("README.md row not in the table: \(row)")
    }
    for row in expectedRows where !shownRows.contains(row) {
      XCTFail("table row missing from README.md: \(row)")
    }
    XCTFail("README.md's options table differs from MountOptionTable; it should read:\n\(expected)")
  }

  /// Every "(default X)" in SEMANTICS.md belongs to the option named last
  /// before it, is that option's default, and is the only one for it.
  func testSemanticsStatesEachDefaultOnceAndAsTheTableHasIt() throws {
    let text = try Self.document("docs/SEMANTICS.md").replacingOccurrences(of: "\n", with: " ")
    let statements = Self.defaultStatements(in: text)
    XCTAssertFalse(statements.isEmpty, "SEMANTICS.md states no option default")
    var seen: [String: Int] = [:]
    for (option, phrase) in statements {
      guard let row = MountOptionTable.rows.first(where: { $0.spelling == option }) else {
        XCTFail("SEMANTICS.md states a default for \(option), which is no option: (default \(phrase)")
        continue
      }
      seen[option, default: 0] += 1
      if let expected = row.numericDefault {
        XCTAssertEqual(
          Self.number(phrase, unit: row.unit), expected,
          "SEMANTICS.md: \(option) (default \(phrase)…; the table says \(row.defaultText)")
      } else {
        for token in Self.codeSpans(row.defaultText) {
          XCTAssertTrue(
            phrase.contains("`\(token)`"),
            "SEMANTICS.md: \(option) (default \(phrase)…; the table says \(row.defaultText)")
        }
      }
    }
    for (option, count) in seen where count > 1 {
      XCTFail("SEMANTICS.md states the default of \(option) \(count) times; state it once and link to it")
    }
  }

  /// The defaults the libraries fall back on are the table's.
  func testLibraryDefaultsAreTheTables() {
    typealias T = MountOptionTable
    let configuration = Configuration()
    XCTAssertEqual(configuration.pageSize, T.pageSize.value)
    XCTAssertEqual(configuration.metadataTTL, T.metadataTTL.value)
    XCTAssertEqual(configuration.negativeTTL, T.negativeTTL.value)
    XCTAssertEqual(configuration.renameDirectoryLimit, T.renameDirLimit.value)
    XCTAssertEqual(configuration.retryDeadline, T.retryDeadline.value)
    XCTAssertEqual(configuration.readAheadBudget, T.readAheadBudget.value << 20)
    XCTAssertEqual(configuration.maxInodes, T.maxInodes.value)
    XCTAssertEqual(configuration.metadataCacheBytes, T.metadataCacheSize.value << 20)
    XCTAssertEqual(configuration.firebaseDownloadTokens, T.firebaseDownloadTokens.value)
    let retry = RetryPolicy()
    XCTAssertEqual(retry.attemptTimeout, T.requestTimeout.value)
    XCTAssertEqual(retry.deadline, T.retryDeadline.value)
    let uploads = UploadPolicy()
    XCTAssertEqual(uploads.threshold, T.uploadThreshold.value)
    XCTAssertEqual(uploads.chunkSize, T.uploadChunkSize.value)
    XCTAssertEqual(uploads.compositeThreshold, Int64(T.compositeUploadThreshold.value) << 20)
    XCTAssertEqual(uploads.partSize, Int64(T.compositePartSize.value) << 20)
    XCTAssertEqual(Self.codeSpans(T.endpoint.defaultText), [Endpoint.production])
    XCTAssertEqual(CloudStorageClient.defaultMaxConnections, T.maxConnections.value)
  }

  /// The checks above fail when a default differs.
  func testAChangedDefaultIsCaught() {
    let text =
      "kept for `--page-size` (default 999) entries and `--metadata-ttl` (default 60 s); `--metadata-ttl` (default 60)"
    let statements = Self.defaultStatements(in: text)
    XCTAssertEqual(statements.map(\.option), ["--page-size", "--metadata-ttl", "--metadata-ttl"])
    XCTAssertEqual(Self.number(statements[0].phrase, unit: .count), 999)
    XCTAssertNotEqual(
      Self.number(statements[0].phrase, unit: .count), MountOptionTable.pageSize.row.numericDefault)
    XCTAssertEqual(Self.number(statements[1].phrase, unit: .seconds), 60)
    XCTAssertEqual(Self.number("8 MiB, a", unit: .bytes), Double(8 << 20))
    XCTAssertEqual(Self.number("1,000; 0", unit: .count), 1000)
    XCTAssertNil(Self.number("`/x` for root", unit: .count))
  }

  // MARK: - Reading prose

  /// Each "(default " with the last `--option` written in the 120 characters before it.
  static func defaultStatements(in text: String) -> [(option: String, phrase: String)] {
    var found: [(String, String)] = []
    var rest = text[...]
    while let marker = rest.range(of: "(default ") {
      let from: String.Index =
        text.index(marker.lowerBound, offsetBy: -120, limitedBy: text.startIndex) ?? text.startIndex
      let before: Substring = text[from..<marker.lowerBound]
      let phraseEnd = rest[marker.upperBound...].firstIndex(of: ")") ?? rest.endIndex
      let phrase = String(rest[marker.upperBound..<phraseEnd])
      if let option = lastOption(in: before) {
        found.append((option, phrase))
      }
      rest = rest[marker.upperBound...]
    }
    return found
  }

  static func lastOption(in text: Substring) -> String? {
    var last: String?
    var rest = text
    while let dashes = rest.range(of: "--") {
      let name = rest[dashes.upperBound...].prefix { $0.isLowercase || $0 == "-" }
      if !name.isEmpty { last = "--" + name }
      rest = rest[dashes.upperBound...]
    }
    return last
  }

  /// The number a phrase starts with ("8 MiB", "1,000", "60 s"), in the option's unit.
  static func number(_ phrase: String, unit: OptionUnit) -> Double? {
    var digits = ""
    var rest = phrase[...]
    while let c = rest.first, c.isNumber || c == "." || (c == "," && isThousands(rest.dropFirst())) {
      if c != "," { digits.append(c) }
      rest = rest.dropFirst()
    }
    guard var value = Double(digits) else { return nil }
    let suffix = rest.drop { $0 == " " }
    if suffix.hasPrefix("MiB") && unit == .bytes { value *= Double(1 << 20) }
    if suffix.hasPrefix("KiB") && unit == .bytes { value *= 1024 }
    return value
  }

  /// "000" and no digit after: what follows a thousands separator.
  static func isThousands(_ text: Substring) -> Bool {
    let group = text.prefix(3)
    let after = text.dropFirst(3).first
    return group.count == 3 && group.allSatisfy(\.isNumber) && !(after?.isNumber ?? false)
  }

  /// The `code spans` of Markdown text.
  static func codeSpans(_ text: String) -> [String] {
    text.split(separator: "`", omittingEmptySubsequences: false).enumerated().filter { $0.offset % 2 == 1 }
      .map { String($0.element) }
  }
}

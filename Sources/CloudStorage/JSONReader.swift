#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// A forward-only reader of JSON text, for the object resources of list
/// pages: Foundation's JSONDecoder built and dropped a keyed container per
/// object and spent most of a cold `ls -l` doing it (measured: 65 % of the
/// daemon's CPU). This reads each value where it stands and skips the rest.
///
/// Strict where it matters: strings must be valid UTF-8 with valid escapes,
/// and structure errors throw rather than guess.
struct JSONReader {
  struct Failure: Error, CustomStringConvertible {
    let offset: Int
    let reason: String
    var description: String { "invalid JSON at byte \(offset): \(reason)" }
  }

  private let bytes: UnsafeRawBufferPointer
  private(set) var offset = 0
  /// Objects and arrays open around the reader: each one is a recursion,
  /// and an answer nested a million deep would overflow the stack.
  private var depth = 0
  static let maxDepth = 512

  init(_ bytes: UnsafeRawBufferPointer) {
    self.bytes = bytes
  }

  /// Reads one whole document with `body`; nothing but whitespace may follow.
  static func read<T>(_ bytes: UnsafeRawBufferPointer, _ body: (inout JSONReader) throws -> T) throws -> T {
    var reader = JSONReader(bytes)
    let value = try body(&reader)
    reader.skipWhitespace()
    guard reader.offset == bytes.count else { throw reader.failure("trailing characters") }
    return value
  }

  /// The string value of the last member of the top-level object, if that
  /// member is named `name`, read backwards from the end without passing
  /// through the rest; nil otherwise (the caller then reads forwards). Only
  /// the top level can end in `"…" }`: a nested member needs another brace.
  static func trailingString(named name: StaticString, in bytes: UnsafeRawBufferPointer) -> String? {
    var end = bytes.count
    func skipWhitespaceBack() {
      while end > 0, isWhitespace(bytes[end - 1]) { end -= 1 }
    }
    func unescapedQuote(at index: Int) -> Bool {
      bytes[index] == UInt8(ascii: "\"") && !escaped(index, in: bytes, after: 0)
    }
    skipWhitespaceBack()
    guard end > 0, bytes[end - 1] == UInt8(ascii: "}") else { return nil }
    end -= 1
    skipWhitespaceBack()
    guard end > 1, unescapedQuote(at: end - 1) else { return nil }
    let valueEnd = end
    end -= 1
    while end > 0, !unescapedQuote(at: end - 1) { end -= 1 }
    guard end > 0 else { return nil }
    end -= 1
    let valueStart = end
    skipWhitespaceBack()
    guard end > 0, bytes[end - 1] == UInt8(ascii: ":") else { return nil }
    end -= 1
    skipWhitespaceBack()
    let key = UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)
    guard end >= key.count + 2, unescapedQuote(at: end - 1), unescapedQuote(at: end - key.count - 2),
      bytes[(end - key.count - 1)..<(end - 1)].elementsEqual(key)
    else { return nil }
    end -= key.count + 2
    skipWhitespaceBack()
    guard end > 0, bytes[end - 1] == UInt8(ascii: ",") || bytes[end - 1] == UInt8(ascii: "{") else {
      return nil
    }
    var reader = JSONReader(UnsafeRawBufferPointer(rebasing: bytes[valueStart..<valueEnd]))
    return try? reader.readString()
  }

  // MARK: Structure

  /// Calls `body` with each key of an object, positioned at its value, which
  /// `body` must read or skip.
  mutating func readObject(_ body: (String, inout JSONReader) throws -> Void) throws {
    try readMembers { reader in
      let key = try reader.readString()
      try reader.expect(UInt8(ascii: ":"))
      try body(key, &reader)
    }
  }

  /// Calls `member` positioned at each key of an object; it reads the key,
  /// the colon and the value.
  private mutating func readMembers(_ member: (inout JSONReader) throws -> Void) throws {
    try enter()
    defer { depth -= 1 }
    try expect(UInt8(ascii: "{"))
    if try consume(UInt8(ascii: "}")) { return }
    repeat {
      skipWhitespace()
      try member(&self)
    } while try consume(UInt8(ascii: ","))
    try expect(UInt8(ascii: "}"))
  }

  /// Calls `body` positioned at each element of an array.
  mutating func readArray(_ body: (inout JSONReader) throws -> Void) throws {
    try enter()
    defer { depth -= 1 }
    try expect(UInt8(ascii: "["))
    if try consume(UInt8(ascii: "]")) { return }
    repeat {
      try body(&self)
    } while try consume(UInt8(ascii: ","))
    try expect(UInt8(ascii: "]"))
  }

  /// True (and consumed) if the next value is `null`.
  mutating func readNull() throws -> Bool {
    skipWhitespace()
    guard matches("null") else { return false }
    offset += 4
    return true
  }

  /// A string, or nil for `null`.
  mutating func readOptionalString() throws -> String? {
    try readNull() ? nil : try readString()
  }

  /// A boolean; nil for `null`.
  mutating func readOptionalBool() throws -> Bool? {
    if try readNull() { return nil }
    skipWhitespace()
    if matches("true") {
      offset += 4
      return true
    }
    try literal("false")
    return false
  }

  /// An int64 written as the API does (a decimal string) or as a number; nil for `null`.
  mutating func readOptionalInt64() throws -> Int64? {
    if try readNull() { return nil }
    skipWhitespace()
    let start = offset
    let text: String
    if peek() == UInt8(ascii: "\"") {
      text = try readString()
    } else {
      while offset < bytes.count, bytes[offset] == UInt8(ascii: "-") || isDigit(bytes[offset]) { offset += 1 }
      text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<offset]), as: UTF8.self)
    }
    guard let value = Int64(text) else {
      offset = start
      throw failure("not an int64")
    }
    return value
  }

  /// Skips one value of any kind.
  mutating func skipValue() throws {
    skipWhitespace()
    switch peek() {
    case UInt8(ascii: "{"): try skipObject()
    case UInt8(ascii: "["): try readArray { reader in try reader.skipValue() }
    case UInt8(ascii: "\""): try skipString()
    case UInt8(ascii: "t"): try literal("true")
    case UInt8(ascii: "f"): try literal("false")
    case UInt8(ascii: "n"): try literal("null")
    case let byte? where byte == UInt8(ascii: "-") || isDigit(byte):
      let start = offset
      while offset < bytes.count, Self.numberBytes.contains(bytes[offset]) { offset += 1 }
      guard
        Double(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<offset]), as: UTF8.self))
          != nil
      else {
        offset = start
        throw failure("bad number")
      }
    default: throw failure("expected a value")
    }
  }

  /// As `readObject` skipping every value, without making strings of the keys.
  private mutating func skipObject() throws {
    try readMembers { reader in
      try reader.skipString()
      try reader.expect(UInt8(ascii: ":"))
      try reader.skipValue()
    }
  }

  // MARK: Strings

  mutating func readString() throws -> String {
    skipWhitespace()
    try expect(UInt8(ascii: "\""))
    let start = offset
    // The common case: no escapes, so the bytes are the string; and ASCII
    // bytes need no UTF-8 validation.
    var high: UInt8 = 0
    while offset < bytes.count {
      let byte = bytes[offset]
      if byte == UInt8(ascii: "\"") {
        let slice = UnsafeRawBufferPointer(rebasing: bytes[start..<offset])
        let text = high < 0x80 ? String(decoding: slice, as: UTF8.self) : try utf8(start..<offset)
        offset += 1
        return text
      }
      if byte == UInt8(ascii: "\\") { break }
      if byte < 0x20 { throw failure("control character in a string") }
      high |= byte
      offset += 1
    }
    var decoded = Array(UnsafeRawBufferPointer(rebasing: bytes[start..<offset]))
    while offset < bytes.count {
      let byte = bytes[offset]
      offset += 1
      switch byte {
      case UInt8(ascii: "\""):
        guard let text = String(validating: decoded, as: UTF8.self) else { throw failure("invalid UTF-8") }
        return text
      case UInt8(ascii: "\\"):
        try readEscape(into: &decoded)
      case 0..<0x20:
        throw failure("control character in a string")
      default:
        decoded.append(byte)
      }
    }
    throw failure("unterminated string")
  }

  /// memchr to each quote: strings are most of a list page's bytes, and
  /// finding the next page's token skips all of them.
  private mutating func skipString() throws {
    try expect(UInt8(ascii: "\""))
    while offset < bytes.count, let base = bytes.baseAddress {
      guard let found = memchr(base + offset, Int32(UInt8(ascii: "\"")), bytes.count - offset) else { break }
      let quote = base.distance(to: UnsafeRawPointer(found))
      let inside = Self.escaped(quote, in: bytes, after: offset)
      offset = quote + 1
      if !inside { return }
    }
    offset = bytes.count
    throw failure("unterminated string")
  }

  private mutating func readEscape(into decoded: inout [UInt8]) throws {
    guard offset < bytes.count else { throw failure("unterminated escape") }
    let byte = bytes[offset]
    offset += 1
    switch byte {
    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded.append(byte)
    case UInt8(ascii: "b"): decoded.append(0x08)
    case UInt8(ascii: "f"): decoded.append(0x0C)
    case UInt8(ascii: "n"): decoded.append(0x0A)
    case UInt8(ascii: "r"): decoded.append(0x0D)
    case UInt8(ascii: "t"): decoded.append(0x09)
    case UInt8(ascii: "u"):
      var scalar = UInt32(try hex4())
      if (0xD800..<0xDC00).contains(scalar) {
        // A high surrogate must be followed by an escaped low one.
        guard matches("\\u") else { throw failure("lone surrogate") }
        offset += 2
        let low = UInt32(try hex4())
        guard (0xDC00..<0xE000).contains(low) else { throw failure("lone surrogate") }
        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
      }
      guard let unicode = Unicode.Scalar(scalar) else { throw failure("lone surrogate") }
      decoded.append(contentsOf: UTF8.encode(unicode)!)
    default:
      throw failure("bad escape")
    }
  }

  private mutating func hex4() throws -> UInt16 {
    guard offset + 4 <= bytes.count else { throw failure("bad \\u escape") }
    var value: UInt16 = 0
    for byte in bytes[offset..<offset + 4] {
      let digit: UInt8
      switch byte {
      case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
      case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
      case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
      default: throw failure("bad \\u escape")
      }
      value = value << 4 | UInt16(digit)
    }
    offset += 4
    return value
  }

  private func utf8(_ range: Range<Int>) throws -> String {
    guard let text = String(validating: UnsafeRawBufferPointer(rebasing: bytes[range]), as: UTF8.self) else {
      throw failure("invalid UTF-8")
    }
    return text
  }

  // MARK: Bytes

  private static let numberBytes: Set<UInt8> = Set("+-0123456789.eE".utf8)

  private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

  private func peek() -> UInt8? { offset < bytes.count ? bytes[offset] : nil }

  private func matches(_ text: StaticString) -> Bool {
    let count = text.utf8CodeUnitCount
    guard offset + count <= bytes.count else { return false }
    return text.withUTF8Buffer { expected in
      (0..<count).allSatisfy { bytes[offset + $0] == expected[$0] }
    }
  }

  private mutating func literal(_ text: StaticString) throws {
    guard matches(text) else { throw failure("expected \(text)") }
    offset += text.utf8CodeUnitCount
  }

  mutating func skipWhitespace() {
    while offset < bytes.count, Self.isWhitespace(bytes[offset]) { offset += 1 }
  }

  private static func isWhitespace(_ byte: UInt8) -> Bool {
    byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
  }

  /// Whether the byte at `index` is escaped: an odd run of backslashes
  /// (from `lower` on) precedes it.
  private static func escaped(_ index: Int, in bytes: UnsafeRawBufferPointer, after lower: Int) -> Bool {
    var backslashes = 0
    while index - backslashes - 1 >= lower, bytes[index - backslashes - 1] == UInt8(ascii: "\\") {
      backslashes += 1
    }
    return backslashes % 2 == 1
  }

  private mutating func expect(_ byte: UInt8) throws {
    skipWhitespace()
    guard peek() == byte else { throw failure("expected '\(Character(Unicode.Scalar(byte)))'") }
    offset += 1
  }

  /// Consumes `byte` if it comes next.
  private mutating func consume(_ byte: UInt8) throws -> Bool {
    skipWhitespace()
    guard peek() == byte else { return false }
    offset += 1
    return true
  }

  /// One level deeper; balanced by `depth -= 1` when the level ends.
  private mutating func enter() throws {
    guard depth < Self.maxDepth else { throw failure("nested deeper than \(Self.maxDepth)") }
    depth += 1
  }

  private func failure(_ reason: String) -> Failure { Failure(offset: offset, reason: reason) }
}

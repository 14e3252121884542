#if canImport(Glibc)
  import Glibc
#endif

/// An object name compared, hashed and ordered as the service does: by its
/// UTF-8 bytes. Swift's `String` `==`, `<` and hashing use Unicode canonical
/// equivalence, so NFC `caf\u{e9}` and NFD `cafe\u{301}` would be one key;
/// to Cloud Storage they are two objects (docs/SEMANTICS.md#names-unicode).
/// Every dictionary or set of names or keys uses it, and direct comparisons
/// use ``Names/same(_:_:)``.
struct ObjectKey: Hashable, Comparable, Sendable, CustomStringConvertible {
  let name: String

  init(_ name: String) { self.name = name }
  init(_ name: Substring) { self.name = String(name) }

  static func == (a: ObjectKey, b: ObjectKey) -> Bool { Names.same(a.name, b.name) }

  static func < (a: ObjectKey, b: ObjectKey) -> Bool { Names.precedes(a.name, b.name) }

  func hash(into hasher: inout Hasher) {
    var bytes = name
    bytes.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    hasher.combine(bytes.utf8.count)
  }

  var description: String { name }
}

extension Names {
  /// Whether two names are the same object name: byte-wise, never by
  /// Unicode equivalence (see ``ObjectKey``).
  public static func same<A: StringProtocol, B: StringProtocol>(_ a: A, _ b: B) -> Bool {
    // Native strings hold their bytes contiguously: one memcmp, not a walk
    // of two views (a dictionary of keys compares on every insert).
    let contiguous = a.utf8.withContiguousStorageIfAvailable { x in
      b.utf8.withContiguousStorageIfAvailable { y in
        x.count == y.count && (x.isEmpty || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0)
      }
    }
    if let contiguous, let same = contiguous { return same }
    return a.utf8.elementsEqual(b.utf8)
  }
}

extension ObjectKey: ExpressibleByStringInterpolation {
  init(stringLiteral value: String) { self.init(value) }
}

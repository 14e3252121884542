/// A response's `Content-Range: bytes FIRST-LAST/SIZE` (SIZE may be `*`).
struct ContentRange {
  var first: Int64
  var last: Int64
  var size: Int64?
  var text: String

  init?(_ header: String?) {
    guard let header, header.hasPrefix("bytes ") else { return nil }
    let spec = header.dropFirst("bytes ".count)
    guard let dash = spec.firstIndex(of: "-"), let slash = spec.firstIndex(of: "/"), dash < slash,
      let first = Int64(spec[..<dash]), let last = Int64(spec[spec.index(after: dash)..<slash]),
      0 <= first, first <= last
    else { return nil }
    let total = spec[spec.index(after: slash)...]
    let size = total == "*" ? nil : Int64(total)
    // A size that does not parse, or that the range does not fit in, is no answer.
    guard total == "*" || size.map({ last < $0 }) == true else { return nil }
    self.first = first
    self.last = last
    self.size = size
    self.text = header
  }
}

/// How many bytes a resumable session holds, from its 308's `Range:
/// bytes=0-LAST` (no header: none). Nil when the header is malformed or
/// does not start at 0.
func persistedBytes(rangeHeader: String?) -> Int64? {
  guard let header = rangeHeader else { return 0 }
  guard header.hasPrefix("bytes=0-"), let last = Int64(header.dropFirst("bytes=0-".count)), last >= 0,
    last < Int64.max
  else { return nil }
  return last + 1
}

import ObjectStore

/// The CRC-32C of an object, assembled from the bytes one open file
/// fetched, in whatever order and however often. Each fetch is summed in
/// pieces cut at fixed block boundaries (and at page boundaries inside a
/// block it does not cover whole), so the pieces of any two fetches line
/// up: once every block is known the verdict is, and a block or page
/// fetched again with other bytes is a mismatch at once (at least one of the
/// two fetches was not the object's), so bytes fetched again after a failed
/// or dropped segment are checked too.
struct ObjectSum {
  enum Verdict: Equatable {
    case open
    case matched
    /// The object's bytes as read are not the object's.
    case mismatched(sum: UInt32)
  }

  let size: UInt64
  let expected: UInt32
  let blockSize: UInt64
  private(set) var verdict = Verdict.open
  /// Each block's sum, where `known`; allocated at the first piece.
  private var blocks: [UInt32] = []
  private var known: [Bool] = []
  private var knownCount = 0
  /// Page pieces of blocks no single fetch covered whole, by start, until
  /// their block is assembled (then only the block's sum is kept).
  private var pages: [UInt64: (end: UInt64, sum: UInt32)] = [:]

  static let pageSize: UInt64 = 4096
  /// Bounds the pages waiting for the rest of their block: past it a page
  /// that assembles no block is not kept.
  static let maxPages = 1024
  /// Bounds the blocks: a larger object has larger blocks.
  static let maxBlocks: UInt64 = 16384

  init(size: UInt64, expected: UInt32) {
    self.size = size
    self.expected = expected
    var block: UInt64 = 256 << 10
    while size / block >= Self.maxBlocks { block <<= 1 }
    blockSize = block
    if size == 0 { verdict = expected == 0 ? .matched : .mismatched(sum: 0) }
  }

  private var blockCount: Int { Int((size + blockSize - 1) / blockSize) }

  private func bounds(of index: Int) -> Range<UInt64> {
    let start = UInt64(index) * blockSize
    return start..<min(start + blockSize, size)
  }

  /// Where a fetch of `range` is cut: each piece lies in one block, and is
  /// either the whole block or one page of it (or less, at the fetch's ends).
  func cuts(_ range: Range<UInt64>) -> [Range<UInt64>] {
    let range = range.clamped(to: 0..<size)
    guard !range.isEmpty else { return [] }
    var pieces: [Range<UInt64>] = []
    var at = range.lowerBound
    while at < range.upperBound {
      let block = bounds(of: Int(at / blockSize))
      let end = min(block.upperBound, range.upperBound)
      if at == block.lowerBound, end == block.upperBound {
        pieces.append(at..<end)
        at = end
        continue
      }
      while at < end {
        let page = min((at / Self.pageSize + 1) * Self.pageSize, end)
        pieces.append(at..<page)
        at = page
      }
    }
    return pieces
  }

  /// Adds the sum of one piece of ``cuts(_:)``.
  mutating func add(_ piece: Range<UInt64>, sum: UInt32) {
    guard verdict == .open, !piece.isEmpty, piece.upperBound <= size else { return }
    if blocks.isEmpty {
      blocks = Array(repeating: 0, count: blockCount)
      known = Array(repeating: false, count: blockCount)
    }
    let index = Int(piece.lowerBound / blockSize)
    let block = bounds(of: index)
    if piece == block { return record(index, sum) }
    if let held = pages[piece.lowerBound], held.end == piece.upperBound {
      if held.sum != sum { verdict = .mismatched(sum: sum) }
      return
    }
    guard !known[index], pages.count < Self.maxPages else { return }
    pages[piece.lowerBound] = (piece.upperBound, sum)
    assemble(index, block)
  }

  /// The block's sum from its pages, once they cover it end to end.
  private mutating func assemble(_ index: Int, _ block: Range<UInt64>) {
    var at = block.lowerBound
    while at < block.upperBound {
      guard let page = pages[at] else { return }
      at = page.end
    }
    at = block.lowerBound
    var sum: UInt32 = 0
    while at < block.upperBound, let page = pages[at] {
      let length = page.end - at
      if at == block.lowerBound {
        sum = page.sum
      } else if length == Self.pageSize {
        sum = Self.pageShift(sum) ^ page.sum
      } else {
        sum = CRC32C.combine(sum, page.sum, lengthB: Int64(length))
      }
      at = page.end
    }
    at = block.lowerBound
    while at < block.upperBound, let page = pages.removeValue(forKey: at) { at = page.end }
    record(index, sum)
  }

  private static let pageShift = CRC32C.Shift(length: Int64(pageSize))

  private mutating func record(_ index: Int, _ sum: UInt32) {
    if known[index] {
      if blocks[index] != sum { verdict = .mismatched(sum: sum) }
      return
    }
    blocks[index] = sum
    known[index] = true
    knownCount += 1
    guard knownCount == blocks.count else { return }
    let whole = CRC32C.joined(blocks, blockSize: Int64(blockSize), size: Int64(size))
    verdict = whole == expected ? .matched : .mismatched(sum: whole)
  }
}

/// The bytes an open file read did not sum to the object's CRC-32C, or two
/// fetches of the same bytes differed: one changed on the way (EIO for
/// every later read of the handle; the kernel's pages and any cached copy go).
struct IntegrityFailure: Error, CustomStringConvertible {
  let key: String
  let generation: Int64
  let found: UInt32
  let expected: UInt32
  /// Whether this is the first time the handle answers it (it is counted
  /// and its effects set off once).
  var first = true

  var description: String {
    "the bytes read of \(key) (generation \(generation)) have crc32c \(CRC32C.base64(found)), the object \(CRC32C.base64(expected)): one changed on the way; open it again to read it anew"
  }
}

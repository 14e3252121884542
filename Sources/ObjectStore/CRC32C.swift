import CCRC32C
import NIOCore

/// CRC-32C (Castagnoli), as the service reports an object's `crc32c`:
/// base64 of the checksum's four bytes, big-endian. Computed by the CPU's
/// crc32 instruction where it has one (SSE4.2), else eight bytes at a time
/// from tables: the read cache checks every block it serves.
public enum CRC32C {
  public static func update(_ crc: UInt32, _ buffer: ByteBuffer) -> UInt32 {
    buffer.withUnsafeReadableBytes { update(crc, $0) }
  }

  public static func update(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
    guard let base = bytes.baseAddress, bytes.count > 0 else { return crc }
    return ccrc32c_update(crc, base, bytes.count)
  }

  /// The CRC-32C of A followed by B, from the checksums of each and B's
  /// length (zlib's crc32_combine, with the Castagnoli polynomial): a
  /// composite object's checksum from its parts'.
  public static func combine(_ crcA: UInt32, _ crcB: UInt32, lengthB: Int64) -> UInt32 {
    guard lengthB > 0 else { return crcA }
    var even = [UInt32](repeating: 0, count: 32)
    var odd = [UInt32](repeating: 0, count: 32)
    // The operator for one zero bit, then two, then four.
    odd[0] = 0x82F6_3B78
    for n in 1..<32 { odd[n] = 1 << (n - 1) }
    square(&even, odd)
    square(&odd, even)
    var crc = crcA
    var length = lengthB
    while length != 0 {
      square(&even, odd)
      if length & 1 != 0 { crc = times(even, crc) }
      length >>= 1
      if length == 0 { break }
      square(&odd, even)
      if length & 1 != 0 { crc = times(odd, crc) }
      length >>= 1
    }
    return crc ^ crcB
  }

  /// The CRC-32C of pieces one after another, from each one's sum and
  /// length (a composite's from its sources'); nil if one is unknown.
  public static func concatenated(_ pieces: [(crc32c: UInt32?, size: Int64)]) -> UInt32? {
    var sum: UInt32 = 0
    for piece in pieces {
      guard let crc = piece.crc32c else { return nil }
      sum = combine(sum, crc, lengthB: piece.size)
    }
    return sum
  }

  /// The CRC-32C of an object from its blocks' sums, in order: every block
  /// `blockSize` bytes but the last, which holds the rest of `size`: one
  /// table shift a whole block (the table is made once a call, from 32
  /// combines), for an object's check once all its blocks are in.
  public static func joined(_ blocks: [UInt32], blockSize: Int64, size: Int64) -> UInt32 {
    guard var sum = blocks.first else { return 0 }
    let shift = Shift(length: blockSize)
    for index in blocks.indices.dropFirst() {
      let length = min(blockSize, size - Int64(index) * blockSize)
      sum = length == blockSize ? shift(sum) ^ blocks[index] : combine(sum, blocks[index], lengthB: length)
    }
    return sum
  }

  /// ``combine(_:_:lengthB:)`` with a zero second checksum, for one fixed
  /// length, as a table: linear in the checksum, so the images of its 32
  /// bits do it. For summing many pieces of one length, where `combine`'s
  /// squarings would cost more than the pieces.
  public struct Shift: Sendable {
    private let images: [UInt32]

    public init(length: Int64) {
      images = (0..<32).map { CRC32C.combine(1 << $0, 0, lengthB: length) }
    }

    /// The checksum of the bytes `crc` sums, followed by `length` bytes whose checksum is 0.
    public func callAsFunction(_ crc: UInt32) -> UInt32 { CRC32C.times(images, crc) }
  }

  private static func times(_ matrix: [UInt32], _ vector: UInt32) -> UInt32 {
    var sum: UInt32 = 0
    var vector = vector
    var row = 0
    while vector != 0 {
      if vector & 1 != 0 { sum ^= matrix[row] }
      vector >>= 1
      row += 1
    }
    return sum
  }

  private static func square(_ result: inout [UInt32], _ matrix: [UInt32]) {
    for n in 0..<32 { result[n] = times(matrix, matrix[n]) }
  }

  public static func base64(_ crc: UInt32) -> String {
    let bytes = [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: crc >> $0) }
    return ByteBuffer(bytes: bytes).readableBytesView.base64
  }

  /// The checksum the service's base64 text stands for; nil if it is not four bytes.
  public static func value(base64 text: String) -> UInt32? {
    let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    let digits = Array(text.utf8)
    guard digits.count == 8, digits[6] == UInt8(ascii: "="), digits[7] == UInt8(ascii: "=") else {
      return nil
    }
    var bits: UInt64 = 0
    for digit in digits[0..<6] {
      guard let value = alphabet.firstIndex(of: digit) else { return nil }
      bits = bits << 6 | UInt64(value)
    }
    // 36 bits: the four bytes, then four zero bits.
    guard bits & 0xf == 0 else { return nil }
    return UInt32(truncatingIfNeeded: bits >> 4)
  }
}

extension ByteBufferView {
  fileprivate var base64: String {
    let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    let bytes = Array(self)
    var out: [UInt8] = []
    var i = 0
    while i < bytes.count {
      let b0 = UInt32(bytes[i])
      let b1 = i + 1 < bytes.count ? UInt32(bytes[i + 1]) : 0
      let b2 = i + 2 < bytes.count ? UInt32(bytes[i + 2]) : 0
      let triple = b0 << 16 | b1 << 8 | b2
      out.append(alphabet[Int(triple >> 18 & 63)])
      out.append(alphabet[Int(triple >> 12 & 63)])
      out.append(i + 1 < bytes.count ? alphabet[Int(triple >> 6 & 63)] : UInt8(ascii: "="))
      out.append(i + 2 < bytes.count ? alphabet[Int(triple & 63)] : UInt8(ascii: "="))
      i += 3
    }
    return String(decoding: out, as: UTF8.self)
  }
}

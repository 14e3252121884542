import NIOCore

/// CRC-32C (Castagnoli), as the service reports an object's `crc32c`:
/// base64 of the checksum's four bytes, big-endian.
enum CRC32C {
  private static let table: [UInt32] = (0..<256).map { n in
    var c = UInt32(n)
    for _ in 0..<8 { c = (c & 1) != 0 ? (c >> 1) ^ 0x82f6_3b78 : c >> 1 }
    return c
  }

  static func update(_ crc: UInt32, _ buffer: ByteBuffer) -> UInt32 {
    buffer.withUnsafeReadableBytes { bytes in
      var value = ~crc
      table.withUnsafeBufferPointer { table in
        for byte in bytes { value = table[Int((value ^ UInt32(byte)) & 0xff)] ^ (value >> 8) }
      }
      return ~value
    }
  }

  static func base64(_ crc: UInt32) -> String {
    let bytes = [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: crc >> $0) }
    return ByteBuffer(bytes: bytes).readableBytesView.base64
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

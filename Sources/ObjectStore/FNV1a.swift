/// FNV-1a, 64 bits: a fast, stable hash of a name (not a checksum, not for
/// security), used where a name must map to a number or a file name the same
/// way in every process: inode numbers, stage and read-cache directories,
/// read-cache entry files.
public enum FNV1a {
  public static func hash(_ text: String) -> UInt64 {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in text.utf8 {
      hash ^= UInt64(byte)
      hash = hash &* 0x0000_0100_0000_01b3
    }
    return hash
  }

  /// The hash as 16 lowercase hex digits.
  public static func hex(_ text: String) -> String {
    let digits = String(hash(text), radix: 16)
    return String(repeating: "0", count: 16 - digits.count) + digits
  }
}

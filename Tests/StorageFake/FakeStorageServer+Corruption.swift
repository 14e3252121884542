import ObjectStore

/// Bytes changed on the way, as a faulty network or middlebox would: each
/// count is how many more bodies get one byte flipped (`Int.max`: always).
public struct Corruption: Sendable {
  /// Media answers (`alt=media`): one byte in the middle of the body.
  public var downloads = 0
  /// Multipart uploads' media, before the service checks a declared crc32c.
  public var uploads = 0
  /// Resumable sessions' chunks, before they are appended to the session.
  public var chunks = 0
  /// Final composes (not under the parts' folder): the answer's crc32c is not the bytes'.
  public var composes = 0

  public init() {}
}

extension FakeStorageServer {
  public func corrupt(_ change: @Sendable (inout Corruption) -> Void) {
    state.withLock { change(&$0.corruption) }
  }

  /// Takes one from `counter`'s count; whether this body is corrupted.
  func takeCorruption(_ counter: WritableKeyPath<Corruption, Int>) -> Bool {
    state.withLock { s in
      let left = s.corruption[keyPath: counter]
      guard left > 0 else { return false }
      if left != Int.max { s.corruption[keyPath: counter] = left - 1 }
      return true
    }
  }

  /// `bytes` with the byte in the middle flipped.
  static func flipped(_ bytes: [UInt8]) -> [UInt8] {
    guard !bytes.isEmpty else { return bytes }
    var bytes = bytes
    bytes[bytes.count / 2] ^= 0x5a
    return bytes
  }

  /// The service's refusal of media that do not match a declared crc32c.
  static func checkDeclared(_ declared: String?, media: [UInt8]) throws {
    guard let declared else { return }
    let calculated = Checksum.crc32cBase64(media)
    guard declared == calculated else {
      throw HTTPError(
        400, "Provided CRC32C \"\(declared)\" doesn't match calculated CRC32C \"\(calculated)\".",
        reason: "invalid")
    }
  }
}

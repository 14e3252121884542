import FUSE
import ObjectStore

/// The little of a file's or link's metadata (or a directory's placeholder's)
/// that stat needs, parsed once. Times are kept as nanoseconds and absent
/// ids as a sentinel (72 bytes in all): one is held for every inode.
struct FileFacts: Sendable, Equatable {
  /// The object's size; a link's is its target's length in bytes.
  let size: UInt64
  let generation: Int64
  let metageneration: Int64
  private let createdNanoseconds: Int64
  private let modifiedNanoseconds: Int64
  private let changedNanoseconds: Int64
  private let accessedNanoseconds: Int64
  /// A device's number (0 for anything else).
  let device: UInt64
  /// The object's CRC-32C, which a whole sequential read is checked against.
  let crc32c: UInt32?
  private let storedMode: UInt32
  private let storedUid: UInt32
  private let storedGid: UInt32
  private static let noValue = UInt32.max

  /// Stored permission bits, with a special file's type bits; nil: the mount's default.
  var mode: UInt32? { storedMode == Self.noValue ? nil : storedMode }
  var uid: UInt32? { storedUid == Self.noValue ? nil : storedUid }
  var gid: UInt32? { storedGid == Self.noValue ? nil : storedGid }
  /// `goog-reserved-file-atime` if the object has it.
  var accessed: Timestamp? { Self.timestamp(accessedNanoseconds) }

  var created: Timestamp? { Self.timestamp(createdNanoseconds) }
  /// `goog-reserved-file-mtime` (or another tool's mtime key) if the object has it.
  var modified: Timestamp? { Self.timestamp(modifiedNanoseconds) }
  var changed: Timestamp? { Self.timestamp(changedNanoseconds) }

  init(_ metadata: ObjectMetadata) {
    size = SymlinkEncoding.targetLength(metadata) ?? UInt64(max(metadata.size, 0))
    generation = metadata.generation
    metageneration = metadata.metageneration
    createdNanoseconds = Self.nanoseconds(RFC3339.parse(metadata.timeCreated))
    let stored = StoredPosix(metadata.custom)
    modifiedNanoseconds = Self.nanoseconds(stored.modified)
    accessedNanoseconds = Self.nanoseconds(stored.accessed)
    changedNanoseconds = Self.nanoseconds(RFC3339.parse(metadata.updated))
    storedMode = stored.mode ?? Self.noValue
    storedUid = stored.uid ?? Self.noValue
    storedGid = stored.gid ?? Self.noValue
    device = stored.device ?? 0
    crc32c = metadata.crc32c.flatMap { CRC32C.value(base64: $0) }
  }

  private static let absent = Int64.min

  private static func nanoseconds(_ time: Timestamp?) -> Int64 {
    guard let time else { return absent }
    let (seconds, overflow) = Int64(time.seconds).multipliedReportingOverflow(by: 1_000_000_000)
    guard !overflow, seconds > absent + 1_000_000_000 else { return absent }
    // Past 2262-04-11T23:47:16.854775807Z the sum does not fit either.
    let (sum, past) = seconds.addingReportingOverflow(Int64(time.nanoseconds))
    return past ? absent : sum
  }

  private static func timestamp(_ nanoseconds: Int64) -> Timestamp? {
    guard nanoseconds != absent else { return nil }
    let (seconds, remainder) = nanoseconds.quotientAndRemainder(dividingBy: 1_000_000_000)
    return remainder < 0
      ? Timestamp(seconds: Int(seconds - 1), nanoseconds: Int(remainder + 1_000_000_000))
      : Timestamp(seconds: Int(seconds), nanoseconds: Int(remainder))
  }
}

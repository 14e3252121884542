import FUSE
import ObjectStore

#if canImport(Glibc)
  import Glibc
#endif

/// Modes, owners, times and special files as custom metadata, in the keys
/// gsutil (`-P`) and gcloud (`--preserve-posix`) use; other tools' keys are
/// read when those are absent (docs/SEMANTICS.md#attributes-modes).
enum PosixKeys {
  /// Octal: gsutil writes the permission bits in 3 digits ("755").
  static let mode = "goog-reserved-posix-mode"
  static let uid = "goog-reserved-posix-uid"
  static let gid = "goog-reserved-posix-gid"
  /// Whole seconds since the epoch.
  static let mtime = "goog-reserved-file-mtime"
  /// Read (gsutil -P writes it), never written: see SEMANTICS "Times".
  static let atime = "goog-reserved-file-atime"
  /// A device's number, decimal: s3fs's key (gsutil has none).
  static let device = "rdev"
  /// gcsfuse's mtime (RFC 3339).
  static let gcsfuseMtime = "gcsfuse_mtime"
  /// rclone's mtime (RFC 3339 with nanoseconds); s3fs writes decimal
  /// seconds under the same key.
  static let otherMtime = "mtime"
  /// s3fs's mode: decimal, with the file type bits.
  static let s3fsMode = "mode"
  static let s3fsUid = "uid"
  static let s3fsGid = "gid"

  /// Keys stat shows whatever their value: never listed as xattrs, and
  /// setting or removing them through xattrs is ignored.
  static let ownKeys: Set<String> = [mode, uid, gid, mtime, atime, gcsfuseMtime]

  /// Whether `key` is one stat shows for `custom`: our keys, and another
  /// tool's only when stat reads it (a key `mode` that is not s3fs's stays
  /// an ordinary xattr).
  static func isStatKey(_ key: String, in custom: [String: String]) -> Bool {
    if ownKeys.contains(key) { return true }
    switch key {
    case otherMtime:
      return custom[PosixKeys.mtime] == nil && custom[gcsfuseMtime] == nil
        && custom[key].flatMap(RFC3339.parseMtime) != nil
    case s3fsMode: return custom[mode] == nil && custom[key].flatMap(parseS3fsMode) != nil
    case s3fsUid, s3fsGid:
      return custom[mode] == nil && custom[key].flatMap(parseID) != nil
        && custom[s3fsMode].flatMap(parseS3fsMode) != nil
    case device:
      return custom[mode].flatMap(parseMode).flatMap(FileAttributes.Kind.init(special:)) != nil
        || custom[s3fsMode].flatMap(parseS3fsMode).flatMap(FileAttributes.Kind.init(special:)) != nil
    default: return false
    }
  }

  /// Any octal form ("755", "0755", "100755", "0o755"); nil if not octal or
  /// past 16 bits.
  static func parseMode(_ text: String) -> UInt32? {
    var digits = Substring(text.trimmingSpaces)
    if digits.hasPrefix("0o") || digits.hasPrefix("0O") { digits = digits.dropFirst(2) }
    guard !digits.isEmpty, digits.count <= 12, let value = UInt32(digits, radix: 8), value <= 0o177777 else {
      return nil
    }
    return value
  }

  /// s3fs writes `st_mode` in decimal, file type included: one without a
  /// type is not s3fs's (some other program's `mode`).
  static func parseS3fsMode(_ text: String) -> UInt32? {
    guard let value = UInt32(text.trimmingSpaces, radix: 10), value <= 0o177777,
      value & FileAttributes.typeMask != 0
    else { return nil }
    return value
  }

  /// A decimal uid or gid; nil for anything else (and for -1, "no owner").
  static func parseID(_ text: String) -> UInt32? {
    guard let value = UInt32(text.trimmingSpaces, radix: 10), value != UInt32.max else { return nil }
    return value
  }

  /// The form gsutil writes and reads: 3 octal digits for permission bits,
  /// more only for setuid/setgid/sticky or a special file's type.
  static func formatMode(_ mode: UInt32) -> String {
    let text = String(mode, radix: 8)
    return String(repeating: "0", count: max(0, 3 - text.count)) + text
  }
}

/// What the object's keys say of its POSIX attributes; nil fields are absent.
struct StoredPosix: Equatable {
  /// Permission bits (07777) and, for a special file, its type bits.
  var mode: UInt32?
  var uid: UInt32?
  var gid: UInt32?
  var device: UInt64?
  var modified: Timestamp?
  var accessed: Timestamp?

  init(mode: UInt32? = nil, uid: UInt32? = nil, gid: UInt32? = nil) {
    self.mode = mode
    self.uid = uid
    self.gid = gid
  }

  /// The stored mode alone, as ``init(_:)`` reads it (what a dirent's
  /// type needs).
  static func mode(_ custom: [String: String]) -> UInt32? {
    guard !custom.isEmpty else { return nil }
    return custom[PosixKeys.mode].flatMap(PosixKeys.parseMode)
      ?? custom[PosixKeys.s3fsMode].flatMap(PosixKeys.parseS3fsMode)
  }

  /// Ours first; s3fs's mode, uid and gid only as a set with its mode (they
  /// are common words); other tools' mtimes in the order SEMANTICS gives.
  init(_ custom: [String: String]) {
    guard !custom.isEmpty else { return }
    if let mode = custom[PosixKeys.mode].flatMap(PosixKeys.parseMode) {
      self.mode = mode
    } else if let mode = custom[PosixKeys.s3fsMode].flatMap(PosixKeys.parseS3fsMode) {
      self.mode = mode
      uid = custom[PosixKeys.s3fsUid].flatMap(PosixKeys.parseID)
      gid = custom[PosixKeys.s3fsGid].flatMap(PosixKeys.parseID)
    }
    uid = custom[PosixKeys.uid].flatMap(PosixKeys.parseID) ?? uid
    gid = custom[PosixKeys.gid].flatMap(PosixKeys.parseID) ?? gid
    if let mode,
      FileAttributes.Kind(special: mode) == .characterDevice
        || FileAttributes.Kind(special: mode) == .blockDevice
    {
      device = custom[PosixKeys.device].flatMap { UInt64($0.trimmingSpaces, radix: 10) }
    }
    modified =
      custom[PosixKeys.mtime].flatMap(RFC3339.parseMtime)
      ?? custom[PosixKeys.gcsfuseMtime].flatMap(RFC3339.parse)
      ?? custom[PosixKeys.otherMtime].flatMap(RFC3339.parseMtime)
    accessed = custom[PosixKeys.atime].flatMap(RFC3339.parseMtime)
  }
}

extension String {
  fileprivate var trimmingSpaces: Substring {
    var text = Substring(self)
    while text.first == " " { text = text.dropFirst() }
    while text.last == " " { text = text.dropLast() }
    return text
  }
}

extension Configuration {
  /// The keys a new file, directory or special file is stored with: its
  /// mode as given (the kernel applied the umask) and its creator as owner,
  /// each only when the object would show something else without it (the
  /// mount's `file_mode`/`dir_mode`, `uid`, `gid`). So files the mount's own
  /// user makes with the default mode carry no keys: a restored backup's
  /// metadata is the original's, and a bucket shared by machines with other
  /// uids keeps showing each mount's user.
  func newObjectPosix(mode: UInt32, directory: Bool = false) -> [String: String] {
    guard posixAttributes else { return [:] }
    var custom: [String: String] = [:]
    if mode != (directory ? directoryMode : fileMode) { custom[PosixKeys.mode] = PosixKeys.formatMode(mode) }
    if let caller = Caller.current {
      if caller.uid != uid { custom[PosixKeys.uid] = String(caller.uid) }
      if caller.gid != gid { custom[PosixKeys.gid] = String(caller.gid) }
    }
    return custom
  }
}

/// The `-o` options of `mount`, as fstab and mount(8) pass them.
struct MountOptionList: Equatable {
  var readOnly = false
  var allowOther = false
  var uid: UInt32?
  var gid: UInt32?
  var fileMode: UInt32?
  var directoryMode: UInt32?
  /// Modes, owners and special files kept in the objects (`posix_attributes=on|off`).
  var posixAttributes = true

  struct Invalid: Error, CustomStringConvertible {
    let description: String
  }

  /// Options for mount(8) and systemd rather than for the filesystem.
  /// `suid` and `dev` are among them: the mount is always nosuid,nodev.
  static let ignored: Set<String> = [
    "rw", "defaults", "auto", "noauto", "nofail", "_netdev", "user", "users", "nouser", "exec", "noexec",
    "suid", "nosuid", "dev", "nodev", "async", "atime", "noatime", "relatime", "norelatime", "strictatime",
    "lazytime", "nolazytime", "silent", "loud",
  ]

  init() {}

  /// Parses every `-o` argument (each a comma-separated list).
  init(_ arguments: [String]) throws(Invalid) {
    for item in arguments.flatMap({ $0.split(separator: ",") }).map(String.init) {
      let parts = item.split(separator: "=", maxSplits: 1).map(String.init)
      let name = parts[0]
      let value = parts.count > 1 ? parts[1] : nil
      switch (name, value) {
      case ("ro", nil): readOnly = true
      case ("rw", nil): readOnly = false
      case ("allow_other", nil): allowOther = true
      case ("uid", let value?): uid = try Self.number(value, name: name, radix: 10)
      case ("gid", let value?): gid = try Self.number(value, name: name, radix: 10)
      case ("file_mode", let value?): fileMode = try Self.mode(value, name: name)
      case ("dir_mode", let value?): directoryMode = try Self.mode(value, name: name)
      case ("posix_attributes", "on"?): posixAttributes = true
      case ("posix_attributes", "off"?): posixAttributes = false
      case ("posix_attributes", let value):
        throw Invalid(description: "bad value for posix_attributes: \(value ?? "") (on or off)")
      case (let name, _) where Self.ignored.contains(name) || name.hasPrefix("x-") || name == "comment":
        continue
      default:
        throw Invalid(description: "unknown mount option '\(item)'")
      }
    }
  }

  private static func number(_ text: String, name: String, radix: Int) throws(Invalid) -> UInt32 {
    guard let value = UInt32(text, radix: radix) else {
      throw Invalid(description: "bad value for \(name): \(text)")
    }
    return value
  }

  private static func mode(_ text: String, name: String) throws(Invalid) -> UInt32 {
    let value = try number(text, name: name, radix: 8)
    guard value <= 0o7777 else { throw Invalid(description: "bad value for \(name): \(text)") }
    return value
  }
}

/// `gs://BUCKET[/PREFIX]`, or a bare `BUCKET[/PREFIX]` as fstab writes it.
struct BucketSource: Equatable {
  let bucket: String
  let subtree: String

  init?(_ text: String) {
    var rest = Substring(text)
    if rest.hasPrefix("gs://") { rest = rest.dropFirst(5) }
    let bucket = rest.prefix { $0 != "/" }
    guard !bucket.isEmpty, bucket.allSatisfy({ $0.isLetter || $0.isNumber || "-_.".contains($0) }) else {
      return nil
    }
    self.bucket = String(bucket)
    self.subtree = String(rest.dropFirst(bucket.count))
  }
}

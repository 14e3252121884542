import ArgumentParser

#if canImport(Glibc)
  import Glibc
#endif

struct Unmount: ParsableCommand {
  static let configuration = CommandConfiguration(abstract: "Unmount a bucketfs mount (also a stale one).")

  @Argument(help: "Where the bucket is mounted.") var mountpoint: String

  func run() throws {
    // fusermount3 works for the user who mounted; root may also call umount2.
    if runProgram("fusermount3", ["-u", mountpoint]) == 0 { return }
    if getuid() == 0, umount2(mountpoint, 0) == 0 { return }
    if getuid() == 0, umount2(mountpoint, Int32(MNT_DETACH)) == 0 { return }
    writeStandardError("bucketfs: cannot unmount \(mountpoint): \(String(cString: strerror(errno)))\n")
    throw ExitCode(1)
  }
}

enum MountTable {
  /// Whether `path` is a mountpoint now, by /proc/self/mountinfo.
  static func isMountpoint(_ path: String) -> Bool {
    guard let resolved = realpath(path, nil) else { return false }
    defer { free(resolved) }
    let target = String(cString: resolved)
    guard let file = fopen("/proc/self/mountinfo", "r") else { return false }
    defer { fclose(file) }
    var line: UnsafeMutablePointer<CChar>?
    var capacity = 0
    defer { free(line) }
    while getline(&line, &capacity, file) > 0, let line {
      let fields = String(cString: line).split(separator: " ")
      if fields.count > 4, unescape(fields[4]) == target { return true }
    }
    return false
  }

  /// mountinfo writes space, tab, newline and backslash as octal escapes.
  static func unescape(_ field: Substring) -> String {
    var bytes: [UInt8] = []
    var utf8 = Array(field.utf8)[...]
    while let byte = utf8.popFirst() {
      if byte == UInt8(ascii: "\\"), utf8.count >= 3,
        let value = UInt8(String(decoding: utf8.prefix(3), as: UTF8.self), radix: 8)
      {
        bytes.append(value)
        utf8 = utf8.dropFirst(3)
      } else {
        bytes.append(byte)
      }
    }
    return String(decoding: bytes, as: UTF8.self)
  }
}

/// Runs a program from PATH and returns its exit status (-1 if it did not start).
func runProgram(_ name: String, _ arguments: [String]) -> Int32 {
  var argv = ([name] + arguments).map { strdup($0) } + [nil]
  defer { argv.forEach { free($0) } }
  var pid: pid_t = 0
  guard posix_spawnp(&pid, name, nil, nil, &argv, environ) == 0 else { return -1 }
  var status: Int32 = 0
  while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
  return (status & 0x7f) == 0 ? (status >> 8) & 0xff : -1
}

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

#if canImport(Glibc)
  import Glibc
#endif

/// Stages an earlier mount left behind (it was killed, or an upload was
/// refused): listed at mount so the user can recover them, never uploaded
/// and never deleted while they hold bytes that were not stored.
public struct LeftoverStage: Sendable, Equatable {
  /// The staged bytes.
  public let path: String
  /// The object they were meant to become, and the generation they were to replace (0: new).
  public let key: String
  public let baseGeneration: Int64
  public let size: Int64
  /// A streamed file's parts folder: the stage lacks the bytes sent there (holes).
  public var parts: String? = nil

  public var description: String {
    let target = baseGeneration == 0 ? "new object" : "replacing generation \(baseGeneration)"
    let streamed = parts.map { "; streamed: the bytes sent as parts under \($0) are not in it" } ?? ""
    return "\(path): \(size) bytes for \(key) (\(target)\(streamed))"
  }
}

public enum Recovery {
  /// The stages in `directory` that hold unstored bytes, oldest name first.
  /// Stages whose sidecar says they were stored, and data files without a
  /// sidecar (only ever the opened object's own bytes), are deleted. Stages
  /// of a live process are left alone.
  public static func leftovers(in directory: String) -> [LeftoverStage] {
    guard let dir = opendir(directory) else { return [] }
    var names: [String] = []
    while let entry = readdir(dir) {
      let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
        String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
      }
      if name.hasPrefix("stage-") { names.append(name) }
    }
    closedir(dir)
    var found: [LeftoverStage] = []
    for name in names.sorted() where !name.hasSuffix(".json") && !name.hasSuffix(".tmp") {
      let path = directory + "/" + name
      guard !isLive(name) else { continue }
      guard let record = readRecord(path + ".json") else {
        unlink(path)
        continue
      }
      if record.uploaded {
        unlink(path + ".json")
        unlink(path)
        continue
      }
      var info = stat()
      let size = stat(path, &info) == 0 ? Int64(info.st_size) : 0
      found.append(
        LeftoverStage(
          path: path, key: record.key, baseGeneration: record.baseGeneration, size: size, parts: record.parts)
      )
    }
    for name in names where name.hasSuffix(".json.tmp") && !isLive(name) { unlink(directory + "/" + name) }
    return found
  }

  /// The leftovers of every other staging directory under `cacheDirectory`
  /// (mounts of another bucket, prefix or mountpoint), so that the next
  /// mount reports a crash's bytes whatever it mounts; `own` is skipped.
  public static func leftovers(under cacheDirectory: String, except own: String) -> [LeftoverStage] {
    let root = cacheDirectory.hasSuffix("/") ? String(cacheDirectory.dropLast()) : cacheDirectory
    guard let dir = opendir(root) else { return [] }
    var directories: [String] = []
    while let entry = readdir(dir) {
      let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
        String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
      }
      let path = root + "/" + name
      var info = stat()
      guard name != ".", name != "..", path != own, lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR
      else { continue }
      directories.append(path)
    }
    closedir(dir)
    return directories.sorted().flatMap { leftovers(in: $0) }
  }

  /// Stage names carry the pid that made them (`stage-PID-N`).
  private static func isLive(_ name: String) -> Bool {
    let parts = name.split(separator: "-")
    guard parts.count >= 3, let pid = Int32(parts[1]) else { return false }
    if pid == getpid() { return true }
    guard kill(pid, 0) == 0 || errno == EPERM else { return false }
    // A reused pid is another program's: the stage is a leftover all the same.
    let fd = open("/proc/\(pid)/comm", O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return true }
    defer { close(fd) }
    var name = [UInt8](repeating: 0, count: 64)
    let n = name.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
    return n <= 0 || String(decoding: name[0..<n], as: UTF8.self).hasPrefix("bucketfs")
  }

  static func readRecord(_ path: String) -> StageRecord? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 16384)
    while true {
      let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
      if n < 0 && errno == EINTR { continue }
      if n <= 0 { break }
      bytes += chunk[0..<n]
      if bytes.count > 1 << 20 { return nil }
    }
    return try? JSONDecoder().decode(StageRecord.self, from: Data(bytes))
  }

  /// The per-mount staging directory under `cacheDirectory`: one per bucket,
  /// prefix and mountpoint, so the next mount of the same place finds what
  /// the last one left.
  public static func stageDirectory(
    cacheDirectory: String, bucket: String, prefix: String, mountpoint: String
  )
    -> String
  {
    let place = "gs://\(bucket)/\(prefix) at \(mountpoint)"
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in place.utf8 {
      hash ^= UInt64(byte)
      hash = hash &* 0x0000_0100_0000_01b3
    }
    let hex = String(hash, radix: 16)
    let padded = String(repeating: "0", count: 16 - hex.count) + hex
    let base = cacheDirectory.hasSuffix("/") ? String(cacheDirectory.dropLast()) : cacheDirectory
    return "\(base)/\(bucket)-\(padded)"
  }
}

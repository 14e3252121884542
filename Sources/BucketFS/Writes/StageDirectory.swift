import CoreMetrics
import IOThreads
import NIOCore
import ObjectStore
import Synchronization

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

#if canImport(Glibc)
  import Glibc
#endif

/// The private per-mount directory that holds staged files (mode 0700), one
/// data file and one sidecar per staged inode.
final class StageDirectory: Sendable {
  let path: String
  let files: any StageFiles
  /// Where the stages' file work runs; nil: on the caller's thread (tests).
  let io: IOPool?
  /// `bucketfs_staged_bytes`: the lengths of the data files of live stages.
  let staged: Meter
  private let counter = Atomic<UInt64>(0)
  private let pid = getpid()

  /// Creates `path` (and missing parents) if needed and restricts it to its owner.
  init(path: String, files: any StageFiles = LocalStageFiles(), io: IOPool? = nil, staged: Meter)
    throws(StageFailure)
  {
    self.path = path.hasSuffix("/") && path.count > 1 ? String(path.dropLast()) : path
    self.files = files
    self.io = io
    self.staged = staged
    try Self.makeDirectories(self.path)
    if chmod(self.path, 0o700) != 0 { throw StageFailure(code: errno) }
  }

  static func makeDirectories(_ path: String) throws(StageFailure) {
    var built = path.hasPrefix("/") ? "" : "."
    for component in path.split(separator: "/") {
      built += "/" + component
      if mkdir(built, 0o700) != 0 && errno != EEXIST { throw StageFailure(code: errno) }
    }
  }

  /// A fresh, empty stage file; names are unique within this process.
  func makeStage() throws(StageFailure) -> Stage {
    let number = counter.wrappingAdd(1, ordering: .relaxed).newValue
    let name = "stage-\(pid)-\(number)"
    let data = path + "/" + name
    let fd = open(data, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw StageFailure(code: errno) }
    return Stage(fd: fd, path: data, sidecarPath: data + ".json", directory: self)
  }
}

/// What the sidecar of a stage records: enough for the next mount to say
/// what the staged bytes were meant to become.
struct StageRecord: Codable, Equatable {
  var key: String
  /// The generation the upload was to replace; 0 for a new object.
  var baseGeneration: Int64
  /// True once the staged bytes are stored (nothing would be lost).
  var uploaded: Bool
  var fields: [String: String]
  var custom: [String: String]
  /// Where a streamed file's parts went: the stage lacks their bytes.
  var parts: String? = nil
}

import CoreMetrics
import FUSE
import IOThreads
import Logging
import ObjectStore
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// The stage store: files being written, each inode's stage on local disk
/// (bytes, gate, sidecar; Recovery.swift for what a crash leaves), how
/// many handles hold it, and the upload that stores it with its
/// precondition (docs/SEMANTICS.md#writes). It knows staged files, never
/// handle numbers: those are the ``HandleTable``'s. Apart from the node
/// table, so reads and stats of untouched files never wait on it.
final class Staging: MountComponent, Sendable {
  static let mtimeKey = "goog-reserved-file-mtime"
  /// The largest object the service stores: a file cannot grow past it.
  static let maxObjectBytes: UInt64 = 5 << 40

  /// The staged file of each inode, and its writers.
  let inodes = StagedInodes()
  /// Numbers the files' streams (``WriteStream``).
  let streamIDs = Atomic<UInt64>(0)
  /// The store, settings, diagnostics, clock, and the owner of the uploads,
  /// part uploads and part deletes.
  let context: MountContext
  private let stages = Mutex<StageDirectory?>(nil)
  /// The calls that write the stages' bytes.
  let stageFiles: any StageFiles
  /// Where the stages' file work runs (``Stage``); nil: on the caller's thread.
  let diskWork: IOPool?
  /// `bucketfs_staged_bytes` (``Stage``).
  let stagedBytes: Meter
  let nodes: NodeTable
  /// What bucketfs chose of the files it stores, for atomic saves.
  let provenance: Provenance
  let listings: DirectoryCache

  init(
    context: MountContext, stageFiles: any StageFiles, diskWork: IOPool? = nil, nodes: NodeTable,
    provenance: Provenance, listings: DirectoryCache, metrics: any MetricsFactory
  ) {
    self.context = context
    self.stageFiles = stageFiles
    self.diskWork = diskWork
    self.stagedBytes = Meter(label: "bucketfs_staged_bytes", factory: metrics)
    self.nodes = nodes
    self.provenance = provenance
    self.listings = listings
  }

  /// Whether any file is staged.
  var isActive: Bool { !inodes.isEmpty }

  /// The staged file of `inode` that new opens share.
  func file(inode: UInt64) -> StagedFile? {
    inodes.file(inode: inode)
  }

  /// The staged file of `inode` that a new open may share: not unlinked.
  func shared(inode: UInt64) -> StagedFile? {
    guard let staged = file(inode: inode), !staged.state.withLock({ $0.unlinked }) else { return nil }
    return staged
  }

  func makeStage() throws -> Stage {
    // Where is policy (the CLI's, per mount under --cache-dir): none, no writes.
    let path = configuration.stageDirectory
    guard !path.isEmpty else {
      logger.error("no staging directory is configured; files cannot be written")
      throw Errno.readOnly
    }
    do throws(StageFailure) {
      // The first stage makes the directory (mkdir, chmod) with no lock held;
      // two racing first stages both make it, and the first one kept wins.
      let directory: StageDirectory
      if let made = stages.withLock({ $0 }) {
        directory = made
      } else {
        let made = try StageDirectory(path: path, files: stageFiles, io: diskWork, staged: stagedBytes)
        directory = stages.withLock { stages in
          if let stages { return stages }
          stages = made
          return made
        }
      }
      return try directory.makeStage()
    } catch {
      logger.error("cannot stage a file in \(path): \(Errno(error.code))")
      throw Errno(error.code)
    }
  }

  /// Metadata of an object that exists only in a stage, for stat's facts.
  static func placeholder(key: String, bucket: String) -> ObjectMetadata {
    ObjectMetadata(
      bucket: bucket, name: key, size: 0, generation: 0, metageneration: 0, timeCreated: "", updated: "")
  }
}

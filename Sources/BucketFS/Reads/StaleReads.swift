import Dispatch
import FUSE
import Logging
import ObjectStore
import Synchronization

/// A read that finds the generation pinned at open gone: the object was
/// replaced or deleted elsewhere. That handle keeps failing with ESTALE (it
/// never mixes versions), but the next open reads the new version at once
/// instead of pinning the old one again until the metadata TTL runs out.
/// This holds the refreshes under way, one per inode, and the kernel they tell.
final class StaleReads: Sendable {
  /// Kernel notifications may wait for page locks held by reads in flight:
  /// they are sent from a thread of their own, never one that replies.
  private static let notifications = DispatchQueue(label: "bucketfs.kernel-notifications")

  /// Refreshes after a read found its generation gone, per inode.
  private let refreshes = Mutex<[UInt64: Task<Void, Never>]>([:])
  /// Tells the kernel to drop cached attributes and pages; none until mounted.
  private let kernel = Mutex<KernelCache>(.none)
  private let nodes: NodeTable
  /// Full metadata: fetched again for the next open.
  private let known: KnownMetadata
  /// Owns the refreshes (an unmount cancels them).
  private let tasks: BackgroundTasks
  private let logger: Logger

  init(nodes: NodeTable, known: KnownMetadata, tasks: BackgroundTasks, logger: Logger) {
    self.nodes = nodes
    self.known = known
    self.tasks = tasks
    self.logger = logger
  }

  static func isGenerationGone(_ error: any Error) -> Bool {
    switch error as? StorageError {
    case .notFound, .preconditionFailed: true
    default: false
    }
  }

  /// The kernel to tell, once mounted.
  func mounted(kernel: KernelCache) {
    self.kernel.withLock { $0 = kernel }
  }

  /// No refresh is under way.
  var isIdle: Bool { refreshes.withLock { $0.isEmpty } }

  /// Forgets what is known of the key's version, then (after the failing
  /// reply: this runs apart from the request) drops the kernel's attributes
  /// and pages of the inode and fetches the metadata again.
  func generationGone(inode: UInt64, key: String, generation: Int64) {
    logger.info("\(key): generation \(generation) is gone (replaced or deleted); the next open reads anew")
    let kernel = self.kernel.withLock { $0 }
    nodes.expire(file: key)
    let known = self.known
    refreshes.withLock { refreshes in
      guard refreshes[inode] == nil else { return }
      refreshes[inode] = tasks.start(.cancel) { [weak self] in
        await withCheckedContinuation { done in
          Self.notifications.async {
            kernel.invalidate(inode: inode)
            done.resume()
          }
        }
        _ = try? await known.fetch(key)
        _ = self?.refreshes.withLock { $0.removeValue(forKey: inode) }
      }
    }
  }

  /// Drops the kernel's pages of the inode, after the failing reply (this
  /// runs apart from the request): they may hold bytes that were not the object's.
  func dropPages(inode: UInt64) {
    let kernel = self.kernel.withLock { $0 }
    Self.notifications.async { kernel.invalidate(inode: inode) }
  }

  /// An open waits for the refresh a failed read started, so it pins the new version.
  func settle(_ inode: UInt64) async {
    if let pending = refreshes.withLock({ $0[inode] }) { _ = await pending.valueUnlessCancelled() }
  }
}

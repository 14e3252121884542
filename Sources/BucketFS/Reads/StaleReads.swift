import Dispatch
import FUSE
import ObjectStore

/// A read that finds the generation pinned at open gone: the object was
/// replaced or deleted elsewhere. That handle keeps failing with ESTALE (it
/// never mixes versions), but the next open reads the new version at once
/// instead of pinning the old one again until the metadata TTL runs out.
extension Reads {
  /// Kernel notifications may wait for page locks held by reads in flight:
  /// they are sent from a thread of their own, never one that replies.
  private static let notifications = DispatchQueue(label: "bucketfs.kernel-notifications")

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

  /// Forgets what is known of the key's version, then (after the failing
  /// reply: this runs apart from the request) drops the kernel's attributes
  /// and pages of the inode and fetches the metadata again.
  func generationGone(inode: UInt64, key: String, generation: Int64) {
    diagnostics.logger.info(
      "\(key): generation \(generation) is gone (replaced or deleted); the next open reads anew")
    let kernel = self.kernel.withLock { $0 }
    nodes.expire(file: key)
    state.withLock { state in
      guard state.staleReads[inode] == nil else { return }
      let known = self.known
      state.staleReads[inode] = tasks.start(.cancel) { [weak self] in
        await withCheckedContinuation { done in
          Self.notifications.async {
            kernel.invalidate(inode: inode)
            done.resume()
          }
        }
        _ = try? await known.fetch(key)
        _ = self?.state.withLock { $0.staleReads.removeValue(forKey: inode) }
      }
    }
  }

  /// An open waits for the refresh a failed read started, so it pins the new version.
  func settle(_ inode: UInt64) async {
    if let pending = state.withLock({ $0.staleReads[inode] }) { _ = await pending.valueUnlessCancelled() }
  }
}

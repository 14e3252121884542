import CoreMetrics
import Dispatch
import FUSE
import Synchronization

/// Sends the kernel the names the ``NodeTable`` chose to evict, off every
/// request and outside every lock: the kernel drops the entries it can, and
/// the inodes' forgets then free the nodes. By notify prune, up to
/// ``pruneBatch`` nodes a write (Linux 6.18); on a kernel that refuses it,
/// by inval_entry, one name a write, from then on.
final class NodeEvictions: Sendable {
  static let pruneBatch = 512
  private let kernel = Mutex<KernelCache>(.none)
  private let sent = Atomic<Int>(0)
  /// Whether the kernel has taken every prune asked so far.
  private let prunes = Atomic<Bool>(true)
  /// `bucketfs_inodes_evicted_total`: names whose notification the kernel has taken.
  private let evicted: Counter
  private static let notifications = DispatchQueue(label: "bucketfs.node-evictions")

  init(metrics: any MetricsFactory = MetricsSystem.factory) {
    evicted = Counter(label: "bucketfs_inodes_evicted_total", factory: metrics)
  }

  /// The kernel to tell, once mounted.
  func mounted(kernel: KernelCache) {
    self.kernel.withLock { $0 = kernel }
  }

  /// Whether evictions must be named: a prune was refused, so they go by
  /// inval_entry.
  var needsNames: Bool { !prunes.load(ordering: .relaxed) }

  /// Names asked to be dropped so far (for tests).
  var count: Int { sent.load(ordering: .relaxed) }

  func send(_ evictions: [InodeTable.Eviction]) {
    let kernel = self.kernel.withLock { $0 }
    sent.add(evictions.count, ordering: .relaxed)
    Self.notifications.async { [self] in
      Self.notify(evictions, prunes: prunes, prune: { kernel.prune($0) }) {
        kernel.invalidate(parent: $0, name: $1)
      }
      evicted.increment(by: evictions.count)
    }
  }

  /// Prunes the evictions' nodes in batches while `prunes` holds; once a
  /// prune fails (it is cleared), the rest go one name at a time, and those
  /// chosen unnamed stay until the eviction hand meets them again.
  static func notify(
    _ evictions: [InodeTable.Eviction], prunes: borrowing Atomic<Bool>, prune: ([UInt64]) -> Int32,
    invalidate: (_ parent: UInt64, _ name: String) -> Void
  ) {
    var start = 0
    while start < evictions.count, prunes.load(ordering: .relaxed) {
      let end = min(start + pruneBatch, evictions.count)
      guard prune(evictions[start..<end].map(\.inode)) == 0 else {
        prunes.store(false, ordering: .relaxed)
        break
      }
      start = end
    }
    for eviction in evictions[start...] {
      if let name = eviction.name { invalidate(eviction.parent, name) }
    }
  }
}

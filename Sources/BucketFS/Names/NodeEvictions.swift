import CoreMetrics
import Dispatch
import FUSE
import Synchronization

/// Sends the kernel the names the ``NodeTable`` chose to evict (notify
/// inval_entry), off every request and outside every lock: the kernel
/// drops the entries it can, and the inodes' forgets then free the nodes.
final class NodeEvictions: Sendable {
  private let kernel = Mutex<KernelCache>(.none)
  private let sent = Atomic<Int>(0)
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

  /// Names asked to be dropped so far (for tests).
  var count: Int { sent.load(ordering: .relaxed) }

  func send(_ evictions: [InodeTable.Eviction]) {
    let kernel = self.kernel.withLock { $0 }
    sent.add(evictions.count, ordering: .relaxed)
    let evicted = self.evicted
    Self.notifications.async {
      for eviction in evictions { kernel.invalidate(parent: eviction.parent, name: eviction.name) }
      evicted.increment(by: evictions.count)
    }
  }
}

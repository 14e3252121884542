import Dispatch
import FUSE
import Synchronization

/// Sends the kernel the names the ``NodeTable`` chose to evict (notify
/// inval_entry), off every request and outside every lock: the kernel
/// drops the entries it can, and the inodes' forgets then free the nodes.
final class NodeEvictions: Sendable {
  private let kernel = Mutex<KernelCache>(.none)
  private let sent = Atomic<Int>(0)
  private static let notifications = DispatchQueue(label: "bucketfs.node-evictions")

  init() {}

  /// The kernel to tell, once mounted.
  func mounted(kernel: KernelCache) {
    self.kernel.withLock { $0 = kernel }
  }

  /// Names asked to be dropped so far (for tests and logs).
  var count: Int { sent.load(ordering: .relaxed) }

  func send(_ evictions: [InodeTable.Eviction]) {
    let kernel = self.kernel.withLock { $0 }
    sent.add(evictions.count, ordering: .relaxed)
    Self.notifications.async {
      for eviction in evictions { kernel.invalidate(parent: eviction.parent, name: eviction.name) }
    }
  }
}

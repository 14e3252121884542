import ObjectStore
import Synchronization

/// Full metadata of the most recently listed or fetched files, bounded so a
/// listing of a huge directory does not hold every object's metadata while
/// the kernel holds its inodes; an evicted entry is fetched again on demand.
///
/// Its lock is a leaf: ``NodeTable`` inserts and removes entries under its
/// own lock (a node's facts and its full metadata change in one step, so a
/// late answer never replaces a newer one), and ``KnownMetadata`` reads them
/// under this lock alone.
final class MetadataCache: Sendable {
  private let map: Mutex<BoundedMap<ObjectKey, ObjectMetadata>>

  init(capacity: Int) {
    map = Mutex(BoundedMap(capacity: capacity))
  }

  subscript(key: String) -> ObjectMetadata? { map.withLock { $0[ObjectKey(key)] } }

  func insert(_ metadata: ObjectMetadata) {
    map.withLock { $0.insert(metadata, for: ObjectKey(metadata.name)) }
  }

  func remove(_ key: String) {
    map.withLock { $0.remove(ObjectKey(key)) }
  }

  /// Places in the insertion order (stale ones included), entries and capacity (for tests).
  var usage: (places: Int, entries: Int, capacity: Int) {
    map.withLock { ($0.orderCount, $0.count, $0.capacity) }
  }
}

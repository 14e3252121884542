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

  init(capacity: Int, maxBytes: Int = .max) {
    map = Mutex(BoundedMap(capacity: capacity, maxCost: maxBytes, cost: Self.bytes))
  }

  /// About what one entry holds: its key and a pointer in the map's table
  /// (at its load factor), the box of the value and its cost, its place in
  /// the order, and a heap block for every string too long to be stored
  /// inline and for the custom map.
  /// Measured: 8 MiB by this count was 6–8 MiB of peak RSS (`ls -l` of
  /// 100,000 listed names, against a cache of 0; BENCHMARKS.md, 2026-12-07).
  static func bytes(_ metadata: ObjectMetadata) -> Int {
    func heap(_ text: String?) -> Int {
      guard let count = text?.utf8.count, count > 15 else { return 0 }
      return 48 + (count + 15) / 16 * 16
    }
    let slot = MemoryLayout<ObjectKey>.stride + MemoryLayout<Int>.stride
    let box = 16 + MemoryLayout<ObjectMetadata>.stride + MemoryLayout<Int>.stride
    var total = slot * 4 / 3 + (box + 15) / 16 * 16 + MemoryLayout<ObjectKey>.stride + 32
    // Summed field by field: this runs for every entry a listing gives.
    total +=
      heap(metadata.bucket) + 2 * heap(metadata.name) + heap(metadata.timeCreated) + heap(metadata.updated)
    total +=
      heap(metadata.md5Hash) + heap(metadata.crc32c) + heap(metadata.etag) + heap(metadata.storageClass)
    total += heap(metadata.cacheControl) + heap(metadata.contentDisposition) + heap(metadata.contentEncoding)
    total += heap(metadata.contentLanguage) + heap(metadata.contentType)
    if !metadata.custom.isEmpty {
      total += 128
      for (key, value) in metadata.custom { total += 64 + heap(key) + heap(value) }
    }
    return total
  }

  subscript(key: String) -> ObjectMetadata? { map.withLock { $0[ObjectKey(key)] } }

  func insert(_ metadata: ObjectMetadata) {
    map.withLock { $0.insert(metadata, for: ObjectKey(metadata.name)) }
  }

  func remove(_ key: String) {
    map.withLock { _ = $0.remove(ObjectKey(key)) }
  }

  /// Places in the insertion order (stale ones included), entries and capacity (for tests).
  var usage: (places: Int, entries: Int, capacity: Int) {
    map.withLock { ($0.orderCount, $0.count, $0.capacity) }
  }

  /// What the entries held cost together, by ``bytes(_:)`` (for tests).
  var heldBytes: Int { map.withLock { $0.totalCost } }
}

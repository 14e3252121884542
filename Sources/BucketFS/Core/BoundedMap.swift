/// A map that keeps at most `capacity` entries, dropping the oldest inserted
/// first: the metadata cache and the link-target cache.
struct BoundedMap<Key: Hashable & Sendable, Value: Sendable>: Sendable {
  let capacity: Int
  private var entries: [Key: Value] = [:]
  /// Insertion order, for eviction; may hold keys already removed.
  private var order: [Key] = []
  private var head = 0

  init(capacity: Int) {
    self.capacity = max(capacity, 1)
  }

  subscript(key: Key) -> Value? { entries[key] }

  var count: Int { entries.count }

  /// Places in the insertion order, stale ones included (for tests).
  var orderCount: Int { order.count - head }

  mutating func insert(_ value: Value, for key: Key) {
    if entries.updateValue(value, forKey: key) == nil { order.append(key) }
    while entries.count > capacity, head < order.count {
      entries[order[head]] = nil
      head += 1
    }
    if head > 4096 && head * 2 > order.count {
      order.removeFirst(head)
      head = 0
    }
    // Keys removed and inserted again leave stale places behind without
    // ever filling the map: drop them once they outnumber the live.
    if order.count - head > 2 * capacity + 1024 { compact() }
  }

  mutating func remove(_ key: Key) {
    entries[key] = nil
  }

  /// Keeps one place per live key, the oldest.
  private mutating func compact() {
    var seen = Set<Key>()
    order = order[head...].filter { entries[$0] != nil && seen.insert($0).inserted }
    head = 0
  }
}

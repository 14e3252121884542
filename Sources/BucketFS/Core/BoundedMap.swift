/// A map that keeps at most `capacity` entries, and entries whose costs
/// (their bytes, as `cost` counts them) add up to at most `maxCost`,
/// dropping the oldest inserted first: the metadata cache and the
/// link-target cache.
struct BoundedMap<Key: Hashable & Sendable, Value: Sendable>: Sendable {
  let capacity: Int
  let maxCost: Int
  private let cost: @Sendable (Value) -> Int
  /// Each value boxed with its cost (counted once, as it comes in): the
  /// table then moves a pointer, not the value, as it grows and as a
  /// removal shifts the entries after it.
  private var entries: [Key: Entry] = [:]
  /// Insertion order, for eviction; may hold keys already removed.
  private var order: [Key] = []
  private var head = 0
  /// What the entries held cost together.
  private(set) var totalCost = 0

  init(capacity: Int, maxCost: Int = .max, cost: @escaping @Sendable (Value) -> Int = { _ in 0 }) {
    self.capacity = max(capacity, 1)
    self.maxCost = maxCost
    self.cost = cost
  }

  private final class Entry: Sendable {
    let value: Value
    let cost: Int

    init(_ value: Value, cost: Int) {
      self.value = value
      self.cost = cost
    }
  }

  subscript(key: Key) -> Value? { entries[key]?.value }

  var count: Int { entries.count }

  /// Places in the insertion order, stale ones included (for tests).
  var orderCount: Int { order.count - head }

  mutating func insert(_ value: Value, for key: Key) {
    let added = cost(value)
    totalCost += added
    if let previous = entries.updateValue(Entry(value, cost: added), forKey: key) {
      totalCost -= previous.cost
    } else {
      order.append(key)
    }
    // The entry just inserted stays, whatever it costs.
    while entries.count > capacity || (totalCost > maxCost && entries.count > 1), head < order.count {
      if let dropped = entries.removeValue(forKey: order[head]) { totalCost -= dropped.cost }
      head += 1
    }
    if head > 4096 && head * 2 > order.count {
      order.removeFirst(head)
      head = 0
    }
    // Keys removed (or removed and inserted again) leave stale places
    // behind without filling the map, and a byte bound may keep it far below
    // `capacity`: drop them once they outnumber the live.
    if order.count - head > 2 * entries.count + 1024 { compact() }
  }

  /// Removes the entry of `key`, returning it.
  @discardableResult
  mutating func remove(_ key: Key) -> Value? {
    guard let dropped = entries.removeValue(forKey: key) else { return nil }
    totalCost -= dropped.cost
    return dropped.value
  }

  /// The keys held, in no order.
  var keys: some Collection<Key> { entries.keys }

  /// Keeps one place per live key, the oldest.
  private mutating func compact() {
    var seen = Set<Key>()
    order = order[head...].filter { entries[$0] != nil && seen.insert($0).inserted }
    head = 0
  }
}

import Synchronization

/// An object's name and generation: what a cache entry holds bytes of.
struct EntryKey: Hashable, Sendable {
  let name: String
  let generation: Int64
}

/// The entries on disk, their bytes, and their order of last use. Its lock
/// is never held across I/O: eviction picks its victims under it and the
/// caller deletes their files after.
final class CacheIndex: Sendable {
  private struct Slot {
    let entry: CacheEntry
    var bytes: Int64
    var lastUse: UInt64
    /// When this mount last set the map file's time (the last use a remount sees).
    var touched: ContinuousClock.Instant?
  }
  private struct State {
    var slots: [EntryKey: Slot] = [:]
    var used: Int64 = 0
    var clock: UInt64 = 0
  }

  let limit: Int64
  /// Disk an entry takes beyond its blocks, counted once per entry: the map
  /// file's filesystem block and the data file's last, partial one. Without
  /// it, many small entries would take far more disk than they count.
  static let entryOverhead: Int64 = 8 << 10
  private let state = Mutex(State())
  /// Seconds between updates of an entry's persisted last use.
  private static let touchInterval: Duration = .seconds(60)

  init(limit: Int64) {
    self.limit = limit
  }

  /// Disk in use by the entries: their blocks and overheads.
  var used: Int64 { state.withLock { $0.used } }
  var count: Int { state.withLock { $0.slots.count } }

  /// Adds an entry found on disk at mount; `entries` are in order of last use, oldest first.
  func load(_ entries: [(CacheEntry, Int64)]) {
    state.withLock { state in
      for (entry, bytes) in entries {
        state.clock += 1
        let counted = bytes + Self.entryOverhead
        state.slots[entry.key] = Slot(entry: entry, bytes: counted, lastUse: state.clock, touched: nil)
        state.used += counted
      }
    }
  }

  /// The entry for `key`, if any, as it is (not marked used).
  func peek(_ key: EntryKey) -> CacheEntry? {
    state.withLock { $0.slots[key]?.entry }
  }

  /// The entry for `key`, marked used; `touch` when its persisted last use is due an update.
  func use(_ key: EntryKey) -> (entry: CacheEntry, touch: Bool)? {
    state.withLock { state in
      guard var slot = state.slots[key] else { return nil }
      state.clock += 1
      slot.lastUse = state.clock
      let now = ContinuousClock.now
      let touch = slot.touched.map { now - $0 >= Self.touchInterval } ?? true
      if touch { slot.touched = now }
      state.slots[key] = slot
      return (slot.entry, touch)
    }
  }

  /// The entry for `key`, made by `make` if there is none.
  func entry(_ key: EntryKey, make: () -> CacheEntry) -> CacheEntry {
    state.withLock { state in
      state.clock += 1
      if var slot = state.slots[key] {
        slot.lastUse = state.clock
        state.slots[key] = slot
        return slot.entry
      }
      let entry = make()
      state.slots[key] = Slot(entry: entry, bytes: 0, lastUse: state.clock, touched: ContinuousClock.now)
      return entry
    }
  }

  /// Counts `bytes` more for `entry` (and its overhead, the first time),
  /// first removing least recently used other entries until they fit the
  /// limit. Nil (nothing changed) if they cannot fit or the entry is gone;
  /// else the evicted entries, whose files the caller deletes.
  func reserve(_ blockBytes: Int64, for entry: CacheEntry) -> [CacheEntry]? {
    state.withLock { state in
      guard let held = state.slots[entry.key]?.bytes, state.slots[entry.key]?.entry === entry else {
        return nil
      }
      let bytes = blockBytes + (held == 0 ? Self.entryOverhead : 0)
      guard held + bytes <= limit else { return nil }
      var victims: [CacheEntry] = []
      while state.used + bytes > limit {
        guard
          let oldest = state.slots.values.filter({ $0.entry !== entry }).min(by: { $0.lastUse < $1.lastUse })
        else { break }
        state.slots[oldest.entry.key] = nil
        state.used -= oldest.bytes
        victims.append(oldest.entry)
      }
      state.slots[entry.key]?.bytes += bytes
      state.used += bytes
      return victims
    }
  }

  /// Gives back bytes reserved for a write that failed.
  func release(_ bytes: Int64, for entry: CacheEntry) {
    state.withLock { state in
      guard state.slots[entry.key]?.entry === entry else { return }
      state.slots[entry.key]?.bytes -= bytes
      state.used -= bytes
    }
  }

  /// Forgets `entry`; true if it was still listed (the caller deletes its files).
  @discardableResult
  func remove(_ entry: CacheEntry) -> Bool {
    state.withLock { state in
      guard let slot = state.slots[entry.key], slot.entry === entry else { return false }
      state.slots[entry.key] = nil
      state.used -= slot.bytes
      return true
    }
  }

  /// Removes least recently used entries until the limit holds (a smaller
  /// limit than the last mount's); the caller deletes their files.
  func trim() -> [CacheEntry] {
    state.withLock { state in
      var victims: [CacheEntry] = []
      while state.used > limit, let oldest = state.slots.values.min(by: { $0.lastUse < $1.lastUse }) {
        state.slots[oldest.entry.key] = nil
        state.used -= oldest.bytes
        victims.append(oldest.entry)
      }
      return victims
    }
  }
}

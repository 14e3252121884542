import Synchronization

/// One entry's files and map. Its lock guards the map in memory only, and
/// only its own methods take it: the map file is written after it is
/// released, by one caller at a time (``claimMapWrite(_:)``), who writes
/// again if the map changed meanwhile (``nextMapToWrite()``).
final class CacheEntry: Sendable {
  private struct State: Sendable {
    var map: BlockMap
    /// Evicted or discarded: its files are gone and nothing may list blocks again.
    var removed = false
    /// A caller is writing the map file; `dirty`: the map changed since it began.
    var writing = false
    var dirty = false
    /// An upload's bytes are being made its data file (a link or a copy, then
    /// the block sums): reads write nothing to it meanwhile.
    var handingOver = false
  }

  let key: EntryKey
  /// The entry's files without their extension (`.data`, `.map`).
  let path: String
  private let state: Mutex<State>

  /// An entry for `map`; `handingOver` when an upload's bytes are being made
  /// its data file (``endHandover()`` says they are).
  init(key: EntryKey, path: String, map: BlockMap, handingOver: Bool = false) {
    self.key = key
    self.path = path
    self.state = Mutex(State(map: map, handingOver: handingOver))
  }

  var dataPath: String { path + ".data" }
  var mapPath: String { path + ".map" }

  // MARK: - Serving

  /// The map, unless the entry was removed.
  var map: BlockMap? { state.withLock { $0.removed ? nil : $0.map } }

  var isRemoved: Bool { state.withLock { $0.removed } }

  /// The object's CRC-32C, when the map knows it.
  var objectCRC: UInt32? { state.withLock { $0.map.objectCRC } }

  /// Whether the entry may serve `range`: its whole object matched its
  /// CRC-32C (bytes that arrived changed never become servable), and it is
  /// not removed.
  func lists(_ range: Range<Int64>) -> Bool {
    state.withLock { !$0.removed && $0.map.verified && $0.map.covers(range) != nil }
  }

  /// The blocks `range` falls in, their sums and the object's size, when the
  /// entry is verified and lists them all.
  func plan(_ range: Range<Int64>) -> (blocks: Range<Int64>, sums: [UInt32], size: Int64?)? {
    state.withLock { state in
      guard !state.removed, state.map.verified, let blocks = state.map.covers(range) else { return nil }
      return (blocks, blocks.map { state.map.blocks[$0] ?? 0 }, state.map.size)
    }
  }

  // MARK: - Filling

  /// The blocks present, when a read of an object of `size` may add some:
  /// not removed, no upload handing over, and the size agrees.
  func presentBlocks(forObjectOf size: Int64?) -> Set<Int64>? {
    state.withLock { state in
      guard !state.removed, !state.handingOver, state.map.size == nil || size == nil || state.map.size == size
      else { return nil }
      return Set(state.map.blocks.keys)
    }
  }

  /// The map as it would be with `sums` added, and the CRC-32C to check it
  /// against, when they would complete an unverified map whose CRC-32C is
  /// known (`crc` when the map does not know it).
  func completion(adding sums: [Int64: UInt32], size: Int64?, crc: UInt32?) -> (map: BlockMap, crc: UInt32)? {
    state.withLock { state in
      var map = state.map
      map.size = map.size ?? size
      map.blocks.merge(sums) { old, _ in old }
      guard map.isComplete, !map.verified, let crc = map.objectCRC ?? crc else { return nil }
      return (map, crc)
    }
  }

  /// An upload's bytes are its data file now: reads may add to it.
  func endHandover() {
    state.withLock { $0.handingOver = false }
  }

  /// Evicted or discarded: nothing lists its blocks again.
  func markRemoved() {
    state.withLock { $0.removed = true }
  }

  // MARK: - Writing the map file

  /// Changes the map; returns it, and whether this caller writes the map
  /// file (else the caller writing it now writes this change after its
  /// own). Nil when the entry was removed.
  func claimMapWrite(_ change: (inout BlockMap) -> Void) -> (map: BlockMap, write: Bool)? {
    state.withLock { state in
      guard !state.removed else { return nil }
      change(&state.map)
      if state.writing {
        state.dirty = true
        return (state.map, false)
      }
      state.writing = true
      return (state.map, true)
    }
  }

  /// The map changed while the claimed write ran: the map to write next.
  /// Nil ends the claim (no change, or the entry was removed).
  func nextMapToWrite() -> BlockMap? {
    state.withLock { state in
      guard state.dirty, !state.removed else {
        state.writing = false
        return nil
      }
      state.dirty = false
      return state.map
    }
  }

  /// The claimed write failed: the claim ends (the caller discards the entry).
  func mapWriteFailed() {
    state.withLock { $0.writing = false }
  }
}

import NIOCore
import ObjectStore
import Synchronization

/// Fetches small files ahead for programs that read a directory's files one
/// after another (`cp -r`, `tar`, `cat dir/*`), within the read-ahead budget.
///
/// It starts only from the evidence of reads: a file read to its end, then
/// the file that follows it in its directory opened within ``window``
/// seconds, following either in name order (`cat dir/*`, `tar`) or in inode
/// order (GNU `cp` sorts a directory's names by inode number before it
/// copies them). Then the next ``ahead`` files in that order that are at most
/// ``smallFile`` bytes are fetched whole, each holding a budget grant of its
/// size; a file nobody opens within ``window`` seconds is dropped (at the
/// next open, or by a sweep a little later). A listing
/// alone never starts it, and a file over ``smallFile`` is never fetched
/// unasked.
final class SiblingPrefetch: MountComponent, Sendable {
  let window: Double = 5
  let ahead = 8
  let smallFile: UInt64 = 1 << 20
  let context: MountContext
  private let budget: ReadAheadBudget
  /// Holds the files each directory's readdir gave, in order.
  private let directoryCache: DirectoryCache

  typealias File = DirectoryCache.ListedFile
  struct Prefetched {
    let generation: Int64
    let task: Task<ByteBuffer, any Error>
    let grant: Int
    let at: Double
  }
  private struct State {
    /// Files already opened in directories the cache has the order of
    /// (never fetched ahead again, whatever the order).
    var opened: Set<ObjectKey> = []
    /// The last file read to its end, and when.
    var finished: (key: String, at: Double)?
    var prefetched: [ObjectKey: Prefetched] = [:]
    /// A sweep is scheduled for what nobody opens.
    var sweeping = false
  }
  private let state = Mutex(State())

  init(context: MountContext, budget: ReadAheadBudget, directoryCache: DirectoryCache) {
    self.context = context
    self.budget = budget
    self.directoryCache = directoryCache
  }

  deinit {
    state.withLock { state in
      for entry in state.prefetched.values { drop(entry) }
      state.prefetched = [:]
    }
  }

  /// A read reached the end of `key`.
  func readToEnd(_ key: String) {
    let now = clock()
    state.withLock { $0.finished = (key, now) }
  }

  /// `open` of `key` (generation `generation`): its bytes if fetched ahead,
  /// with the budget grant they hold; starts fetching the next files when
  /// this open follows the last file read to its end.
  func opened(_ key: String, generation: Int64) -> (task: Task<ByteBuffer, any Error>, grant: Int)? {
    let now = clock()
    let files = Self.directory(of: key).flatMap { directoryCache.filesRead(in: $0) }
    return state.withLock { state in
      expire(now: now, &state)
      if files != nil {
        // Bounded as the cache bounds the orders: a few directories' files.
        if state.opened.count >= DirectoryCache.readOrderCapacity * DirectoryCache.readOrderFiles {
          state.opened.removeAll()
        }
        state.opened.insert(ObjectKey(key))
      }
      var mine: (Task<ByteBuffer, any Error>, Int)?
      if let entry = state.prefetched.removeValue(forKey: ObjectKey(key)) {
        if entry.generation == generation { mine = (entry.task, entry.grant) } else { drop(entry) }
      }
      if let (finished, at) = state.finished, now - at < window,
        let files, let next = following(finished, then: key, in: files, &state)
      {
        for file in next where state.prefetched[ObjectKey(file.key)] == nil {
          let grant = budget.acquire(upTo: Int(file.size), atLeast: Int(file.size))
          guard grant > 0 else { break }
          let (store, name, generation, size) = (store, file.key, file.generation, file.size)
          let task = tasks.start(.cancel) {
            try await store.read(name, generation: generation, range: 0..<Int64(size), reusing: nil)
          }
          state.prefetched[ObjectKey(file.key)] = Prefetched(
            generation: file.generation, task: task, grant: grant, at: now)
        }
        if !state.prefetched.isEmpty && !state.sweeping {
          state.sweeping = true
          scheduleSweep()
        }
      }
      return mine
    }
  }

  /// Drops what waited too long even when no further file is opened (the
  /// reader stopped), so its budget comes back.
  private func sweep() {
    let now = clock()
    state.withLock { state in
      expire(now: now, &state)
      state.sweeping = !state.prefetched.isEmpty
      if state.sweeping { scheduleSweep() }
    }
  }

  private func scheduleSweep() {
    let delay = window + 1
    tasks.start(.cancel) { [weak self] in
      // Cancelled (the unmount): nothing is swept, and no sweep follows.
      guard (try? await Task.sleep(for: .seconds(delay))) != nil else { return }
      self?.sweep()
    }
  }

  /// Prefetched files held (for tests).
  var held: Int { state.withLock { $0.prefetched.count } }

  /// The small files after `key` in the order that puts `key` right after
  /// `previous` (name order, else inode order); nil if neither does.
  private func following(_ previous: String, then key: String, in files: [File], _ state: inout State)
    -> [File]?
  {
    guard let directory = Self.directory(of: key),
      Self.directory(of: previous).map({ Names.same($0, directory) }) == true
    else { return nil }
    for order in [files, files.sorted { $0.inode < $1.inode }] {
      guard let index = order.firstIndex(where: { Names.same($0.key, key) }), index > 0,
        Names.same(order[index - 1].key, previous)
      else { continue }
      let opened = state.opened
      let small = order[(index + 1)...].lazy.filter {
        $0.size > 0 && $0.size <= self.smallFile && !opened.contains(ObjectKey($0.key))
      }
      return Array(small.prefix(ahead))
    }
    return nil
  }

  private func expire(now: Double, _ state: inout State) {
    for (key, entry) in state.prefetched where now - entry.at >= window {
      state.prefetched[key] = nil
      drop(entry)
    }
  }

  private func drop(_ entry: Prefetched) {
    entry.task.cancel()
    budget.release(entry.grant)
  }

  /// `a/b/c` -> `a/b/`.
  static func directory(of key: String) -> String? {
    guard let slash = key.utf8.lastIndex(of: UInt8(ascii: "/")) else { return "" }
    return String(Substring(key.utf8[...slash]))
  }
}

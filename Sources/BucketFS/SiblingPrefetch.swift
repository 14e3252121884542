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
final class SiblingPrefetch: Sendable {
  let window: Double = 5
  let ahead = 8
  let smallFile: UInt64 = 1 << 20
  private let store: any ObjectStore
  /// Owns the tasks this starts (BackgroundTasks.swift).
  let tasks: BackgroundTasks
  private let budget: ReadAheadBudget
  private let clock: @Sendable () -> Double

  struct File: Sendable {
    let key: String
    let inode: UInt64
    let size: UInt64
    let generation: Int64
  }
  struct Prefetched {
    let generation: Int64
    let task: Task<ByteBuffer, any Error>
    let grant: Int
    let at: Double
  }
  private struct State {
    /// The files of the directories read last (a few), in listing order, and
    /// those already opened (never fetched ahead again, whatever the order).
    var directories: [ObjectKey: [File]] = [:]
    var opened: Set<ObjectKey> = []
    var recent: [ObjectKey] = []
    /// The last file read to its end, and when.
    var finished: (key: String, at: Double)?
    var prefetched: [ObjectKey: Prefetched] = [:]
    /// A sweep is scheduled for what nobody opens.
    var sweeping = false
  }
  private let state = Mutex(State())

  init(
    store: any ObjectStore, budget: ReadAheadBudget, clock: @escaping @Sendable () -> Double,
    tasks: BackgroundTasks
  ) {
    self.store = store
    self.tasks = tasks
    self.budget = budget
    self.clock = clock
  }

  deinit {
    state.withLock { state in
      for entry in state.prefetched.values { drop(entry) }
      state.prefetched = [:]
    }
  }

  /// A readdir of `directory` gave these files.
  func listed(_ directory: String, files: [File]) {
    guard !files.isEmpty else { return }
    let directory = ObjectKey(directory)
    state.withLock { state in
      if state.directories[directory] == nil {
        state.recent.append(directory)
        if state.recent.count > 8 {
          let gone = state.recent.removeFirst()
          state.directories[gone] = nil
          state.opened = state.opened.filter { Self.directory(of: $0.name).map { ObjectKey($0) } != gone }
        }
      }
      var known = state.directories[directory, default: []]
      // A directory listed again (`ls`, then the shell's glob) gives the same names again.
      var seen = Set(known.lazy.map { ObjectKey($0.key) })
      for file in files where seen.insert(ObjectKey(file.key)).inserted { known.append(file) }
      if known.count > 4096 { known.removeFirst(known.count - 4096) }
      state.directories[directory] = known
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
    return state.withLock { state in
      expire(now: now, &state)
      if let directory = Self.directory(of: key), state.directories[ObjectKey(directory)] != nil {
        state.opened.insert(ObjectKey(key))
      }
      var mine: (Task<ByteBuffer, any Error>, Int)?
      if let entry = state.prefetched.removeValue(forKey: ObjectKey(key)) {
        if entry.generation == generation { mine = (entry.task, entry.grant) } else { drop(entry) }
      }
      if let (finished, at) = state.finished, now - at < window,
        let next = following(finished, then: key, &state)
      {
        for file in next where state.prefetched[ObjectKey(file.key)] == nil {
          let grant = budget.acquire(upTo: Int(file.size), atLeast: Int(file.size))
          guard grant > 0 else { break }
          let (store, name, generation, size) = (store, file.key, file.generation, file.size)
          let task = tasks.start(.cancel) {
            try await store.read(name, generation: generation, range: 0..<Int64(size))
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
  private func following(_ previous: String, then key: String, _ state: inout State) -> [File]? {
    guard let directory = Self.directory(of: key),
      Self.directory(of: previous).map({ Names.same($0, directory) }) == true,
      let files = state.directories[ObjectKey(directory)]
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

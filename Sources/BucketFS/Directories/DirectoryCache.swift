import ObjectStore
import Synchronization

/// What this mount knows of each directory's contents, in one place, under
/// one private lock:
///
/// - **Complete name sets**: a directory seen listed fresh and complete (a
///   readdir pass from the first entry to the last, or a directory this
///   mount just created). A name not in one is known absent without a lookup
///   request while the set is younger than the negative TTL. Names this
///   mount stores join it and names it deletes leave it, so only another
///   client's new objects can be missed, for as long as the kernel's own
///   negative entries would miss them. Bounded by ``completeCapacity``
///   directories of at most ``maxNames`` names.
/// - **Kept listings**: children with their facts, from flat listings of a
///   subtree (a walk's descent or a lookup's subtree page, ``TreeListing``),
///   kept for the directory's next `opendir`, which takes them (they are
///   given once), and for lookups of names in them, while younger than
///   ``freshness``. Bounded by ``capacity`` entries, oldest dropped first.
/// - **Files in reading order**: the files readdir gave of the few
///   directories read last, with their inode, size and generation, for
///   ``SiblingPrefetch``.
/// - **Subtree sizes**: subtrees a lookup found over a page (looked up by
///   delimiter for ``largeMemory`` seconds), and the directories whose
///   listing a lookup just kept (their own `opendir` takes it within
///   ``followWindow``).
///
/// Walks, lookups and readdir passes *fill* it; ``invalidate(_:)`` is the
/// one way a change reaches it: ``ListingAwareStore`` reports every write
/// (whatever its outcome), the write layer a file created and not stored
/// yet, and the namespace what it found asking the bucket about a name.
/// Each change also ends the kernel's cached listings it could make wrong
/// (``KernelListings``), outside the lock.
final class DirectoryCache: Sendable {
  /// A change that can make what is kept wrong.
  enum Change {
    /// This mount stored `key` (a file, or a `dir/` placeholder): it joins its
    /// directory's complete set, and each directory on its path joins its
    /// parent's; kept listings it could make wrong are dropped.
    case stored(String)
    /// This mount created the placeholder `dir/` where nothing was, having
    /// asked at `since`: it is also a complete, empty listing.
    case createdDirectory(String, since: Double)
    /// This mount deleted or moved away file `key`: it leaves its directory's
    /// complete set (a `dir/` placeholder changes no set: the directory may
    /// live on). Kept listings it could make wrong are dropped.
    case removed(String)
    /// A write of `key` failed, or the bucket was asked about it afresh:
    /// the kept listings that show it may be older than what the service
    /// holds (another client's change) and are dropped; nothing else changes.
    case touched(String)
    /// A file created here and not stored yet: its name joins its directory's
    /// complete set (a lookup finds it among the files in flight first).
    case createdInFlight(String)
  }

  /// A file a readdir gave, with what sibling prefetch orders and fetches by.
  struct ListedFile: Sendable {
    let key: String
    let inode: UInt64
    let size: UInt64
    let generation: Int64
  }

  enum Known {
    case listed(ListedEntry)
    /// Not in the kept listing of its directory, answered at this time.
    case absent(since: Double)
  }

  /// How a lookup lists a directory's subtree: one flat page of `size`
  /// entries; `epoch` is handed back to ``keep(lookedUp:page:answeredAt:flat:)``.
  struct FlatLookup {
    let size: Int
    let epoch: Int
  }

  static let completeCapacity = 256
  /// Larger directories get no complete set (their names would cost memory).
  static let maxNames = 10_000
  /// How soon after a lookup's answer the directory's own `opendir` takes
  /// the listing it gave: the moment between a walk's lookup and its opendir.
  let followWindow: Double = 1
  let largeMemory: Double = 60
  /// Entries held in kept listings, at most.
  let capacity: Int
  /// How long a kept listing stands for its directory.
  let freshness: Double
  let pageSize: Int
  private let clock: @Sendable () -> Double
  private let onConflict: @Sendable (String) -> Void
  private let kernelListings: KernelListings

  private struct NameSet {
    var names: Set<ObjectKey>
    var at: Double
  }
  private struct Pass {
    let directory: String
    var names: Set<ObjectKey> = []
    var at: Double
  }
  private struct Kept {
    let entries: [ListedEntry]
    let at: Double
  }
  private struct State {
    var complete: [ObjectKey: NameSet] = [:]
    var completeOrder: [ObjectKey] = []
    /// readdir passes under way, by directory handle.
    var passes: [UInt64: Pass] = [:]
    var kept: [ObjectKey: Kept] = [:]
    /// Keys in `kept` in the order they came, for dropping the oldest.
    var keptOrder: [ObjectKey] = []
    var held = 0
    /// Bumped by every change: a fill started before keeps nothing.
    var epoch = 0
    var large: [ObjectKey: Double] = [:]
    var lookedUp: [ObjectKey: Double] = [:]
    /// The files of the directories read last (a few), in listing order.
    var readOrder: [ObjectKey: [ListedFile]] = [:]
    var readRecent: [ObjectKey] = []
  }
  private let state = Mutex(State())

  init(
    pageSize: Int, freshness: Double, kernelListings: KernelListings,
    clock: @escaping @Sendable () -> Double, onConflict: @escaping @Sendable (String) -> Void
  ) {
    self.pageSize = pageSize
    self.capacity = 4 * pageSize
    self.freshness = min(freshness, 10)
    self.kernelListings = kernelListings
    self.clock = clock
    self.onConflict = onConflict
  }

  // MARK: - The one way in for changes

  func invalidate(_ change: Change) {
    switch change {
    case .stored(let key):
      state.withLock { state in
        dropKept(around: key, &state)
        add(key: key, &state)
      }
      kernelListings.changed(key)
    case .createdDirectory(let key, let since):
      state.withLock { state in
        dropKept(around: key, &state)
        add(key: key, &state)
        record(directory: key, names: [], at: since, &state)
      }
      kernelListings.changed(key)
    case .removed(let key):
      state.withLock { state in
        dropKept(around: key, &state)
        remove(key: key, &state)
      }
      kernelListings.changed(key)
    case .touched(let key):
      // Nothing changed here: the kernel's listings stand.
      state.withLock { dropKept(around: key, &$0) }
    case .createdInFlight(let key):
      state.withLock { add(key: key, &$0) }
    }
  }

  // MARK: - What lookups ask

  /// Whether `name` is absent from a complete set of `directory` younger than `ttl`.
  func knownAbsent(directory: String, name: String, now: Double, ttl: Double) -> Bool {
    state.withLock { state in
      guard let set = state.complete[ObjectKey(directory)], now - set.at < ttl else { return false }
      return !set.names.contains(ObjectKey(name))
    }
  }

  /// What a kept listing of `directory` says of `name`, if one is held and
  /// fresh; the listing stays for its `opendir`.
  func known(_ name: String, in directory: String) -> Known? {
    let now = clock()
    return state.withLock { state in
      guard let kept = state.kept[ObjectKey(directory)], now - kept.at < freshness else { return nil }
      if let entry = kept.entries.first(where: { Names.same($0.name, name) }) { return .listed(entry) }
      return .absent(since: kept.at)
    }
  }

  /// How a lookup of directory `key` lists: a flat page, unless the subtree
  /// was found over a page lately (nil: by delimiter).
  func flatLookup(of key: String) -> FlatLookup? {
    let now = clock()
    return state.withLock { state in
      if let at = state.large[ObjectKey(key)], now - at < largeMemory { return nil }
      return FlatLookup(size: pageSize, epoch: state.epoch)
    }
  }

  /// The answer to ``flatLookup(of:)``: a subtree that ends within the page
  /// gives the listings of `key` and of every directory under it; one that
  /// does not, those of the directories the page ended, and `key` is found large.
  func keep(lookedUp key: String, page: ListPage, answeredAt: Double, flat: FlatLookup) {
    var tree = TreeListing(root: key, onConflict: onConflict)
    var done: [TreeListing.Listing] = []
    for item in page.items { done += tree.add(item, answeredAt: answeredAt) }
    guard page.nextPageToken == nil else {
      keep(done, epoch: flat.epoch)
      state.withLock { state in
        if state.large.count >= 1024 { state.large.removeAll() }
        state.large[ObjectKey(key)] = answeredAt
      }
      return
    }
    keep(done + tree.finish(), epoch: flat.epoch)
    state.withLock { state in
      guard state.epoch == flat.epoch, state.kept[ObjectKey(key)] != nil else { return }
      if state.lookedUp.count >= 1024 { state.lookedUp.removeAll() }
      state.lookedUp[ObjectKey(key)] = answeredAt
    }
  }

  // MARK: - What walks fill and take

  /// Bumped by every change: a fill started at one epoch keeps nothing after another.
  var epoch: Int { state.withLock { $0.epoch } }

  /// Entries held in kept listings.
  var heldEntries: Int { state.withLock { $0.held } }

  /// Whether a fill of `key` would find room and nothing kept already.
  func wantsFill(of key: String) -> Bool {
    state.withLock { $0.kept[ObjectKey(key)] == nil && $0.held < capacity / 2 }
  }

  /// Keeps completed listings while they fit; a walk takes them in the
  /// order they came, so the newest are the ones left to list themselves.
  func keep(_ listings: [TreeListing.Listing], epoch: Int) {
    guard !listings.isEmpty else { return }
    let now = clock()
    state.withLock { state in
      guard state.epoch == epoch else { return }
      // Listings a walk passed by (find -prune, a walk that stopped) expire.
      var current: [ObjectKey] = []
      for key in state.keptOrder {
        guard let kept = state.kept[key] else { continue }
        if now - kept.at < freshness { current.append(key) } else { drop(key, &state) }
      }
      state.keptOrder = current
      for (name, entries) in listings {
        let key = ObjectKey(name)
        drop(key, &state)
        guard state.held + entries.count <= capacity else { continue }
        state.kept[key] = Kept(entries: entries, at: now)
        state.keptOrder.append(key)
        state.held += entries.count
      }
    }
  }

  /// The kept listing of `key` for its `opendir`, if fresh; given once.
  /// `lookedUpOnly`: only the listing a lookup of `key` just kept, for an
  /// `opendir` that is no walk's descent (within ``followWindow`` of the
  /// lookup's answer).
  func take(_ key: String, lookedUpOnly: Bool = false) -> [ListedEntry]? {
    let now = clock()
    return state.withLock { state in
      let lookedUp = state.lookedUp.removeValue(forKey: ObjectKey(key))
      if lookedUpOnly {
        guard let at = lookedUp, now - at < followWindow else { return nil }
      }
      return take(key, now: now, &state)
    }
  }

  // MARK: - What readdir passes fill

  /// A step of a readdir pass, by directory handle.
  enum PassStep {
    /// The pass began at the first entry of `directory`.
    case started(directory: String)
    /// Names the pass handed the kernel, each from a page answered at its
    /// time (the listing is as fresh as its oldest page); `complete` at its end.
    case listed([(String, Double)], complete: Bool)
    /// The handle was released.
    case ended
  }

  func pass(handle: UInt64, _ step: PassStep) {
    switch step {
    case .started(let directory):
      let now = clock()
      state.withLock { $0.passes[handle] = Pass(directory: directory, at: now) }
    case .listed(let names, let complete):
      guard !names.isEmpty || complete else { return }
      state.withLock { state in
        if var pass = state.passes[handle] {
          for (name, answeredAt) in names {
            pass.names.insert(ObjectKey(name))
            pass.at = min(pass.at, answeredAt)
          }
          state.passes[handle] = pass.names.count > Self.maxNames ? nil : pass
        }
        guard complete, let pass = state.passes.removeValue(forKey: handle) else { return }
        record(directory: pass.directory, names: pass.names, at: pass.at, &state)
      }
    case .ended:
      state.withLock { _ = $0.passes.removeValue(forKey: handle) }
    }
  }

  /// A readdir of `directory` gave these files (in listing order).
  func readdirGave(_ directory: String, files: [ListedFile]) {
    guard !files.isEmpty else { return }
    let directory = ObjectKey(directory)
    state.withLock { state in
      if state.readOrder[directory] == nil {
        state.readRecent.append(directory)
        if state.readRecent.count > Self.readOrderCapacity {
          state.readOrder[state.readRecent.removeFirst()] = nil
        }
      }
      var known = state.readOrder[directory, default: []]
      // A directory listed again (`ls`, then the shell's glob) gives the same names again.
      var seen = Set(known.lazy.map { ObjectKey($0.key) })
      for file in files where seen.insert(ObjectKey(file.key)).inserted { known.append(file) }
      if known.count > Self.readOrderFiles { known.removeFirst(known.count - Self.readOrderFiles) }
      state.readOrder[directory] = known
    }
  }

  /// The files readdir gave of `directory`, in listing order, if it was read lately.
  func filesRead(in directory: String) -> [ListedFile]? {
    state.withLock { $0.readOrder[ObjectKey(directory)] }
  }

  static let readOrderCapacity = 8
  static let readOrderFiles = 4096

  // MARK: - Under the lock

  private func record(directory: String, names: Set<ObjectKey>, at time: Double, _ state: inout State) {
    guard names.count <= Self.maxNames else { return }
    if state.complete.updateValue(NameSet(names: names, at: time), forKey: ObjectKey(directory)) == nil {
      state.completeOrder.append(ObjectKey(directory))
    }
    if state.completeOrder.count > Self.completeCapacity {
      let old = state.completeOrder.removeFirst()
      state.complete[old] = nil
    }
  }

  /// `key`'s name joins its directory's complete set, and each directory on
  /// its path joins its parent's (a directory renamed here has no placeholder).
  private func add(key: String, _ state: inout State) {
    guard !state.complete.isEmpty else { return }
    var rest = Substring(key)
    if rest.hasSuffix("/") { rest = rest.dropLast() }
    while !rest.isEmpty {
      let cut = rest.lastIndex(of: "/").map { rest.index(after: $0) } ?? rest.startIndex
      state.complete[ObjectKey(rest[..<cut])]?.names.insert(ObjectKey(rest[cut...]))
      rest = cut == rest.startIndex ? "" : rest[..<rest.index(before: cut)]
    }
  }

  /// The callers made sure no directory of that name exists (unlink and
  /// rename answer EISDIR first); a name kept by mistake only costs a lookup its request.
  private func remove(key: String, _ state: inout State) {
    guard !state.complete.isEmpty, !key.hasSuffix("/") else { return }
    let cut = key.lastIndex(of: "/").map { key.index(after: $0) } ?? key.startIndex
    state.complete[ObjectKey(key[..<cut])]?.names.remove(ObjectKey(key[cut...]))
  }

  /// Drops every kept listing a change of `key` (an object name or a
  /// directory prefix) could make wrong: those of its ancestors and of
  /// everything under it; fills under way keep nothing.
  private func dropKept(around key: String, _ state: inout State) {
    state.epoch += 1
    for listed in state.kept.keys
    where key.utf8.starts(with: listed.name.utf8) || listed.name.utf8.starts(with: key.utf8) {
      drop(listed, &state)
    }
  }

  private func take(_ key: String, now: Double, _ state: inout State) -> [ListedEntry]? {
    let key = ObjectKey(key)
    guard let kept = state.kept[key] else { return nil }
    drop(key, &state)
    return now - kept.at < freshness ? kept.entries : nil
  }

  private func drop(_ key: ObjectKey, _ state: inout State) {
    guard let kept = state.kept.removeValue(forKey: key) else { return }
    state.held -= kept.entries.count
  }
}

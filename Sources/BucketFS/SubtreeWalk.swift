import Logging
import ObjectStore
import Synchronization

/// Recognises tree walks (`find`, `du`, `ls -R`, `getfattr -R`, `cp -r`,
/// `tar`) and lists what they are about to open with flat list calls, one
/// subtree per call, instead of one delimiter listing per directory.
///
/// - A walk is a *descent*: `opendir` of a directory whose parent's handle
///   is open, or was read or descended from within ``window`` seconds. `ls` of one directory,
///   `ls -l`, `ls -f | head` open no child and never start one.
/// - A descent asks for the flat listing of the directory's subtree:
///   ``TreeListing`` turns its pages into the complete listings of the
///   directory and of every directory under it, kept for the walk's next
///   `opendir`s. The first descent under a parent fetches one page (a lone
///   `ls dir` after `ls` pays at most that one call more, when the subtree
///   is over a page); a second descent, or one from a directory that was
///   itself a descent, up to ``maxPages``. A subtree that does not end
///   within them is listed by ``DirectoryStream`` as before, and what its
///   pages completed below it is kept.
/// - Look-ahead: a descent past the first also fetches one page of the
///   subtrees of the next ``ahead`` sibling directories (the parent's
///   readdir named them), while fewer than half of ``capacity`` entries are
///   held.
/// - Small trees: the lookup of a directory asks for its subtree flat, one
///   page (``probe(_:)``; `Lookups` lists it from the name itself). A
///   subtree that ends within it is listed whole: the walk's descents into
///   it and lookups of names in it (``known(_:in:)``, "absent" too) need no
///   request. The directory's own `opendir` (no descent) uses it only within
///   ``followWindow`` seconds of its answer (`find DIR`, `ls DIR` right after
///   the lookup); later it lists as any does, so a lone `ls` shows another
///   client's change at once.
///   A subtree found over a page keeps the listings of the directories the
///   page ended, and is looked up by delimiter for ``largeMemory`` seconds.
/// - Memory: kept listings are bounded by ``capacity`` entries (oldest
///   dropped first), fetches under way by their pages; a listing is given to
///   one `opendir` and dropped, and is not used once older than
///   ``freshness`` seconds.
final class SubtreeWalks: Sendable {
  let window: Double = 5
  /// How soon after a lookup's answer the directory's own `opendir` takes
  /// the listing it gave: the moment between a walk's lookup and its opendir.
  let followWindow: Double = 1
  let maxPages = 4
  let ahead = 2
  let largeMemory: Double = 60
  let capacity: Int
  let freshness: Double
  let pageSize: Int
  private let store: any ObjectStore
  private let clock: @Sendable () -> Double
  /// Owns the tasks this starts (BackgroundTasks.swift).
  let tasks: BackgroundTasks
  private let onConflict: @Sendable (String) -> Void
  private let logger: Logger

  struct Activity {
    var lastRead: Double
    var handles = 0
    var descents = 0
    var isDescent = false
    /// Subdirectories the directory's readdir gave, in order (the latest ones),
    /// and those a walk already opened (a walk in another order, `cp` by
    /// inode number, must not have them fetched again).
    var subdirectories: [String] = []
    var visited: Set<ObjectKey> = []
  }
  struct Listing {
    let entries: [ListedEntry]
    let at: Double
  }
  struct Fetch {
    let id: Int
    let task: Task<Void, Never>
  }
  struct State {
    var activity: [ObjectKey: Activity] = [:]
    var listings: [ObjectKey: Listing] = [:]
    /// Keys in `listings` in the order they came, for dropping the oldest.
    var order: [ObjectKey] = []
    var held = 0
    var fetches: [ObjectKey: Fetch] = [:]
    var nextFetch = 0
    /// Subtrees whose fetch ended before their end: listed by delimiter.
    var unfinished: Set<ObjectKey> = []
    /// Bumped by every invalidation: a fetch started before keeps nothing.
    var epoch = 0
    /// Directories holding subdirectory lists, least recently used first, and
    /// the keys in those lists: look-ahead needs only the few a walk is in.
    var siblingLists: [ObjectKey] = []
    var siblingKeys = 0
    /// Directories a lookup's probe found over a page, and when.
    var large: [ObjectKey: Double] = [:]
    /// Directories whose listing a lookup's probe kept, and when it was
    /// answered: their own `opendir` takes it within ``followWindow``.
    var lookedUp: [ObjectKey: Double] = [:]
  }
  /// Not private: the tests of the bounds read it.
  let state = Mutex(State())

  init(
    store: any ObjectStore, pageSize: Int, freshness: Double, logger: Logger,
    clock: @escaping @Sendable () -> Double, tasks: BackgroundTasks,
    onConflict: @escaping @Sendable (String) -> Void
  ) {
    self.store = store
    self.tasks = tasks
    self.pageSize = pageSize
    self.capacity = 4 * pageSize
    self.freshness = min(freshness, 10)
    self.logger = logger
    self.clock = clock
    self.onConflict = onConflict
  }

  // MARK: - What the directory handles report

  /// `opendir` of `key`: its complete listing when a walk has it (fetched
  /// now if this open is a descent), else nil (list it by delimiter).
  func opened(_ key: String, parent: String?) async -> [ListedEntry]? {
    let now = clock()
    enum Plan {
      case none
      case ready([ListedEntry])
      case wait(Task<Void, Never>)
    }
    var strong = false
    let (plan, siblings): (Plan, [String]) = state.withLock { state in
      state.activity[ObjectKey(key), default: Activity(lastRead: now)].handles += 1
      guard let parent, var activity = state.activity[ObjectKey(parent)],
        activity.handles > 0 || now - activity.lastRead < window
      else {
        // No descent: the listing its lookup just fetched, or its own.
        guard let at = state.lookedUp.removeValue(forKey: ObjectKey(key)), now - at < followWindow,
          let listing = take(key, now: now, &state)
        else { return (.none, []) }
        return (.ready(listing), [])
      }
      state.lookedUp[ObjectKey(key)] = nil
      strong = activity.isDescent || activity.descents > 0
      activity.descents += 1
      activity.visited.insert(ObjectKey(key))
      // A walk that spends long in each child (`cp -r`) is still under way.
      activity.lastRead = now
      state.activity[ObjectKey(parent)] = activity
      state.activity[ObjectKey(key)]?.isDescent = true
      touchSiblings(parent, &state)
      let siblings = Self.following(key, in: activity.subdirectories, count: ahead, except: activity.visited)
      if let listing = take(key, now: now, &state) { return (.ready(listing), siblings) }
      if let fetch = state.fetches.first(where: { key.utf8.starts(with: $0.key.name.utf8) })?.value {
        return (.wait(fetch.task), siblings)
      }
      if state.unfinished.contains(ObjectKey(key)) { return (.none, siblings) }
      return (.wait(start(key, pages: strong ? maxPages : 1, &state)), siblings)
    }
    if strong { lookAhead(siblings) }
    switch plan {
    case .none: return nil
    case .ready(let entries): return entries
    case .wait(let task):
      // A cancelled opendir stops waiting; the fetch goes on for the others.
      guard await task.valueUnlessCancelled() != nil else { return nil }
      return state.withLock { take(key, now: clock(), &$0) }
    }
  }

  /// A readdir of `key` gave these subdirectories.
  func read(_ key: String, subdirectories: [String]) {
    let now = clock()
    state.withLock { state in
      var activity = state.activity[ObjectKey(key), default: Activity(lastRead: now)]
      activity.lastRead = now
      let before = activity.subdirectories.count
      activity.subdirectories += subdirectories
      if activity.subdirectories.count > 2 * pageSize {
        activity.subdirectories.removeFirst(activity.subdirectories.count - pageSize)
      }
      state.siblingKeys += activity.subdirectories.count - before
      state.activity[ObjectKey(key)] = activity
      if !subdirectories.isEmpty { touchSiblings(key, &state) }
      if state.activity.count > 512 { prune(now: now, &state) }
    }
  }

  func released(_ key: String) {
    state.withLock { state in
      guard var activity = state.activity[ObjectKey(key)] else { return }
      activity.handles = max(activity.handles - 1, 0)
      state.activity[ObjectKey(key)] = activity
    }
  }

  /// Forgets every kept listing that a change of `key` (an object name or a
  /// directory prefix) could make wrong: those of its ancestors and of
  /// everything under it; fetches under way keep nothing. The namespace and
  /// write operations call it before they reply.
  func invalidateListings(under key: String) {
    state.withLock { state in
      state.epoch += 1
      state.fetches.removeAll()
      state.unfinished.removeAll()
      for listed in state.listings.keys
      where key.utf8.starts(with: listed.name.utf8) || listed.name.utf8.starts(with: key.utf8) {
        drop(listed, &state)
      }
    }
  }

  // MARK: - What lookups ask

  /// How a lookup of directory `key` lists: a flat page of `size` entries,
  /// unless the subtree was found over a page lately (nil: by delimiter).
  /// `epoch` is handed back to ``probed``.
  func probe(_ key: String) -> (size: Int, epoch: Int)? {
    let now = clock()
    return state.withLock { state in
      if let at = state.large[ObjectKey(key)], now - at < largeMemory { return nil }
      return (pageSize, state.epoch)
    }
  }

  /// The answer to ``probe(_:)``: a subtree that ends within the page gives
  /// the complete listings of `key` and of every directory under it; one
  /// that does not, those of the directories the page ended (a walk's
  /// descents into them need no request), and `key` is found large.
  func probed(_ key: String, page: ListPage, answeredAt: Double, epoch: Int) {
    var tree = TreeListing(root: key, onConflict: onConflict)
    var done: [TreeListing.Listing] = []
    for item in page.items { done += tree.add(item, answeredAt: answeredAt) }
    guard page.nextPageToken == nil else {
      keep(done, epoch: epoch)
      state.withLock { state in
        if state.large.count >= 1024 { state.large.removeAll() }
        state.large[ObjectKey(key)] = answeredAt
      }
      return
    }
    keep(done + tree.finish(), epoch: epoch)
    state.withLock { state in
      guard state.epoch == epoch, state.listings[ObjectKey(key)] != nil else { return }
      if state.lookedUp.count >= 1024 { state.lookedUp.removeAll() }
      state.lookedUp[ObjectKey(key)] = answeredAt
    }
  }

  enum Known {
    case listed(ListedEntry)
    /// Not in the complete listing of its directory, answered at this time.
    case absent(since: Double)
  }

  /// What a kept listing of `directory` says of `name`, if one is held and
  /// fresh; the listing stays for its `opendir`.
  func known(_ name: String, in directory: String) -> Known? {
    let now = clock()
    return state.withLock { state in
      guard let listing = state.listings[ObjectKey(directory)], now - listing.at < freshness else {
        return nil
      }
      if let entry = listing.entries.first(where: { Names.same($0.name, name) }) { return .listed(entry) }
      return .absent(since: listing.at)
    }
  }

  // MARK: - Fetching

  private func lookAhead(_ keys: [String]) {
    state.withLock { state in
      for key in keys where state.held < capacity / 2 {
        guard state.listings[ObjectKey(key)] == nil, !state.unfinished.contains(ObjectKey(key)),
          !state.fetches.keys.contains(where: { key.utf8.starts(with: $0.name.utf8) })
        else { continue }
        _ = start(key, pages: 1, &state)
      }
    }
  }

  private func start(_ key: String, pages: Int, _ state: inout State) -> Task<Void, Never> {
    let id = state.nextFetch
    state.nextFetch += 1
    let epoch = state.epoch
    let task = tasks.start(.cancel) { [weak self] () -> Void in
      await self?.fetch(key, pages: pages, id: id, epoch: epoch)
    }
    state.fetches[ObjectKey(key)] = Fetch(id: id, task: task)
    return task
  }

  private func fetch(_ root: String, pages: Int, id: Int, epoch: Int) async {
    var tree = TreeListing(root: root, onConflict: onConflict)
    var token: String?
    var complete = false
    for _ in 0..<pages {
      let page: ListPage
      do {
        page = try await store.list(prefix: root, delimiter: nil, pageSize: pageSize, pageToken: token)
      } catch {
        logger.debug("flat listing of \(root) failed (\(error)); its directories list themselves")
        break
      }
      let answeredAt = clock()
      var done: [TreeListing.Listing] = []
      for item in page.items { done += tree.add(item, answeredAt: answeredAt) }
      token = page.nextPageToken
      if token == nil { done += tree.finish() }
      keep(done, epoch: epoch)
      if token == nil {
        complete = true
        break
      }
    }
    state.withLock { state in
      guard state.epoch == epoch else { return }
      if state.fetches[ObjectKey(root)]?.id == id { state.fetches[ObjectKey(root)] = nil }
      if !complete {
        if state.unfinished.count > 1024 { state.unfinished.removeAll() }
        state.unfinished.insert(ObjectKey(root))
      }
    }
  }

  /// Keeps completed listings while they fit; the walk takes them in the
  /// order they came, so the newest are the ones left to list themselves.
  private func keep(_ listings: [TreeListing.Listing], epoch: Int) {
    guard !listings.isEmpty else { return }
    let now = clock()
    state.withLock { state in
      guard state.epoch == epoch else { return }
      // Listings a walk passed by (find -prune, a walk that stopped) expire.
      var current: [ObjectKey] = []
      for key in state.order {
        guard let listing = state.listings[key] else { continue }
        if now - listing.at < freshness { current.append(key) } else { drop(key, &state) }
      }
      state.order = current
      for (name, entries) in listings {
        let key = ObjectKey(name)
        drop(key, &state)
        guard state.held + entries.count <= capacity else { continue }
        state.listings[key] = Listing(entries: entries, at: now)
        state.order.append(key)
        state.held += entries.count
      }
    }
  }

  // MARK: - Helpers (under the lock)

  private func take(_ key: String, now: Double, _ state: inout State) -> [ListedEntry]? {
    let key = ObjectKey(key)
    guard let listing = state.listings[key] else { return nil }
    drop(key, &state)
    return now - listing.at < freshness ? listing.entries : nil
  }

  private func drop(_ key: ObjectKey, _ state: inout State) {
    guard let listing = state.listings.removeValue(forKey: key) else { return }
    state.held -= listing.entries.count
  }

  private func prune(now: Double, _ state: inout State) {
    state.activity = state.activity.filter { $0.value.handles > 0 || now - $0.value.lastRead < window }
    let activity = state.activity
    state.siblingLists.removeAll { activity[$0] == nil }
    state.siblingKeys = state.siblingLists.reduce(0) { $0 + (activity[$1]?.subdirectories.count ?? 0) }
  }

  /// Marks `key`'s subdirectory list used; drops the least recently used
  /// lists beyond 64 or beyond 8 pages of keys.
  private func touchSiblings(_ key: String, _ state: inout State) {
    let key = ObjectKey(key)
    if let index = state.siblingLists.lastIndex(of: key) { state.siblingLists.remove(at: index) }
    state.siblingLists.append(key)
    while state.siblingLists.count > 64 || state.siblingKeys > 8 * pageSize, state.siblingLists.count > 1 {
      let oldest = state.siblingLists.removeFirst()
      state.siblingKeys -= state.activity[oldest]?.subdirectories.count ?? 0
      state.activity[oldest]?.subdirectories = []
      state.activity[oldest]?.visited = []
    }
  }

  /// Up to `count` keys after `key` in `keys`, but those in `visited`.
  private static func following(_ key: String, in keys: [String], count: Int, except visited: Set<ObjectKey>)
    -> [String]
  {
    guard let index = keys.lastIndex(where: { Names.same($0, key) }) else { return [] }
    return Array(keys[(index + 1)...].lazy.filter { !visited.contains(ObjectKey($0)) }.prefix(count))
  }

  /// The directory that lists `key` (a prefix ending in `/`), nil for the root.
  static func parent(of key: String, root: String) -> String? {
    guard !Names.same(key, root), key.utf8.count > root.utf8.count else { return nil }
    let inner = key.utf8.dropLast()
    guard let slash = inner.lastIndex(of: UInt8(ascii: "/")) else { return "" }
    return String(Substring(key.utf8[...slash]))
  }
}

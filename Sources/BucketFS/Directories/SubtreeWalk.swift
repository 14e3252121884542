import Logging
import ObjectStore
import Synchronization

/// Recognises tree walks (`find`, `du`, `ls -R`, `getfattr -R`, `cp -r`,
/// `tar`) and fills the ``DirectoryCache`` with what they are about to open,
/// by flat list calls, one subtree per call, instead of one delimiter
/// listing per directory.
///
/// - A walk is a *descent*: `opendir` of a directory whose parent's handle
///   is open, or was read or descended from within ``window`` seconds. `ls` of one directory,
///   `ls -l`, `ls -f | head` open no child and never start one.
/// - A descent asks for the flat listing of the directory's subtree:
///   ``TreeListing`` turns its pages into the complete listings of the
///   directory and of every directory under it, kept in the cache for the
///   walk's next `opendir`s. The first descent under a parent fetches one page (a lone
///   `ls dir` after `ls` pays at most that one call more, when the subtree
///   is over a page); a second descent, or one from a directory that was
///   itself a descent, up to ``maxPages``. A subtree that does not end
///   within them is listed by ``DirectoryStream`` as before, and what its
///   pages completed below it is kept.
/// - Look-ahead: a descent past the first also fetches one page of the
///   subtrees of the next ``ahead`` sibling directories (the parent's
///   readdir named them), while the cache has room (``DirectoryCache/wantsFill(of:)``).
/// - Small trees: the lookup of a directory lists its subtree flat, one
///   page (``DirectoryCache/flatLookup(of:)``, `Lookups` lists it from the
///   name itself). The directory's own `opendir` (no descent) takes that
///   listing only within the cache's `followWindow` of its answer (`find DIR`,
///   `ls DIR` right after the lookup); later it lists as any does, so a lone
///   `ls` shows another client's change at once.
/// - Memory: the cache bounds the kept listings; fetches under way are
///   bounded by their pages.
final class SubtreeWalks: MountComponent, Sendable {
  let window: Double = 5
  let maxPages = 4
  let ahead = 2
  /// Where the listings fetched go, and where `opendir` takes them from.
  let cache: DirectoryCache
  let context: MountContext
  var pageSize: Int { cache.pageSize }

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
  struct Fetch {
    let id: Int
    let task: Task<Void, Never>
  }
  /// How walks go: which directories are open and read, and the flat
  /// listings under way. What they fetched is in ``cache``.
  private struct State {
    var activity: [ObjectKey: Activity] = [:]
    var fetches: [ObjectKey: Fetch] = [:]
    var nextFetch = 0
    /// Subtrees whose fetch ended before their end: listed by delimiter.
    var unfinished: Set<ObjectKey> = []
    /// The cache's epoch `fetches` and `unfinished` belong to: a change
    /// since (the cache's epoch moved on) leaves them nothing to stand on.
    var epoch = 0
    /// Directories holding subdirectory lists, least recently used first, and
    /// the keys in those lists: look-ahead needs only the few a walk is in.
    var siblingLists: [ObjectKey] = []
    var siblingKeys = 0
  }
  private let state = Mutex(State())

  init(context: MountContext, cache: DirectoryCache) {
    self.context = context
    self.cache = cache
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
    // Lock order: this lock, then the cache's.
    let (plan, siblings): (Plan, [String]) = state.withLock { state in
      catchUp(&state)
      state.activity[ObjectKey(key), default: Activity(lastRead: now)].handles += 1
      guard let parent, var activity = state.activity[ObjectKey(parent)],
        activity.handles > 0 || now - activity.lastRead < window
      else {
        // No descent: the listing its lookup just fetched, or its own.
        guard let listing = cache.take(key, lookedUpOnly: true) else { return (.none, []) }
        return (.ready(listing), [])
      }
      strong = activity.isDescent || activity.descents > 0
      activity.descents += 1
      activity.visited.insert(ObjectKey(key))
      // A walk that spends long in each child (`cp -r`) is still under way.
      activity.lastRead = now
      state.activity[ObjectKey(parent)] = activity
      state.activity[ObjectKey(key)]?.isDescent = true
      touchSiblings(parent, &state)
      let siblings = Self.following(key, in: activity.subdirectories, count: ahead, except: activity.visited)
      if let listing = cache.take(key) { return (.ready(listing), siblings) }
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
      return cache.take(key)
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

  /// Flat listings under way (for the tests of the bounds).
  var fetchesUnderWay: Int { state.withLock { $0.fetches.count } }

  /// Subdirectory keys held for look-ahead (for the tests of the bounds).
  var siblingKeysHeld: Int {
    state.withLock { state in state.activity.values.reduce(0) { $0 + $1.subdirectories.count } }
  }

  // MARK: - Fetching

  private func lookAhead(_ keys: [String]) {
    state.withLock { state in
      catchUp(&state)
      for key in keys where cache.wantsFill(of: key) {
        guard !state.unfinished.contains(ObjectKey(key)),
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
    var tree = TreeListing(root: root, onConflict: { [diagnostics] in diagnostics.warnConflict($0) })
    var token: String?
    var complete = false
    for _ in 0..<pages {
      let page: ListPage
      do {
        page = try await store.list(ListRequest(prefix: root, pageSize: pageSize, pageToken: token))
      } catch {
        logger.debug("flat listing of \(root) failed (\(error)); its directories list themselves")
        break
      }
      let answeredAt = clock()
      var done: [TreeListing.Listing] = []
      for item in page.items { done += tree.add(item, answeredAt: answeredAt) }
      token = page.nextPageToken
      if token == nil { done += tree.finish() }
      cache.keep(done, epoch: epoch)
      if token == nil {
        complete = true
        break
      }
    }
    state.withLock { state in
      catchUp(&state)
      guard state.epoch == epoch else { return }
      if state.fetches[ObjectKey(root)]?.id == id { state.fetches[ObjectKey(root)] = nil }
      if !complete {
        if state.unfinished.count > 1024 { state.unfinished.removeAll() }
        state.unfinished.insert(ObjectKey(root))
      }
    }
  }

  // MARK: - Helpers (under the lock)

  /// A change reached the cache since the fetches under way started: they
  /// keep nothing, and subtrees found unfinished may have changed.
  private func catchUp(_ state: inout State) {
    let current = cache.epoch
    guard current != state.epoch else { return }
    state.epoch = current
    state.fetches.removeAll()
    state.unfinished.removeAll()
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

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
///   page (``DirectoryCache/flatLookup(of:)``, ``NameLookup`` lists it from the
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
  let directoryCache: DirectoryCache
  let context: MountContext
  var pageSize: Int { directoryCache.pageSize }

  struct Activity {
    var lastRead: Double
    var handles = 0
    var descents = 0
    var isDescent = false
    /// The subdirectories a walk already opened (a walk in another order,
    /// `cp` by inode number, must not have them fetched again); those
    /// readdir gave are the directory's (``DirectoryCache``).
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
  }
  private let state = Mutex(State())

  init(context: MountContext, directoryCache: DirectoryCache) {
    self.context = context
    self.directoryCache = directoryCache
  }

  // MARK: - What the directory handles report

  /// `opendir` of `key`: its complete listing when a walk has it (fetched
  /// now if this open is a descent), else nil (list it by delimiter).
  func opened(_ key: String, parent: String?) async -> [ListedEntry]? {
    let now = clock()
    var strong = false
    // Lock order: this lock, then the cache's.
    let (plan, siblings): (Plan, [String]) = state.withLock { state in
      catchUp(&state)
      state.activity[ObjectKey(key), default: Activity(lastRead: now)].handles += 1
      guard let parent, var activity = state.activity[ObjectKey(parent)],
        activity.handles > 0 || now - activity.lastRead < window
      else {
        // No descent: the listing its lookup just fetched, or its own.
        guard let listing = directoryCache.take(key, lookedUpOnly: true) else { return (.none, []) }
        return (.ready(listing), [])
      }
      strong = activity.isDescent || activity.descents > 0
      activity.descents += 1
      activity.visited.insert(ObjectKey(key))
      // A walk that spends long in each child (`cp -r`) is still under way.
      activity.lastRead = now
      state.activity[ObjectKey(parent)] = activity
      state.activity[ObjectKey(key)]?.isDescent = true
      // A list the cache let go takes what the walk visited with it.
      guard let subdirectories = directoryCache.subdirectories(of: parent) else {
        state.activity[ObjectKey(parent)]?.visited = [ObjectKey(key)]
        return (listingPlan(key, strong: strong, &state), [])
      }
      let siblings = Self.following(key, in: subdirectories, count: ahead, except: activity.visited)
      return (listingPlan(key, strong: strong, &state), siblings)
    }
    if strong { lookAhead(siblings) }
    switch plan {
    case .none: return nil
    case .ready(let entries): return entries
    case .wait(let task):
      // A cancelled opendir stops waiting; the fetch goes on for the others.
      guard await task.valueUnlessCancelled() != nil else { return nil }
      return directoryCache.take(key)
    }
  }

  private enum Plan {
    case none
    case ready([ListedEntry])
    case wait(Task<Void, Never>)
  }

  /// How a descent's `opendir` of `key` gets its listing: kept, fetched
  /// under way, fetched now, or (a subtree found unfinished) its own.
  private func listingPlan(_ key: String, strong: Bool, _ state: inout State) -> Plan {
    if let listing = directoryCache.take(key) { return .ready(listing) }
    if let fetch = state.fetches.first(where: { key.utf8.starts(with: $0.key.name.utf8) })?.value {
      return .wait(fetch.task)
    }
    if state.unfinished.contains(ObjectKey(key)) { return .none }
    return .wait(start(key, pages: strong ? maxPages : 1, &state))
  }

  /// A readdir of `key` ran (what it gave is the directory's: ``DirectoryCache``).
  func read(_ key: String) {
    let now = clock()
    state.withLock { state in
      state.activity[ObjectKey(key), default: Activity(lastRead: now)].lastRead = now
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

  // MARK: - Fetching

  private func lookAhead(_ keys: [String]) {
    state.withLock { state in
      catchUp(&state)
      for key in keys where directoryCache.wantsFill(of: key) {
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
      directoryCache.keep(done, epoch: epoch)
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
    let current = directoryCache.epoch
    guard current != state.epoch else { return }
    state.epoch = current
    state.fetches.removeAll()
    state.unfinished.removeAll()
  }

  private func prune(now: Double, _ state: inout State) {
    state.activity = state.activity.filter { $0.value.handles > 0 || now - $0.value.lastRead < window }
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

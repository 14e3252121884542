import ObjectStore
import Synchronization

/// What this mount knows of each directory's contents: one
/// ``DirectoryRecord`` per directory, under one private lock.
///
/// - **Complete name sets**: a directory seen listed fresh and complete (a
///   readdir pass from the first entry to the last, or a directory this
///   mount just created). A name not in one is known absent without a lookup
///   request while the set is younger than the negative TTL. Names this
///   mount stores join it and names it deletes leave it, so only another
///   client's new objects can be missed, for as long as the kernel's own
///   negative entries would miss them. Bounded by ``completeCapacity``
///   directories of at most ``maxNames`` names, ``maxCompleteNames`` in all.
/// - **Kept listings**: children with their facts, from flat listings of a
///   subtree (a walk's descent or a lookup's subtree page, ``TreeListing``),
///   kept for the directory's next `opendir`, which takes them (they are
///   given once), and for lookups of names in them, while younger than
///   ``freshness``. Bounded by ``capacity`` entries, oldest dropped first.
/// - **What readdir gave**: the files of the few directories read last,
///   with their inode, size and generation, for ``SiblingPrefetch``; and
///   the subdirectories of the directories read last, for a walk's
///   look-ahead (``SubtreeWalks``), at most ``subdirectoryLists`` lists and
///   8 pages of names.
/// - **Given without nodes**: files the first readdirplus call of a pass
///   gave without a node (``Directories``), for the lookup a `stat` of each
///   then makes (`ls -l`, `du`): taken by it, dropped by any change of the
///   name. At most ``unheldCapacity``, the oldest dropped first.
/// - **Sizes**: subtrees a lookup found over a page (looked up by
///   delimiter) and names whose list call other names filled (asked apart),
///   both for ``largeMemory`` seconds; the directories whose listing a
///   lookup just kept (their own `opendir` takes it within ``followWindow``).
/// - **Lookup bursts**: lookups under way in a directory, and the one list
///   call a burst of them shares (``NameLookup``).
/// - **Files in flight**: files created through the mount and not stored
///   yet, which are in their directory (listed after the stored entries)
///   and keep every directory above them non-empty. A record holding one
///   is never dropped.
///
/// Walks, lookups and readdir passes *fill* it; ``invalidate(_:)`` is the
/// one way a change reaches it: ``ListingAwareStore`` reports every write
/// (whatever its outcome), the write layer a file created and not stored
/// yet and its end, and the namespace what it found asking the bucket about
/// a name. Each change also ends the kernel's cached listings it could make
/// wrong (``KernelListings``), outside the lock.
final class DirectoryCache: Sendable {
  static let completeCapacity = 256
  /// Larger directories get no complete set (their names would cost memory).
  static let maxNames = 10_000
  /// Names in all complete sets together, at most (a walk of a tree of
  /// thousands of directories of thousands of names would hold them all):
  /// about 30 bytes each, 2 MiB in all.
  static let maxCompleteNames = 65_536
  static let readOrderCapacity = 8
  static let readOrderFiles = 4096
  static let subdirectoryLists = 64
  /// Files given without a node held for their lookups: a few first
  /// readdirplus replies (about 200 entries fit in one).
  static let unheldCapacity = 1024
  /// Directories marked large (or crowded, or looked up) at most, each kind.
  static let markCapacity = 1024
  /// How soon after a lookup's answer the directory's own `opendir` takes
  /// the listing it gave: the moment between a walk's lookup and its opendir.
  let followWindow: Double = 1
  /// How long a subtree found over a page (or a crowded name) is listed
  /// by delimiter (asked apart).
  let largeMemory: Double = 60
  /// Entries held in kept listings, at most.
  let capacity: Int
  /// How long a kept listing stands for its directory.
  let freshness: Double
  let pageSize: Int
  private let clock: @Sendable () -> Double
  private let onConflict: @Sendable (String) -> Void
  private let kernelListings: KernelListings

  private let state: Mutex<DirectoryRecords>

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
    self.state = Mutex(DirectoryRecords(pageSize: pageSize))
  }

  // MARK: - The one way in for changes

  func invalidate(_ change: Change) {
    switch change {
    case .stored(let key):
      state.withLock { state in
        state.dropKept(around: key)
        state.add(key: key)
        // A `dir/` placeholder is no file: a file of that name stays in flight.
        if !key.hasSuffix("/") { state.endInFlight(key, inode: nil) }
      }
      kernelListings.changed(key)
    case .createdDirectory(let key, let since):
      state.withLock { state in
        state.dropKept(around: key)
        state.add(key: key)
        state.record(directory: key, names: [], at: since)
      }
      kernelListings.changed(key)
    case .removed(let key):
      state.withLock { state in
        state.dropKept(around: key)
        state.remove(key: key)
      }
      kernelListings.changed(key)
    case .touched(let key):
      // Nothing changed here: the kernel's listings stand.
      state.withLock { $0.dropKept(around: key) }
    case .createdInFlight(let key, let inode):
      state.withLock { state in
        state.add(key: key)
        state.beginInFlight(key, inode: inode)
      }
    case .endedInFlight(let key, let inode):
      state.withLock { $0.endInFlight(key, inode: inode) }
    }
  }

  // MARK: - What lookups ask

  /// Whether `name` is absent from a complete set of `directory` younger than `ttl`.
  func knownAbsent(directory: String, name: String, now: Double, ttl: Double) -> Bool {
    state.withLock { $0.records[ObjectKey(directory)]?.lacks(name, now: now, ttl: ttl) ?? false }
  }

  /// The entry a readdirplus gave `key` without a node, if any, taken: the
  /// lookup that asks makes the node.
  func takeUnheld(_ key: String) -> ListedEntry? {
    state.withLock { $0.unheld.remove(ObjectKey(key)) }
  }

  /// What a kept listing of `directory` says of `name`, if one is held and
  /// fresh; the listing stays for its `opendir`.
  func known(_ name: String, in directory: String) -> Known? {
    let now = clock()
    return state.withLock { state in
      guard let kept = state.records[ObjectKey(directory)]?.kept, now - kept.at < freshness else {
        return nil
      }
      if let entry = kept.entries.first(where: { Names.same($0.name, name) }) { return .listed(entry) }
      return .absent(since: kept.at)
    }
  }

  /// How a lookup of directory `key` lists: a flat page, unless the subtree
  /// was found over a page lately (nil: by delimiter).
  func flatLookup(of key: String) -> FlatLookup? {
    let now = clock()
    return state.withLock { state in
      if let at = state.records[ObjectKey(key)]?.foundLargeAt, now - at < largeMemory { return nil }
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
      state.withLock { $0.mark(.foundLarge, of: ObjectKey(key), at: answeredAt) }
      return
    }
    keep(done + tree.finish(), epoch: flat.epoch)
    state.withLock { state in
      guard state.epoch == flat.epoch, state.records[ObjectKey(key)]?.kept != nil else { return }
      state.mark(.lookedUp, of: ObjectKey(key), at: answeredAt)
    }
  }

  /// The list call of file `fileKey`'s name was filled by other names
  /// before it showed whether `directoryKey` exists: asked apart from now on.
  func noteCrowded(_ directoryKey: String, at time: Double) {
    state.withLock { $0.mark(.crowded, of: ObjectKey(directoryKey), at: time) }
  }

  /// Whether a lookup of the name of `directoryKey` asks for the object and
  /// the subtree apart (``noteCrowded(_:at:)`` lately).
  func isCrowded(_ directoryKey: String, now: Double) -> Bool {
    state.withLock { state in
      guard let at = state.records[ObjectKey(directoryKey)]?.crowdedAt else { return false }
      return now - at < largeMemory
    }
  }

  /// A lookup in `directory` joins its burst: the shared page, once
  /// `size` lookups are under way (`start` asks for it; a page older than
  /// `maxAge` is asked again). ``leaveBurst(_:)`` ends it.
  func joinBurst(
    _ directory: String, now: Double, maxAge: Double, size: Int, start: () -> Task<DatedPage, any Error>
  ) -> Task<DatedPage, any Error>? {
    state.withLock { state in
      state.records[ObjectKey(directory), default: DirectoryRecord()].joinBurst(
        now: now, maxAge: maxAge, size: size, start: start)
    }
  }

  func leaveBurst(_ directory: String) {
    state.withLock { state in state.change(ObjectKey(directory)) { $0.leaveBurst() } }
  }

  // MARK: - What walks fill and take

  /// Bumped by every change: a fill started at one epoch keeps nothing after another.
  var epoch: Int { state.withLock { $0.epoch } }

  /// Entries held in kept listings.
  var heldEntries: Int { state.withLock { $0.held } }

  /// Directories with a record.
  var records: Int { state.withLock { $0.records.count } }

  /// Whether a fill of `key` would find room and nothing kept already.
  func wantsFill(of key: String) -> Bool {
    state.withLock { $0.records[ObjectKey(key)]?.kept == nil && $0.held < capacity / 2 }
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
        guard let kept = state.records[key]?.kept else { continue }
        if now - kept.at < freshness { current.append(key) } else { state.drop(key) }
      }
      state.keptOrder = current
      for (name, entries) in listings {
        let key = ObjectKey(name)
        state.drop(key)
        guard state.held + entries.count <= capacity else { continue }
        state.records[key, default: DirectoryRecord()].kept = DirectoryRecord.Kept(entries: entries, at: now)
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
    let key = ObjectKey(key)
    return state.withLock { state in
      let lookedUp = state.records[key]?.lookedUpAt
      if lookedUp != nil {
        state.marks[.lookedUp, default: 1] -= 1
        state.change(key) { $0.lookedUpAt = nil }
      }
      if lookedUpOnly {
        guard let at = lookedUp, now - at < followWindow else { return nil }
      }
      guard let kept = state.records[key]?.kept else { return nil }
      state.drop(key)
      return now - kept.at < freshness ? kept.entries : nil
    }
  }

  // MARK: - What readdir passes fill

  /// A readdir pass listed `directory` from its first entry to its last,
  /// as fresh as `at` (its oldest page): these are its names.
  func listedWhole(_ directory: String, names: Set<ObjectKey>, at time: Double) {
    state.withLock { $0.record(directory: directory, names: names, at: time) }
  }

  /// A readdir of `directory` gave these files and subdirectories (in
  /// listing order), and `unheld` without nodes.
  func readdirGave(
    _ directory: String, files: [ListedFile], subdirectories: [String], unheld: [ListedEntry] = []
  ) {
    let directory = ObjectKey(directory)
    if !unheld.isEmpty {
      state.withLock { state in
        for entry in unheld { state.unheld.insert(entry, for: ObjectKey(entry.key)) }
      }
    }
    if !subdirectories.isEmpty {
      state.withLock { state in
        var list = state.records[directory]?.subdirectories ?? []
        let before = list.count
        list += subdirectories
        if list.count > 2 * pageSize { list.removeFirst(list.count - pageSize) }
        state.subdirectoryKeys += list.count - before
        state.records[directory, default: DirectoryRecord()].subdirectories = list
        state.touchSubdirectories(of: directory)
      }
    }
    guard !files.isEmpty else { return }
    state.withLock { state in
      if state.records[directory]?.filesRead == nil {
        state.readRecent.append(directory)
        if state.readRecent.count > Self.readOrderCapacity {
          let oldest = state.readRecent.removeFirst()
          state.change(oldest) { $0.filesRead = nil }
        }
      }
      state.records[directory, default: DirectoryRecord()].noteRead(files, limit: Self.readOrderFiles)
    }
  }

  /// The subdirectories readdir gave of `directory` (nil: none held), now
  /// the list used last.
  func subdirectories(of directory: String) -> [String]? {
    let directory = ObjectKey(directory)
    return state.withLock { state in
      guard let list = state.records[directory]?.subdirectories else { return nil }
      state.touchSubdirectories(of: directory)
      return list
    }
  }

  /// Subdirectory names held for look-ahead (for the tests of the bounds).
  var subdirectoryKeysHeld: Int { state.withLock { $0.subdirectoryKeys } }

  /// The files readdir gave of `directory`, in listing order, if it was read lately.
  func filesRead(in directory: String) -> [ListedFile]? {
    state.withLock { $0.records[ObjectKey(directory)]?.filesRead }
  }

  // MARK: - Files in flight

  /// The files in flight directly in `directory`, in the order the service lists names.
  func filesInFlight(in directory: String) -> [FileInFlight] {
    state.withLock { $0.records[ObjectKey(directory)]?.filesInFlight ?? [] }
  }

  /// Whether file `inode` is still in flight at `key` (any inode: nil).
  func isInFlight(_ key: String, inode: UInt64? = nil) -> Bool {
    let (directory, name) = DirectoryRecords.split(key)
    return state.withLock { state in
      guard let found = state.records[ObjectKey(directory)]?.writing[ObjectKey(name)] else { return false }
      return inode.map { $0 == found } ?? true
    }
  }

  /// Whether a file in flight is anywhere under `directory`.
  func holdsInFlight(under directory: String) -> Bool {
    state.withLock { ($0.records[ObjectKey(directory)]?.writingBelow ?? 0) > 0 }
  }
}

import ObjectStore

/// The records of every directory ``DirectoryCache`` knows, with the orders
/// and counts that bound them; changed only under the cache's lock, through
/// these methods.
struct DirectoryRecords {
  /// A subdirectory list is cut to one page of names past two.
  let pageSize: Int

  var records: [ObjectKey: DirectoryRecord] = [:]
  /// Records with a complete set, oldest first, and the names in them all.
  var completeOrder: [ObjectKey] = []
  var completeNames = 0
  /// Records with a kept listing, in the order they came, for dropping the oldest.
  var keptOrder: [ObjectKey] = []
  var held = 0
  /// Bumped by every change: a fill started before keeps nothing.
  var epoch = 0
  /// Records with files read, the latest last.
  var readRecent: [ObjectKey] = []
  /// Records with subdirectories read, least recently used first, and the names in them.
  var subdirectoryOrder: [ObjectKey] = []
  var subdirectoryKeys = 0
  /// How many records carry each kind of mark.
  var marks: [Mark: Int] = [:]
  /// Files a pass's first readdirplus gave without a node, for the lookups
  /// that follow, oldest dropped first.
  var unheld = BoundedMap<ObjectKey, ListedEntry>(capacity: DirectoryCache.unheldCapacity)

  /// The time marks a record carries, each bounded by ``markCapacity``.
  enum Mark {
    case foundLarge, crowded, lookedUp

    var field: WritableKeyPath<DirectoryRecord, Double?> {
      switch self {
      case .foundLarge: \.foundLargeAt
      case .crowded: \.crowdedAt
      case .lookedUp: \.lookedUpAt
      }
    }
  }

  /// The directory (up to its last `/`) and the name of `key`; a `dir/`
  /// placeholder's name keeps no slash.
  static func split(_ key: String) -> (directory: Substring, name: Substring) {
    var rest = Substring(key)
    if rest.hasSuffix("/") { rest = rest.dropLast() }
    let cut = rest.lastIndex(of: "/").map { rest.index(after: $0) } ?? rest.startIndex
    return (rest[..<cut], rest[cut...])
  }

  /// Marks `directory`'s subdirectory list used; drops the least recently
  /// used lists beyond ``subdirectoryLists`` or beyond 8 pages of names.
  mutating func touchSubdirectories(of directory: ObjectKey) {
    if let index = subdirectoryOrder.lastIndex(of: directory) {
      subdirectoryOrder.remove(at: index)
    }
    subdirectoryOrder.append(directory)
    while subdirectoryOrder.count > DirectoryCache.subdirectoryLists || subdirectoryKeys > 8 * pageSize,
      subdirectoryOrder.count > 1
    {
      let oldest = subdirectoryOrder.removeFirst()
      subdirectoryKeys -= records[oldest]?.subdirectories?.count ?? 0
      change(oldest) { $0.subdirectories = nil }
    }
  }

  /// Applies `body` to the record of `key` (made if absent), then drops it if it holds nothing.
  mutating func change(_ key: ObjectKey, _ body: (inout DirectoryRecord) -> Void) {
    var record = records[key] ?? DirectoryRecord()
    body(&record)
    records[key] = record.isEmpty ? nil : record
  }

  /// Sets a time mark on `key`'s record; past ``markCapacity`` marks of that
  /// kind, every one of them is forgotten first.
  mutating func mark(_ mark: Mark, of key: ObjectKey, at time: Double) {
    let field = mark.field
    if marks[mark, default: 0] >= DirectoryCache.markCapacity {
      for marked in records.keys where records[marked]?[keyPath: field] != nil {
        change(marked) { $0[keyPath: field] = nil }
      }
      marks[mark] = 0
    }
    if records[key]?[keyPath: field] == nil { marks[mark, default: 0] += 1 }
    records[key, default: DirectoryRecord()][keyPath: field] = time
  }

  mutating func record(directory: String, names: Set<ObjectKey>, at time: Double) {
    guard names.count <= DirectoryCache.maxNames else { return }
    let key = ObjectKey(directory)
    if let previous = records[key]?.complete {
      completeNames -= previous.names.count
    } else {
      completeOrder.append(key)
    }
    records[key, default: DirectoryRecord()].complete = DirectoryRecord.NameSet(names: names, at: time)
    completeNames += names.count
    while completeOrder.count > DirectoryCache.completeCapacity
      || (completeNames > DirectoryCache.maxCompleteNames && completeOrder.count > 1)
    {
      let oldest = completeOrder.removeFirst()
      completeNames -= records[oldest]?.complete?.names.count ?? 0
      change(oldest) { $0.complete = nil }
    }
  }

  /// `key`'s name joins its directory's complete set, and each directory on
  /// its path joins its parent's (a directory renamed here has no placeholder).
  mutating func add(key: String) {
    guard !completeOrder.isEmpty else { return }
    var rest = Substring(key)
    if rest.hasSuffix("/") { rest = rest.dropLast() }
    while !rest.isEmpty {
      let cut = rest.lastIndex(of: "/").map { rest.index(after: $0) } ?? rest.startIndex
      if records[ObjectKey(rest[..<cut])]?.complete?.names.insert(ObjectKey(rest[cut...])).inserted == true {
        completeNames += 1
      }
      rest = cut == rest.startIndex ? "" : rest[..<rest.index(before: cut)]
    }
  }

  /// The callers made sure no directory of that name exists (unlink and
  /// rename answer EISDIR first); a name kept by mistake only costs a lookup its request.
  mutating func remove(key: String) {
    guard !completeOrder.isEmpty, !key.hasSuffix("/") else { return }
    let (directory, name) = Self.split(key)
    if records[ObjectKey(directory)]?.complete?.names.remove(ObjectKey(name)) != nil { completeNames -= 1 }
  }

  /// File `inode` is in flight at `key`: in its directory, and under every
  /// directory above it.
  mutating func beginInFlight(_ key: String, inode: UInt64) {
    let (directory, name) = Self.split(key)
    let previous = records[ObjectKey(directory), default: DirectoryRecord()].writing.updateValue(
      inode, forKey: ObjectKey(name))
    if previous == nil { countInFlight(under: directory, by: 1) }
  }

  /// The file in flight at `key` (if `inode`, only that one) is in flight no more.
  mutating func endInFlight(_ key: String, inode: UInt64?) {
    let (directory, name) = Self.split(key)
    guard let found = records[ObjectKey(directory)]?.writing[ObjectKey(name)],
      inode.map({ $0 == found }) ?? true
    else { return }
    records[ObjectKey(directory)]?.writing[ObjectKey(name)] = nil
    countInFlight(under: directory, by: -1)
  }

  /// Counts a file in flight in `directory` and each directory above it, up to the root.
  mutating func countInFlight(under directory: Substring, by delta: Int) {
    var rest = directory
    while true {
      change(ObjectKey(rest)) { $0.writingBelow += delta }
      guard !rest.isEmpty else { return }
      let inner = rest.dropLast()
      rest = inner.lastIndex(of: "/").map { inner[...$0] } ?? ""
    }
  }

  /// Drops every kept listing a change of `key` (an object name or a
  /// directory prefix) could make wrong: those of its ancestors and of
  /// everything under it; fills under way keep nothing.
  mutating func dropKept(around key: String) {
    epoch += 1
    dropUnheld(around: key)
    for listed in keptOrder
    where key.utf8.starts(with: listed.name.utf8) || listed.name.utf8.starts(with: key.utf8) {
      drop(listed)
    }
  }

  /// Drops what a readdirplus gave without a node that a change of `key`
  /// could make wrong: its own entry, the file of a placeholder's name, and
  /// for a placeholder every entry under it.
  mutating func dropUnheld(around key: String) {
    guard unheld.count > 0 else { return }
    unheld.remove(ObjectKey(key))
    guard key.hasSuffix("/") else { return }
    unheld.remove(ObjectKey(String(key.dropLast())))
    for under in Array(unheld.keys) where under.name.utf8.starts(with: key.utf8) { unheld.remove(under) }
  }

  mutating func drop(_ key: ObjectKey) {
    guard let kept = records[key]?.kept else { return }
    held -= kept.entries.count
    change(key) { $0.kept = nil }
  }
}

import FUSE
import ObjectStore
import Synchronization

/// The nodes the kernel holds: their numbers, its lookup counts, and what
/// stat shows of each (facts, and since when), with the changes this mount
/// makes or sees. The one owner of the ``InodeTable``; the full metadata of
/// held files is in the ``MetadataCache``, changed under this lock (lock
/// order: this, then the cache), and ``KnownMetadata`` fetches it.
///
/// Bounded by `limit` nodes (`--max-inodes`): past it, the least recently
/// used names are handed to ``NodeEvictions``, which asks the kernel to drop
/// them; the nodes go when their forgets come (docs/SEMANTICS.md#node-table).
final class NodeTable: Sendable {
  private let table: Mutex<InodeTable>
  private let clock: @Sendable () -> Double
  /// `--metadata-ttl`: how long fetched facts answer without asking again.
  let ttl: Double
  /// Nodes held at most before the least recently used are evicted.
  let limit: Int
  let evictions: NodeEvictions

  /// The table of a mount of `rootKey`, whose facts are fresh for `ttl` seconds.
  init(
    rootKey: String, ttl: Double, clock: @escaping @Sendable () -> Double, metadata: MetadataCache,
    limit: Int = .max, evictions: NodeEvictions = NodeEvictions()
  ) {
    self.table = Mutex(InodeTable(rootKey: rootKey, metadata: metadata))
    self.clock = clock
    self.ttl = ttl
    self.limit = max(limit, 16)
    self.evictions = evictions
  }

  /// Every change goes through here: past the limit, the names chosen for
  /// eviction are sent after the lock is let go.
  private func withLock<T>(_ body: (inout InodeTable) throws -> T) rethrows -> T {
    var chosen: [InodeTable.Eviction] = []
    let result = try table.withLock { table in
      let result = try body(&table)
      if table.count - table.evicting > limit {
        chosen = table.chooseEvictions(keeping: limit / 2, named: evictions.needsNames)
      }
      return result
    }
    if !chosen.isEmpty { evictions.send(chosen) }
    return result
  }

  /// The node of `inode`, marked used (ESTALE when the kernel holds none;
  /// with `kind`, an errno for a node of another kind).
  func node(_ inode: UInt64, kind: Node.Kind? = nil) throws -> Node {
    guard
      let node = withLock({ table in
        table.touch(inode)
        return table[inode]
      })
    else { throw Errno.stale }
    if let kind, node.kind != kind {
      throw kind == .directory
        ? Errno.notDirectory : node.kind == .directory ? Errno.isDirectory : Errno.invalid
    }
    return node
  }

  /// Whether the node's facts were fetched or listed within the TTL.
  func isFresh(_ node: Node) -> Bool {
    clock() - node.fetchedAt < ttl
  }

  // MARK: - What the bucket answered

  /// Takes what the service answered now (a GET, a PATCH, a copy) for a
  /// held node, if any; returns the newest version known.
  @discardableResult
  func remember(_ metadata: ObjectMetadata) -> ObjectMetadata {
    let now = clock()
    return withLock { $0.refresh(metadata, at: now) }
  }

  /// The staged file `inode` was stored as `uploaded`: the kernel's pages
  /// are those bytes, so its next open keeps them.
  func remember(uploaded: ObjectMetadata, inode: UInt64, at now: Double) {
    withLock { table in
      table.refresh(uploaded, at: now)
      if table.inode(of: uploaded.name) == inode { table[inode]?.openedGeneration = uploaded.generation }
    }
  }

  /// What a directory's placeholder (nil: it has none) says, kept on its
  /// node; returns the facts stat shows.
  @discardableResult
  func remember(placeholder: ObjectMetadata?, of inode: UInt64, at now: Double) -> FileFacts {
    withLock { table in
      let key = table[inode]?.key ?? ""
      let facts = FileFacts(placeholder ?? .noPlaceholder(key))
      if table[inode]?.kind == .directory {
        table[inode]?.facts = facts
        table[inode]?.fetchedAt = now
      }
      return facts
    }
  }

  /// What a lookup or a listing shows of `key`, answered at `now` (a
  /// directory's `facts` are its placeholder's). With `counting` (a lookup,
  /// a readdirplus entry) it is a kernel reference to the name's node, made
  /// if needed; without, it only refreshes a held node. Returns the inode
  /// (without `counting`, the one a lookup would give: what plain readdir
  /// shows as d_ino) and the kind and facts to show: the held node's when
  /// newer than the answer's.
  func shown(
    _ key: String, kind: Node.Kind, metadata: ObjectMetadata?, facts: FileFacts? = nil, at now: Double,
    counting: Bool = true
  ) -> (inode: UInt64, kind: Node.Kind, facts: FileFacts?) {
    withLock { table in
      if counting {
        let inode = table.remember(key: key, kind: kind, metadata: metadata, facts: facts, at: now)
        return (inode, table[inode]?.kind ?? kind, table[inode]?.facts ?? facts)
      }
      if let metadata { table.refresh(metadata, at: now) }
      let held = table.inode(of: key)
      if let held, let node = table[held], node.kind == kind { return (held, kind, node.facts ?? facts) }
      return (held ?? table.hashedInode(key), kind, facts)
    }
  }

  // MARK: - What the kernel holds

  /// The inode `key` has now, if the kernel holds it.
  func held(_ key: String) -> UInt64? {
    withLock { $0.inode(of: key) }
  }

  /// What the kernel holds under a name: a directory node, a file or link
  /// node, or none.
  func held(fileKey: String, directoryKey: String) -> (inode: UInt64?, kind: Node.Kind?) {
    withLock { table in
      if let inode = table.inode(of: directoryKey) { return (inode, .directory) }
      if let inode = table.inode(of: fileKey) { return (inode, table[inode]?.kind) }
      return (nil, nil)
    }
  }

  /// Held nodes whose key starts with `prefix` (a directory's descendants).
  func held(under prefix: String) -> [(inode: UInt64, node: Node)] {
    withLock { $0.inodes(under: prefix) }
  }

  /// Inodes the kernel holds (for tests).
  var count: Int { withLock { $0.count } }

  /// Held nodes asked to be dropped whose forgets have not come (for tests).
  var evicting: Int { withLock { $0.evicting } }

  /// A handle was opened on `inode`: it is not evicted until ``closed(_:)``.
  func opened(_ inode: UInt64) {
    withLock { $0.countOpen(inode, by: 1) }
  }

  func closed(_ inode: UInt64) {
    withLock { $0.countOpen(inode, by: -1) }
  }

  // MARK: - Kernel references

  func forget(inode: UInt64, count: UInt64) {
    withLock { $0.forget(inode, count: count) }
  }

  /// One more kernel reference to a node it holds (a lookup answered from
  /// what is known, or a readdirplus entry); nothing if it holds none.
  func retain(_ inode: UInt64) {
    withLock { table in
      table[inode]?.lookups += 1
      table[inode]?.used = true
      table[inode]?.evictedIn = nil
    }
  }

  /// The node of `key` if held with facts fetched within the TTL, counting
  /// the lookup it answers.
  func retain(ifFresh key: String) -> (inode: UInt64, node: Node)? {
    let now = clock()
    return withLock { table in
      guard let inode = table.inode(of: key), var node = table[inode], now - node.fetchedAt < ttl else {
        return nil
      }
      node.lookups += 1
      node.used = true
      node.evictedIn = nil
      table[inode] = node
      return (inode, node)
    }
  }

  // MARK: - Changes this mount made or saw

  /// `key` is gone from the bucket (this mount deleted it, or found it
  /// gone): the node that showed it, `inode` or else the one holding the
  /// name, is unhooked from the name (the kernel may hold it still; the
  /// name's next object gets a node of its own).
  func deleted(_ key: String, inode: UInt64? = nil) {
    withLock { table in
      if let inode = inode ?? table.inode(of: key) { table.detach(inode) }
      table.metadata.remove(key)
    }
  }

  /// This mount made `key` where the bucket had nothing, showing `facts`
  /// (or `metadata`'s, when the service answered with it); counts the
  /// creator's lookup. A node still held under `stale` (this name, or its
  /// other form) showed an object that is gone and is detached first.
  func created(
    _ key: String, kind: Node.Kind, facts: FileFacts, metadata: ObjectMetadata? = nil,
    detaching stale: String? = nil, at now: Double
  ) -> (inode: UInt64, facts: FileFacts) {
    withLock { table in
      if let stale, let inode = table.inode(of: stale) { table.detach(inode) }
      let inode = table.remember(key: key, kind: kind, metadata: metadata, at: now)
      if metadata == nil {
        table[inode]?.facts = facts
        table[inode]?.fetchedAt = now
      }
      return (inode, table[inode]?.facts ?? facts)
    }
  }

  /// What an open does with the kernel's cached pages of its file.
  enum PageCacheUse: Sendable, Equatable {
    /// Keeps them: the last open showed the same generation.
    case keep
    /// Drops them (FOPEN_KEEP_CACHE unset).
    case drop
    /// Drops them and reads around the page cache (FOPEN_DIRECT_IO).
    case bypass
  }

  /// An open of `inode` showing `generation`. While a handle whose bytes
  /// did not match is open, the open bypasses the page cache, and the
  /// next open after it drops the pages again.
  func recordOpen(_ inode: UInt64, generation: Int64) -> PageCacheUse {
    withLock { table in
      if table.distrusted[inode] != nil { return .bypass }
      defer { table[inode]?.openedGeneration = generation }
      return table[inode]?.openedGeneration == generation ? .keep : .drop
    }
  }

  /// The kernel's pages of `inode` may hold bytes that were not the
  /// object's, read through a handle still open: its next open drops them
  /// (whether or not a notification dropping them has landed by then), and
  /// until that handle is released (``releasedDistrusted(_:)``) every open
  /// reads around them, since a read of the failed handle still under way
  /// may race the kernel's dropping (docs/SEMANTICS.md#integrity).
  func distrustPages(_ inode: UInt64) {
    withLock { table in
      table[inode]?.openedGeneration = nil
      table.distrusted[inode, default: 0] += 1
    }
  }

  /// A handle of `inode` whose bytes did not match was released.
  func releasedDistrusted(_ inode: UInt64) {
    withLock { table in
      guard let count = table.distrusted[inode] else { return }
      table.distrusted[inode] = count > 1 ? count - 1 : nil
    }
  }

  /// What stat knows of `inode` must come from the bucket again.
  func expire(_ inode: UInt64) {
    withLock { $0[inode]?.fetchedAt = -.infinity }
  }

  /// The version the mount showed of file `key` is gone: its facts are
  /// fetched again, and its next open drops the kernel's pages.
  func expire(file key: String) {
    withLock { table in
      if let held = table.inode(of: key), var node = table[held], node.kind == .file {
        node.fetchedAt = -.infinity
        node.openedGeneration = nil
        table[held] = node
      }
    }
  }

  /// A file moved from `from` to `moved`: the kernel keeps the inode
  /// number for the new name, with the new object's facts, and a node that
  /// held the new name (the replaced file) is detached. The bytes are the
  /// same as `generation`'s, so pages cached of that generation stay valid.
  func moved(file inode: UInt64?, from: String, to moved: ObjectMetadata, sameBytesAs generation: Int64) {
    let now = clock()
    withLock { table in
      if let inode {
        table.rekey(inode, to: moved.name)
        if table[inode]?.openedGeneration == generation {
          table[inode]?.openedGeneration = moved.generation
        }
      } else if let other = table.inode(of: moved.name) {
        table.detach(other)
      }
      // The bucket had no directory of that name (it was checked): one the
      // mount still holds had vanished with its last object, and so had
      // every directory it holds under it (looked for only then: the scan
      // reads every node, and an rsync renames each file it writes).
      if let vanished = table.inode(of: moved.name + "/") {
        table.detach(vanished)
        for (inode, node) in table.inodes(under: moved.name + "/") where node.kind == .directory {
          table.detach(inode)
        }
      }
      table.metadata.remove(from)
      table.refresh(moved, at: now)
    }
  }

  /// Directory `from` moved to `to` with the objects `moved`: every held
  /// node under it (and its own) takes the new name. Returns the held files
  /// among them, with their new names and generations.
  func moved(directory from: String, to: String, objects moved: [ObjectMetadata]) -> [(
    inode: UInt64, key: String, generation: Int64
  )] {
    let now = clock()
    return withLock { table in
      // The bucket had nothing under `to` (the rename checked): a directory
      // the mount still holds there vanished with its last object, and would
      // hide a moved file of its name.
      for (inode, node) in table.inodes(under: to) where node.kind == .directory { table.detach(inode) }
      for (inode, node) in table.inodes(under: from) {
        table.rekey(inode, to: to + String(decoding: node.key.utf8.dropFirst(from.utf8.count), as: UTF8.self))
      }
      if let inode = table.inode(of: from) { table.rekey(inode, to: to) }
      var renamed: [(inode: UInt64, key: String, generation: Int64)] = []
      for object in moved {
        table.refresh(object, at: now)
        if let inode = table.inode(of: object.name), table[inode]?.kind == .file {
          renamed.append((inode, object.name, object.generation))
        }
      }
      return renamed
    }
  }
}

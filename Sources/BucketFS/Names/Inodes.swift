import FUSE
import ObjectStore

/// What the filesystem knows of one inode.
struct Node: Sendable {
  enum Kind: Sendable, Equatable {
    case file, directory, symlink

    /// What an object is: a link when it carries either link key
    /// (docs/SEMANTICS.md#symlinks), else a file.
    init(object metadata: ObjectMetadata) {
      self = SymlinkEncoding.isLink(metadata) ? .symlink : .file
    }
  }

  // One is held per inode: fields are ordered to pack tightly.
  /// Full object name for a file; prefix ending in `/` (or `""`) for a directory.
  let key: String
  /// References the kernel holds (lookups and readdirplus entries not yet forgotten).
  var lookups: UInt64
  var fetchedAt: Double
  /// What stat shows of a file, and when it was fetched or listed. The full
  /// metadata lives in the bounded ``MetadataCache``.
  var facts: FileFacts?
  /// Generation of the last open, to keep the page cache while unchanged.
  var openedGeneration: Int64?
  /// Handles open on it now: an open node is never evicted.
  var opens: UInt32 = 0
  let kind: Kind
  /// Used since the eviction hand last passed it (CLOCK's reference bit).
  var used = true
  /// The eviction call (mod 256) that asked the kernel to drop its entry;
  /// nil: not asked, or looked up again since.
  var evictedIn: UInt8?
  /// The kernel was asked to drop its entry; its forget has not come yet.
  var evicting: Bool { evictedIn != nil }

  init(
    key: String, kind: Kind, lookups: UInt64, facts: FileFacts?, fetchedAt: Double, openedGeneration: Int64?
  ) {
    self.key = key
    self.lookups = lookups
    self.fetchedAt = fetchedAt
    self.facts = facts
    self.openedGeneration = openedGeneration
    self.kind = kind
  }

  /// The same node under another key (a rename moves the kernel's inode to it).
  func withKey(_ key: String) -> Node {
    var node = Node(
      key: key, kind: kind, lookups: lookups, facts: facts, fetchedAt: fetchedAt,
      openedGeneration: openedGeneration)
    node.opens = opens
    node.used = used
    node.evictedIn = evictedIn
    return node
  }

  /// A node unlinked or replaced while the kernel still holds it: found by
  /// its number only. Its key starts with a NUL, which no shown name has.
  var isDetached: Bool { key.utf8.first == 0 }
}

/// Inode numbers are a hash of the key, so a path keeps its number for the
/// life of the mount (and across mounts) without a table of every path ever
/// seen; only inodes the kernel holds are kept. A key whose hash is held by
/// another live key gets a number from the upper half (2^63 + n) for as long
/// as the kernel holds it: two keys never share a node.
///
/// Nodes live in fixed-size chunks and the hash table maps inode numbers to
/// slots: a table of whole nodes costs their size in every empty bucket too,
/// and one growing array copies itself; after an `ls -l` of 100,000 files
/// those were most of the process's memory.
struct InodeTable: Sendable {
  static let rootInode: UInt64 = 1
  private static let chunkSize = 1024
  private var chunks: [ContiguousArray<Node>] = []
  private var slotOf: [UInt64: Int32] = [:]
  private var vacant: [Int32] = []
  /// The full metadata of held files, changed in the same step as their facts.
  let metadata: MetadataCache
  /// Inodes with a handle open whose bytes did not match, and how many:
  /// opens meanwhile read around the kernel's pages (``NodeTable/recordOpen(_:generation:)``).
  var distrusted: [UInt64: Int] = [:]
  /// Live keys whose inode is not their hash (a collision), and their inodes.
  private var mapped: [ObjectKey: UInt64] = [:]
  private var nextCollisionInode: UInt64 = 1 << 63
  private let hashOf: @Sendable (String) -> UInt64

  /// `hash` is replaceable so tests can force collisions.
  init(rootKey: String, metadata: MetadataCache, hash: @escaping @Sendable (String) -> UInt64 = FNV1a.hash) {
    self.metadata = metadata
    self.rootKey = rootKey
    hashOf = hash
    self[Self.rootInode] = Node(
      key: rootKey, kind: .directory, lookups: 1, facts: nil, fetchedAt: 0, openedGeneration: nil)
  }

  init(rootKey: String, metadataCapacity: Int, hash: @escaping @Sendable (String) -> UInt64 = FNV1a.hash) {
    self.init(rootKey: rootKey, metadata: MetadataCache(capacity: metadataCapacity), hash: hash)
  }

  /// Inodes the kernel holds.
  var count: Int { slotOf.count }
  /// Held nodes the kernel was asked to drop (their forgets not come yet).
  private(set) var evicting = 0
  /// The slot the eviction hand looks at next.
  private var hand = 0
  /// Eviction calls made, mod 256.
  private var evictionCalls: UInt8 = 0
  private let rootKey: String

  /// The number `key` gets when its hash is free: in the lower half (the
  /// upper is for collisions), never the root's.
  func hashedInode(_ key: String) -> UInt64 {
    let hash = hashOf(key) & ~(1 << 63)
    return hash < 2 ? hash + 2 : hash
  }

  subscript(inode: UInt64) -> Node? {
    get { slotOf[inode].map { self[slot: $0] } }
    set {
      if let newValue {
        if let slot = slotOf[inode] {
          if self[slot: slot].evicting != newValue.evicting { evicting += newValue.evicting ? 1 : -1 }
          self[slot: slot] = newValue
        } else if let slot = vacant.popLast() {
          self[slot: slot] = newValue
          slotOf[inode] = slot
        } else {
          if chunks.last.map({ $0.count == Self.chunkSize }) ?? true {
            var chunk = ContiguousArray<Node>()
            chunk.reserveCapacity(Self.chunkSize)
            chunks.append(chunk)
          }
          slotOf[inode] = Int32((chunks.count - 1) * Self.chunkSize + chunks[chunks.count - 1].count)
          chunks[chunks.count - 1].append(newValue)
        }
      } else if let slot = slotOf.removeValue(forKey: inode) {
        if self[slot: slot].evicting { evicting -= 1 }
        self[slot: slot] = Node(
          key: "", kind: .file, lookups: 0, facts: nil, fetchedAt: 0, openedGeneration: nil)
        vacant.append(slot)
      }
    }
  }

  private subscript(slot slot: Int32) -> Node {
    get { chunks[Int(slot) / Self.chunkSize][Int(slot) % Self.chunkSize] }
    set { chunks[Int(slot) / Self.chunkSize][Int(slot) % Self.chunkSize] = newValue }
    _modify { yield &chunks[Int(slot) / Self.chunkSize][Int(slot) % Self.chunkSize] }
  }

  /// The inode a key has now, if the kernel holds it.
  func inode(of key: String) -> UInt64? {
    if let inode = mapped[ObjectKey(key)] { return inode }
    let inode = hashedInode(key)
    return self[inode].map { Names.same($0.key, key) } == true ? inode : nil
  }

  /// Records one more kernel reference to `key`, creating the node if needed,
  /// and refreshes what is known of it. The node's kind may differ from
  /// `kind` when `metadata` is older than what it knows.
  mutating func remember(
    key: String, kind: Node.Kind, metadata: ObjectMetadata?, facts: FileFacts? = nil, at now: Double
  ) -> UInt64 {
    var held = inode(of: key)
    if let inode = held, var node = self[inode], node.kind != kind {
      // A late answer about the name's earlier object changes nothing.
      if let metadata, Self.isOlder(metadata, than: node.facts) {
        node.lookups += 1
        self[inode] = node
        return inode
      }
      // A file became a link or a link a file: the kernel's inode keeps its
      // type, so the new kind gets a node and number of its own.
      detach(inode)
      held = nil
    }
    let inode = held ?? allocate(key)
    var node =
      self[inode] ?? Node(key: key, kind: kind, lookups: 0, facts: nil, fetchedAt: 0, openedGeneration: nil)
    node.lookups += 1
    // A new reference: the kernel looked the name up again (or never dropped it).
    node.used = true
    node.evictedIn = nil
    if kind != .directory, let metadata {
      if !Self.isOlder(metadata, than: node.facts) {
        node.facts = facts ?? FileFacts(metadata)
        node.fetchedAt = max(node.fetchedAt, now)
        self.metadata.insert(metadata)
      }
    } else if kind == .directory {
      node.fetchedAt = now
      // A directory's facts are its placeholder's (a listing shows it, or its
      // absence); a page sent before a chmod answered never undoes it.
      let late = metadata.map { $0.generation != 0 && Self.isOlder($0, than: node.facts) } ?? false
      if let facts, !late { node.facts = facts }
    }
    self[inode] = node
    return inode
  }

  /// Refreshes cached metadata of a node the kernel already holds, if any,
  /// unless what it knows is newer; returns the newest metadata known. A
  /// node keeps its kind: an object that became a link or stopped being one
  /// (changed elsewhere) is a new node at its next lookup.
  @discardableResult
  mutating func refresh(_ metadata: ObjectMetadata, at now: Double) -> ObjectMetadata {
    guard let inode = inode(of: metadata.name), var node = self[inode],
      node.kind == Node.Kind(object: metadata)
    else {
      return metadata
    }
    if Self.isOlder(metadata, than: node.facts) { return self.metadata[metadata.name] ?? metadata }
    node.facts = FileFacts(metadata)
    node.fetchedAt = max(node.fetchedAt, now)
    self[inode] = node
    self.metadata.insert(metadata)
    return metadata
  }

  /// Whether `metadata` is older than what is known: a lower generation, or
  /// the same generation and a lower metageneration. A late answer (a GET or
  /// a list page sent before a PATCH answered) never replaces a newer one.
  private static func isOlder(_ metadata: ObjectMetadata, than known: FileFacts?) -> Bool {
    guard let known else { return false }
    return (metadata.generation, metadata.metageneration) < (known.generation, known.metageneration)
  }

  mutating func forget(_ inode: UInt64, count: UInt64) {
    guard inode != Self.rootInode, var node = self[inode] else { return }
    node.lookups = node.lookups > count ? node.lookups - count : 0
    if node.lookups == 0 {
      self[inode] = nil
      if mapped[ObjectKey(node.key)] == inode { mapped[ObjectKey(node.key)] = nil }
      metadata.remove(node.key)
    } else {
      self[inode] = node
    }
  }

  /// Moves the node of `inode` to `newKey` (a rename: the kernel keeps the
  /// number for the moved name), through the explicit map when the number
  /// is not `newKey`'s hash. Another node holding `newKey` is detached.
  mutating func rekey(_ inode: UInt64, to newKey: String) {
    guard let node = self[inode], !Names.same(node.key, newKey) else { return }
    if let other = self.inode(of: newKey), other != inode { detach(other) }
    if mapped[ObjectKey(node.key)] == inode { mapped[ObjectKey(node.key)] = nil }
    metadata.remove(node.key)
    self[inode] = node.withKey(newKey)
    mapped[ObjectKey(newKey)] = hashedInode(newKey) == inode ? nil : inode
  }

  /// Unhooks `inode` from its key (unlinked or replaced while the kernel
  /// holds it), so the name's next object gets a node of its own.
  mutating func detach(_ inode: UInt64) {
    guard inode != Self.rootInode, let node = self[inode], !node.isDetached else { return }
    if self.inode(of: node.key) == inode {
      mapped[ObjectKey(node.key)] = nil
      metadata.remove(node.key)
    }
    self[inode] = node.withKey("\u{0}" + node.key)
  }

  /// Held nodes whose key starts with `prefix` (a directory's descendants).
  func inodes(under prefix: String) -> [(inode: UInt64, node: Node)] {
    slotOf.compactMap { inode, slot in
      let node = self[slot: slot]
      return node.key.utf8.starts(with: prefix.utf8) && !Names.same(node.key, prefix) ? (inode, node) : nil
    }
  }

  // MARK: - Eviction (docs/ARCHITECTURE.md#node-table)

  /// A node the kernel is asked to drop, by its inode (a prune) or, where
  /// named, by its entry: `name` in directory `parent` (an inval_entry).
  struct Eviction: Sendable, Equatable {
    let parent: UInt64
    let name: String?
    let inode: UInt64

    init(parent: UInt64 = 0, name: String?, inode: UInt64) {
      self.parent = parent
      self.name = name
      self.inode = inode
    }
  }

  /// `inode` was used: the eviction hand passes it by once more.
  mutating func touch(_ inode: UInt64) {
    guard let slot = slotOf[inode] else { return }
    self[slot: slot].used = true
  }

  /// A handle was opened on `inode` (`by` 1) or closed (-1).
  mutating func countOpen(_ inode: UInt64, by delta: Int) {
    guard let slot = slotOf[inode] else { return }
    let opens = Int(self[slot: slot].opens) + delta
    self[slot: slot].opens = UInt32(clamping: opens)
  }

  /// Names for the kernel to drop, least recently used first (CLOCK), so
  /// that once their forgets come at most `target` nodes are held. Never
  /// the root, an open node or a detached one (it has no name to drop);
  /// a node asked for a round ago and still held (the kernel keeps it in
  /// use: a working directory, a mapped file) counts as held again, and may
  /// be asked for on the hand's next round.
  /// Only `named` evictions carry their entry: a prune needs the inode
  /// alone, and naming costs a split and a lookup of the parent.
  mutating func chooseEvictions(keeping target: Int, named: Bool = true) -> [Eviction] {
    let wanted = count - evicting - target
    guard wanted > 0 else { return [] }
    let slots = (chunks.count - 1) * Self.chunkSize + (chunks.last?.count ?? 0)
    evictionCalls &+= 1
    var chosen: [Eviction] = []
    chosen.reserveCapacity(wanted)
    var steps = 0
    while chosen.count < wanted, steps < 2 * slots {
      steps += 1
      let slot = Int32(hand)
      hand = hand + 1 < slots ? hand + 1 : 0
      let node = self[slot: slot]
      guard node.lookups > 0, node.opens == 0, !node.isDetached, !Names.same(node.key, rootKey) else {
        continue
      }
      if let call = node.evictedIn {
        // Met again only after a whole round (or within this call, past its start).
        if call != evictionCalls {
          self[slot: slot].evictedIn = nil
          evicting -= 1
        }
        continue
      }
      if node.used {
        self[slot: slot].used = false
        continue
      }
      guard let inode = inode(of: node.key),
        let eviction = named ? eviction(of: node.key, inode: inode) : Eviction(name: nil, inode: inode)
      else { continue }
      self[slot: slot].evictedIn = evictionCalls
      evicting += 1
      chosen.append(eviction)
    }
    return chosen
  }

  /// The directory that holds `key` and its name there; nil when the
  /// kernel holds no node of that directory (it then holds no entry under it).
  private func eviction(of key: String, inode: UInt64) -> Eviction? {
    let (parentKey, name) = DirectoryRecords.split(key)
    guard !name.isEmpty else { return nil }
    if Names.same(parentKey, rootKey) {
      return Eviction(parent: Self.rootInode, name: String(name), inode: inode)
    }
    return self.inode(of: String(parentKey)).map { Eviction(parent: $0, name: String(name), inode: inode) }
  }

  /// The key's hash if no live node holds it, else a number of the upper half.
  private mutating func allocate(_ key: String) -> UInt64 {
    let inode = hashedInode(key)
    guard slotOf[inode] != nil else { return inode }
    repeat {
      nextCollisionInode = nextCollisionInode == .max ? 1 << 63 : nextCollisionInode + 1
    } while slotOf[nextCollisionInode] != nil
    mapped[ObjectKey(key)] = nextCollisionInode
    return nextCollisionInode
  }
}

import FUSE
import ObjectStore
import Synchronization

/// What the filesystem knows of one inode.
struct Node: Sendable {
  enum Kind: Sendable, Equatable { case file, directory }

  /// Full object name for a file; prefix ending in `/` (or `""`) for a directory.
  let key: String
  let kind: Kind
  /// References the kernel holds (lookups and readdirplus entries not yet forgotten).
  var lookups: UInt64
  /// What stat shows of a file, and when it was fetched or listed. The full
  /// metadata lives in the bounded ``MetadataCache``.
  var facts: FileFacts?
  var fetchedAt: Double
  /// Generation of the last open, to keep the page cache while unchanged.
  var openedGeneration: Int64?
}

/// Inode numbers are a hash of the key, so a path keeps its number for the
/// life of the mount (and across mounts) without a table of every path ever
/// seen; only inodes the kernel holds are kept.
struct InodeTable: Sendable {
  static let rootInode: UInt64 = 1
  private(set) var nodes: [UInt64: Node] = [:]
  private(set) var metadata: MetadataCache
  /// Keys whose hash collided with another live key, and the numbers they got.
  private var collisions: [String: UInt64] = [:]
  private var nextCollisionInode: UInt64 = 1 << 63

  init(rootKey: String, metadataCapacity: Int) {
    metadata = MetadataCache(capacity: metadataCapacity)
    nodes[Self.rootInode] = Node(
      key: rootKey, kind: .directory, lookups: 1, facts: nil, fetchedAt: 0, openedGeneration: nil)
  }

  static func hash(_ key: String) -> UInt64 {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325  // FNV-1a 64
    for byte in key.utf8 {
      hash ^= UInt64(byte)
      hash = hash &* 0x0000_0100_0000_01b3
    }
    hash &= ~(1 << 63)  // the upper half is for collisions
    return hash < 2 ? hash + 2 : hash
  }

  subscript(inode: UInt64) -> Node? {
    get { nodes[inode] }
    set { nodes[inode] = newValue }
  }

  /// The inode a key has now, if the kernel holds it.
  func inode(of key: String) -> UInt64? {
    if let inode = collisions[key] { return inode }
    let inode = Self.hash(key)
    return nodes[inode]?.key == key ? inode : nil
  }

  /// Records one more kernel reference to `key`, creating the node if needed,
  /// and refreshes what is known of it.
  mutating func remember(
    key: String, kind: Node.Kind, metadata: ObjectMetadata?, facts: FileFacts? = nil, at now: Double
  ) -> UInt64 {
    let inode = inode(of: key) ?? allocate(key)
    var node =
      nodes[inode].flatMap { $0.kind == kind ? $0 : nil }
      ?? Node(key: key, kind: kind, lookups: 0, facts: nil, fetchedAt: 0, openedGeneration: nil)
    node.lookups += 1
    if kind == .file, let metadata {
      node.facts = facts ?? FileFacts(metadata)
      node.fetchedAt = now
      self.metadata.insert(metadata)
    } else if kind == .directory {
      node.fetchedAt = now
    }
    nodes[inode] = node
    return inode
  }

  /// Refreshes cached metadata of a node the kernel already holds, if any.
  mutating func refresh(_ metadata: ObjectMetadata, at now: Double) {
    guard let inode = inode(of: metadata.name), nodes[inode]?.kind == .file else { return }
    nodes[inode]?.facts = FileFacts(metadata)
    nodes[inode]?.fetchedAt = now
    self.metadata.insert(metadata)
  }

  mutating func forget(_ inode: UInt64, count: UInt64) {
    guard inode != Self.rootInode, var node = nodes[inode] else { return }
    node.lookups = node.lookups > count ? node.lookups - count : 0
    if node.lookups == 0 {
      nodes[inode] = nil
      collisions[node.key] = nil
      metadata.remove(node.key)
    } else {
      nodes[inode] = node
    }
  }

  private mutating func allocate(_ key: String) -> UInt64 {
    let inode = Self.hash(key)
    guard nodes[inode] != nil else { return inode }
    nextCollisionInode += 1
    collisions[key] = nextCollisionInode
    return nextCollisionInode
  }
}

/// The little of a file's metadata that stat needs, parsed once.
struct FileFacts: Sendable, Equatable {
  let size: UInt64
  let generation: Int64
  let created: Timestamp?
  /// `goog-reserved-file-mtime` if the object has it.
  let modified: Timestamp?
  let changed: Timestamp?

  init(_ metadata: ObjectMetadata) {
    size = UInt64(max(metadata.size, 0))
    generation = metadata.generation
    created = RFC3339.parse(metadata.timeCreated)
    modified = metadata.custom["goog-reserved-file-mtime"].flatMap(RFC3339.parseMtime)
    changed = RFC3339.parse(metadata.updated)
  }
}

/// Full metadata of the most recently listed or fetched files, bounded so a
/// listing of a huge directory does not hold every object's metadata while
/// the kernel holds its inodes; an evicted entry is fetched again on demand.
struct MetadataCache: Sendable {
  let capacity: Int
  private var entries: [String: ObjectMetadata] = [:]
  /// Insertion order, for eviction; may hold keys already removed.
  private var order: [String] = []
  private var head = 0

  init(capacity: Int) {
    self.capacity = max(capacity, 1)
  }

  subscript(key: String) -> ObjectMetadata? { entries[key] }

  var count: Int { entries.count }

  mutating func insert(_ metadata: ObjectMetadata) {
    if entries.updateValue(metadata, forKey: metadata.name) == nil { order.append(metadata.name) }
    while entries.count > capacity, head < order.count {
      entries[order[head]] = nil
      head += 1
    }
    if head > 4096 && head * 2 > order.count {
      order.removeFirst(head)
      head = 0
    }
  }

  mutating func remove(_ key: String) {
    entries[key] = nil
  }
}

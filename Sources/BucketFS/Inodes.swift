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
  /// Metadata of a file, and when it was fetched or listed.
  var metadata: ObjectMetadata?
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
  /// Keys whose hash collided with another live key, and the numbers they got.
  private var collisions: [String: UInt64] = [:]
  private var nextCollisionInode: UInt64 = 1 << 63

  init(rootKey: String) {
    nodes[Self.rootInode] = Node(
      key: rootKey, kind: .directory, lookups: 1, metadata: nil, fetchedAt: 0, openedGeneration: nil)
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
    key: String, kind: Node.Kind, metadata: ObjectMetadata?, at now: Double, countLookup: Bool = true
  ) -> UInt64 {
    let inode = inode(of: key) ?? allocate(key)
    var node =
      nodes[inode].flatMap { $0.kind == kind ? $0 : nil }
      ?? Node(key: key, kind: kind, lookups: 0, metadata: nil, fetchedAt: 0, openedGeneration: nil)
    if countLookup { node.lookups += 1 }
    if kind == .file, let metadata {
      node.metadata = metadata
      node.fetchedAt = now
    } else if kind == .directory {
      node.fetchedAt = now
    }
    nodes[inode] = node
    return inode
  }

  /// Refreshes cached metadata of a node the kernel already holds, if any.
  mutating func refresh(_ metadata: ObjectMetadata, at now: Double) {
    guard let inode = inode(of: metadata.name), nodes[inode]?.kind == .file else { return }
    nodes[inode]?.metadata = metadata
    nodes[inode]?.fetchedAt = now
  }

  mutating func forget(_ inode: UInt64, count: UInt64) {
    guard inode != Self.rootInode, var node = nodes[inode] else { return }
    node.lookups = node.lookups > count ? node.lookups - count : 0
    if node.lookups == 0 {
      nodes[inode] = nil
      collisions[node.key] = nil
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

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
  let kind: Kind

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
    Node(
      key: key, kind: kind, lookups: lookups, facts: facts, fetchedAt: fetchedAt,
      openedGeneration: openedGeneration)
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
  /// Live keys whose inode is not their hash (a collision), and their inodes.
  private var mapped: [ObjectKey: UInt64] = [:]
  private var nextCollisionInode: UInt64 = 1 << 63
  private let hashOf: @Sendable (String) -> UInt64

  /// `hash` is replaceable so tests can force collisions.
  init(rootKey: String, metadata: MetadataCache, hash: @escaping @Sendable (String) -> UInt64 = FNV1a.hash) {
    self.metadata = metadata
    hashOf = hash
    self[Self.rootInode] = Node(
      key: rootKey, kind: .directory, lookups: 1, facts: nil, fetchedAt: 0, openedGeneration: nil)
  }

  init(rootKey: String, metadataCapacity: Int, hash: @escaping @Sendable (String) -> UInt64 = FNV1a.hash) {
    self.init(rootKey: rootKey, metadata: MetadataCache(capacity: metadataCapacity), hash: hash)
  }

  /// Inodes the kernel holds.
  var count: Int { slotOf.count }

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
        self[slot: slot] = Node(
          key: "", kind: .file, lookups: 0, facts: nil, fetchedAt: 0, openedGeneration: nil)
        vacant.append(slot)
      }
    }
  }

  private subscript(slot slot: Int32) -> Node {
    get { chunks[Int(slot) / Self.chunkSize][Int(slot) % Self.chunkSize] }
    set { chunks[Int(slot) / Self.chunkSize][Int(slot) % Self.chunkSize] = newValue }
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

/// The little of a file's or link's metadata (or a directory's placeholder's)
/// that stat needs, parsed once. Times are kept as nanoseconds and absent
/// ids as a sentinel (72 bytes in all): one is held for every inode.
struct FileFacts: Sendable, Equatable {
  /// The object's size; a link's is its target's length in bytes.
  let size: UInt64
  let generation: Int64
  let metageneration: Int64
  private let createdNanoseconds: Int64
  private let modifiedNanoseconds: Int64
  private let changedNanoseconds: Int64
  private let accessedNanoseconds: Int64
  /// A device's number (0 for anything else).
  let device: UInt64
  /// The object's CRC-32C, which a whole sequential read is checked against.
  let crc32c: UInt32?
  private let storedMode: UInt32
  private let storedUid: UInt32
  private let storedGid: UInt32
  private static let noValue = UInt32.max

  /// Stored permission bits, with a special file's type bits; nil: the mount's default.
  var mode: UInt32? { storedMode == Self.noValue ? nil : storedMode }
  var uid: UInt32? { storedUid == Self.noValue ? nil : storedUid }
  var gid: UInt32? { storedGid == Self.noValue ? nil : storedGid }
  /// `goog-reserved-file-atime` if the object has it.
  var accessed: Timestamp? { Self.timestamp(accessedNanoseconds) }

  var created: Timestamp? { Self.timestamp(createdNanoseconds) }
  /// `goog-reserved-file-mtime` (or another tool's mtime key) if the object has it.
  var modified: Timestamp? { Self.timestamp(modifiedNanoseconds) }
  var changed: Timestamp? { Self.timestamp(changedNanoseconds) }

  init(_ metadata: ObjectMetadata) {
    size = SymlinkEncoding.targetLength(metadata) ?? UInt64(max(metadata.size, 0))
    generation = metadata.generation
    metageneration = metadata.metageneration
    createdNanoseconds = Self.nanoseconds(RFC3339.parse(metadata.timeCreated))
    let stored = StoredPosix(metadata.custom)
    modifiedNanoseconds = Self.nanoseconds(stored.modified)
    accessedNanoseconds = Self.nanoseconds(stored.accessed)
    changedNanoseconds = Self.nanoseconds(RFC3339.parse(metadata.updated))
    storedMode = stored.mode ?? Self.noValue
    storedUid = stored.uid ?? Self.noValue
    storedGid = stored.gid ?? Self.noValue
    device = stored.device ?? 0
    crc32c = metadata.crc32c.flatMap { CRC32C.value(base64: $0) }
  }

  private static let absent = Int64.min

  private static func nanoseconds(_ time: Timestamp?) -> Int64 {
    guard let time else { return absent }
    let (seconds, overflow) = Int64(time.seconds).multipliedReportingOverflow(by: 1_000_000_000)
    guard !overflow, seconds > absent + 1_000_000_000 else { return absent }
    // Past 2262-04-11T23:47:16.854775807Z the sum does not fit either.
    let (sum, past) = seconds.addingReportingOverflow(Int64(time.nanoseconds))
    return past ? absent : sum
  }

  private static func timestamp(_ nanoseconds: Int64) -> Timestamp? {
    guard nanoseconds != absent else { return nil }
    let (seconds, remainder) = nanoseconds.quotientAndRemainder(dividingBy: 1_000_000_000)
    return remainder < 0
      ? Timestamp(seconds: Int(seconds - 1), nanoseconds: Int(remainder + 1_000_000_000))
      : Timestamp(seconds: Int(seconds), nanoseconds: Int(remainder))
  }
}

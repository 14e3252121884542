import FUSE
import ObjectStore

/// What stat and lookup answer: a node's facts (or its staged view) as
/// attributes, with the time the kernel may keep them
/// (docs/SEMANTICS.md#attributes).
struct AttributeBuilder: Sendable {
  let nodes: NodeTable
  let staging: Staging
  let configuration: Configuration
  let mountTime: Timestamp
  let clock: @Sendable () -> Double

  /// The kernel may keep it for the TTL counted from when the service answered.
  func entry(inode: UInt64, kind: Node.Kind, facts: FileFacts?, answeredAt: Double? = nil) -> Entry {
    let age = answeredAt.map { max(clock() - $0, 0) } ?? 0
    let timeout = max(configuration.metadataTTL - age, 0)
    return Entry(
      attributes: attributes(inode: inode, kind: kind, facts: facts), entryTimeout: timeout,
      attributeTimeout: timeout)
  }

  func directory(_ inode: UInt64) -> Entry {
    entry(inode: inode, kind: .directory, facts: nil)
  }

  /// Counts a lookup of an object (a file or a link) and answers with the
  /// newest facts known of it.
  func object(_ key: String, _ metadata: ObjectMetadata, at answeredAt: Double) -> Entry {
    let remembered = nodes.rememberObject(key, metadata, at: answeredAt)
    return entry(
      inode: remembered.inode, kind: remembered.kind, facts: remembered.facts, answeredAt: answeredAt)
  }

  func attributes(inode: UInt64, kind: Node.Kind, facts: FileFacts?) -> FileAttributes {
    if kind == .symlink, let facts { return link(inode: inode, facts: facts) }
    guard kind == .file, let facts else {
      return FileAttributes(
        inode: inode, kind: .directory, size: 0, permissions: configuration.directoryMode,
        uid: configuration.uid, gid: configuration.gid, accessTime: mountTime, modificationTime: mountTime,
        changeTime: mountTime)
    }
    var modified = facts.modified ?? facts.created ?? mountTime
    var size = facts.size
    if let staged = staging.view(inode) {
      size = staged.size
      modified = staged.modified ?? modified
    }
    let changed = max(facts.changed ?? modified, modified)
    return FileAttributes(
      inode: inode, kind: .file, size: size, permissions: configuration.fileMode,
      uid: configuration.uid, gid: configuration.gid, accessTime: modified, modificationTime: modified,
      changeTime: changed)
  }

  /// A link shows its target's length as its size and mode 0777, as links
  /// do on Linux (the kernel never checks a link's own permissions).
  private func link(inode: UInt64, facts: FileFacts) -> FileAttributes {
    let modified = facts.modified ?? facts.created ?? mountTime
    return FileAttributes(
      inode: inode, kind: .symlink, size: facts.size, permissions: 0o777, uid: configuration.uid,
      gid: configuration.gid, accessTime: modified, modificationTime: modified,
      changeTime: max(facts.changed ?? modified, modified))
  }

  /// An entry for a key the kernel already holds with fresh metadata; counts the lookup.
  func cached(_ key: String) -> Entry? {
    let now = clock()
    let ttl = configuration.metadataTTL
    let found: (UInt64, Node)? = nodes.withLock { table in
      guard let inode = table.inode(of: key), var node = table[inode], now - node.fetchedAt < ttl else {
        return nil
      }
      node.lookups += 1
      table[inode] = node
      return (inode, node)
    }
    guard let (inode, node) = found else { return nil }
    return entry(inode: inode, kind: node.kind, facts: node.facts, answeredAt: node.fetchedAt)
  }

  /// An entry for a staged file the kernel holds, so a lookup of a file
  /// not yet uploaded finds it; counts the lookup.
  func staged(key: String) -> Entry? {
    guard staging.isActive, let inode = nodes.withLock({ $0.inode(of: key) }),
      let staged = staging.file(inode: inode), !staged.state.withLock({ $0.unlinked })
    else { return nil }
    nodes.withLock { $0[inode]?.lookups += 1 }
    return self.staged(inode)
  }

  func staged(_ inode: UInt64) -> Entry {
    let facts = nodes.withLock { $0[inode]?.facts }
    return entry(
      inode: inode, kind: .file, facts: facts ?? FileFacts(Staging.placeholder(key: "", bucket: "")))
  }

  func getattr(inode: UInt64) async throws -> (FileAttributes, timeout: Double) {
    let node = try nodes.node(inode)
    if node.kind == .directory {
      return (attributes(inode: inode, kind: .directory, facts: nil), configuration.metadataTTL)
    }
    // An unlinked or replaced file held open: its name now means something else.
    let staged = staging.view(inode) != nil
    if let facts = node.facts, nodes.isFresh(node) || node.isDetached || staged {
      // Fresh facts: the kernel may keep them for what is left of the TTL since they were fetched.
      let left =
        nodes.isFresh(node) && !node.isDetached && !staged
        ? max(configuration.metadataTTL - max(clock() - node.fetchedAt, 0), 0) : configuration.metadataTTL
      return (attributes(inode: inode, kind: node.kind, facts: facts), left)
    }
    let metadata = try await nodes.fetchMetadata(node.key)
    // A file became a link or a link a file: this inode shows what it was
    // until the kernel looks the name up again (and gets a new inode).
    let facts =
      Node.Kind(object: metadata) == node.kind ? FileFacts(metadata) : node.facts ?? FileFacts(metadata)
    return (attributes(inode: inode, kind: node.kind, facts: facts), configuration.metadataTTL)
  }
}

import FUSE
import ObjectStore

/// What stat and lookup answer: a node's facts (or its staged view) as
/// attributes, with the time the kernel may keep them
/// (docs/SEMANTICS.md#attributes).
struct AttributeBuilder: MountComponent, Sendable {
  let context: MountContext
  /// The node, full metadata and staged file of each inode.
  let inodes: KnownInodes
  /// Kept flat listings show a directory's placeholder (or its absence).
  let directoryCache: DirectoryCache
  let mountTime: Timestamp

  /// The kernel may keep it for the TTL counted from when the service answered.
  func entry(inode: UInt64, kind: Node.Kind, facts: FileFacts?, answeredAt: Double? = nil) -> Entry {
    let age = answeredAt.map { max(clock() - $0, 0) } ?? 0
    let timeout = max(configuration.metadataTTL - age, 0)
    // A directory whose placeholder is not known yet: the kernel's next stat
    // asks getattr, which reads it.
    let unknown =
      kind == .directory && facts == nil && configuration.posixAttributes && !isRootOfBucket(inode)
    return Entry(
      attributes: attributes(inode: inode, kind: kind, facts: facts), entryTimeout: timeout,
      attributeTimeout: unknown ? 0 : timeout)
  }

  /// What a readdir entry the kernel will not hold shows: its number and
  /// type, all a dirent carries (a plain readdir's, and a readdirplus
  /// entry with node id 0, whose attributes the kernel drops). So a listing
  /// of names nobody stats parses none of their facts.
  func dirent(inode: UInt64, kind: Node.Kind, metadata: ObjectMetadata?) -> Entry {
    let type: FileAttributes.Kind
    switch kind {
    case .directory: type = .directory
    case .symlink: type = .symlink
    case .file:
      let stored = configuration.posixAttributes ? metadata.flatMap { StoredPosix.mode($0.custom) } : nil
      type = stored.flatMap(FileAttributes.Kind.init(special:)) ?? .file
    }
    let attributes = FileAttributes(
      inode: inode, kind: type, size: 0, permissions: 0, uid: configuration.uid, gid: configuration.gid,
      accessTime: mountTime, modificationTime: mountTime, changeTime: mountTime)
    return Entry(attributes: attributes, entryTimeout: 0, attributeTimeout: 0)
  }

  /// A directory's entry: its placeholder's stored attributes when known;
  /// when not, the defaults with no attribute timeout, so the kernel's
  /// next stat asks ``getattr(inode:)``, which reads the placeholder.
  func directory(_ inode: UInt64) -> Entry {
    entry(inode: inode, kind: .directory, facts: inodes.facts(of: inode))
  }

  /// The bucket's root has no placeholder to store attributes on.
  func isRootOfBucket(_ inode: UInt64) -> Bool {
    inode == InodeTable.rootInode && configuration.rootPrefix.isEmpty
  }

  /// Counts a lookup of an object (a file or a link) and answers with the
  /// newest facts known of it.
  func object(_ key: String, _ metadata: ObjectMetadata, at answeredAt: Double) -> Entry {
    let shown = inodes.nodes.shown(key, kind: Node.Kind(object: metadata), metadata: metadata, at: answeredAt)
    return entry(
      inode: shown.inode, kind: shown.kind, facts: shown.facts ?? FileFacts(metadata), answeredAt: answeredAt)
  }

  /// `facts` of a directory are its placeholder's, if known.
  func attributes(inode: UInt64, kind: Node.Kind, facts: FileFacts?) -> FileAttributes {
    if kind == .symlink, let facts { return link(inode: inode, facts: facts) }
    let posix = configuration.posixAttributes ? facts : nil
    guard kind == .file, let facts else {
      // A placeholder's times are the directory's when it stores some.
      let modified = posix.flatMap { $0.modified } ?? mountTime
      return FileAttributes(
        inode: inode, kind: .directory, size: 0,
        permissions: posix?.mode.map { $0 & 0o7777 } ?? configuration.directoryMode,
        uid: posix?.uid ?? configuration.uid, gid: posix?.gid ?? configuration.gid,
        accessTime: posix?.accessed ?? modified, modificationTime: modified,
        changeTime: max(posix?.changed ?? modified, modified))
    }
    var modified = facts.modified ?? facts.created ?? mountTime
    var size = facts.size
    var stored = posix.map { StoredPosix(mode: $0.mode, uid: $0.uid, gid: $0.gid) }
    if let staged = inodes.stagedView(of: inode) {
      size = staged.size
      modified = staged.modified ?? modified
      if configuration.posixAttributes, let pending = staged.posix { stored = pending }
    }
    let changed = max(facts.changed ?? modified, modified)
    let special = stored?.mode.flatMap(FileAttributes.Kind.init(special:))
    return FileAttributes(
      inode: inode, kind: special ?? .file, size: special == nil ? size : 0,
      permissions: stored?.mode.map { $0 & 0o7777 } ?? configuration.fileMode,
      uid: stored?.uid ?? configuration.uid, gid: stored?.gid ?? configuration.gid,
      accessTime: posix?.accessed ?? modified, modificationTime: modified, changeTime: changed,
      device: special == .characterDevice || special == .blockDevice ? facts.device : 0)
  }

  /// A link shows its target's length as its size and mode 0777, as links
  /// do on Linux (the kernel never checks a link's own permissions).
  private func link(inode: UInt64, facts: FileFacts) -> FileAttributes {
    let modified = facts.modified ?? facts.created ?? mountTime
    return FileAttributes(
      inode: inode, kind: .symlink, size: facts.size, permissions: 0o777,
      uid: (configuration.posixAttributes ? facts.uid : nil) ?? configuration.uid,
      gid: (configuration.posixAttributes ? facts.gid : nil) ?? configuration.gid,
      accessTime: modified, modificationTime: modified,
      changeTime: max(facts.changed ?? modified, modified))
  }

  /// An entry for a key the kernel already holds with fresh metadata; counts the lookup.
  func cached(_ key: String) -> Entry? {
    guard let (inode, node) = inodes.nodes.retain(ifFresh: key) else { return nil }
    return entry(inode: inode, kind: node.kind, facts: node.facts, answeredAt: node.fetchedAt)
  }

  /// An entry for a staged file the kernel holds, so a lookup of a file
  /// not yet uploaded finds it; counts the lookup.
  func staged(key: String) -> Entry? {
    guard let staged = inodes.stagedFile(named: key), !staged.isUnlinked else { return nil }
    inodes.nodes.retain(staged.inode)
    return self.staged(staged.inode)
  }

  func staged(_ inode: UInt64) -> Entry {
    entry(
      inode: inode, kind: .file,
      facts: inodes.facts(of: inode) ?? FileFacts(Staging.placeholder(key: "", bucket: "")))
  }

  func getattr(inode: UInt64) async throws -> (FileAttributes, timeout: Double) {
    let node = try inodes.node(inode)
    if node.kind == .directory { return try await directoryAttributes(inode: inode, node: node) }
    // An unlinked or replaced file held open: its name now means something else.
    let staged = inodes.stagedFile(inode) != nil
    if let facts = node.facts, inodes.nodes.isFresh(node) || node.isDetached || staged {
      // Fresh facts: the kernel may keep them for what is left of the TTL since they were fetched.
      let left =
        inodes.nodes.isFresh(node) && !node.isDetached && !staged
        ? max(configuration.metadataTTL - max(clock() - node.fetchedAt, 0), 0) : configuration.metadataTTL
      return (attributes(inode: inode, kind: node.kind, facts: facts), left)
    }
    // Gone: ESTALE, so stat, and an open whose permission check asks for the
    // attributes, look the name up again (docs/SEMANTICS.md#errors-table).
    let metadata = try await inodes.metadata.fetch(node.key, context: .inode)
    // A file became a link or a link a file: this inode shows what it was
    // until the kernel looks the name up again (and gets a new inode).
    let facts =
      Node.Kind(object: metadata) == node.kind ? FileFacts(metadata) : node.facts ?? FileFacts(metadata)
    return (attributes(inode: inode, kind: node.kind, facts: facts), configuration.metadataTTL)
  }

  /// A directory shows its placeholder's stored mode and owner: known from
  /// mkdir, a chmod or a lookup's listing, else read now (one GET, answered
  /// 404 when it has none), then kept for the TTL.
  private func directoryAttributes(inode: UInt64, node: Node) async throws -> (
    FileAttributes, timeout: Double
  ) {
    guard configuration.posixAttributes, !isRootOfBucket(inode) else {
      return (attributes(inode: inode, kind: .directory, facts: nil), configuration.metadataTTL)
    }
    if let facts = node.facts, inodes.nodes.isFresh(node) {
      let left = max(configuration.metadataTTL - max(clock() - node.fetchedAt, 0), 0)
      return (attributes(inode: inode, kind: .directory, facts: facts), left)
    }
    let placeholder: ObjectMetadata?
    if let listed = listedPlaceholder(of: node.key) {
      placeholder = listed.metadata.flatMap { $0.generation == 0 ? nil : $0 }
    } else {
      placeholder = try await inodes.metadata.fetchIfPresent(node.key)
    }
    let facts = inodes.nodes.remember(placeholder: placeholder, of: inode, at: clock())
    return (attributes(inode: inode, kind: .directory, facts: facts), configuration.metadataTTL)
  }

  /// A walk's kept listing of the directory's parent, if it lists the
  /// directory: its entry carries the placeholder, or one of generation 0
  /// when it has none (TreeListing.swift).
  private func listedPlaceholder(of key: String) -> ListedEntry? {
    let trimmed = key.dropLast()
    guard let slash = trimmed.lastIndex(of: "/") else {
      return listed(String(trimmed), in: "")
    }
    return listed(String(trimmed[trimmed.index(after: slash)...]), in: String(trimmed[...slash]))
  }

  private func listed(_ name: String, in parent: String) -> ListedEntry? {
    guard case .listed(let entry)? = directoryCache.known(name, in: parent), entry.kind == .directory,
      entry.metadata != nil
    else { return nil }
    return entry
  }
}

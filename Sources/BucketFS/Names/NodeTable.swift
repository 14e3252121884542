import FUSE
import ObjectStore
import Synchronization

/// The nodes the kernel holds and what is known of their objects: the one
/// owner of the ``InodeTable``, and the metadata fetches that refresh it.
final class NodeTable: Sendable {
  private let table: Mutex<InodeTable>
  private let store: any ObjectStore
  private let diagnostics: Diagnostics
  private let clock: @Sendable () -> Double
  /// `--metadata-ttl`: how long fetched facts answer without asking again.
  let ttl: Double

  init(context: MountContext) {
    let configuration = context.configuration
    self.table = Mutex(
      InodeTable(rootKey: configuration.rootPrefix, metadataCapacity: configuration.metadataCacheEntries))
    self.store = context.store
    self.diagnostics = context.diagnostics
    self.clock = context.clock
    self.ttl = configuration.metadataTTL
  }

  private func withLock<T>(_ body: (inout InodeTable) throws -> T) rethrows -> T {
    try table.withLock { table in try body(&table) }
  }

  func node(_ inode: UInt64, kind: Node.Kind? = nil) throws -> Node {
    guard let node = withLock({ $0[inode] }) else { throw Errno.stale }
    if let kind, node.kind != kind {
      throw kind == .directory
        ? Errno.notDirectory : node.kind == .directory ? Errno.isDirectory : Errno.invalid
    }
    return node
  }

  func isFresh(_ node: Node) -> Bool {
    clock() - node.fetchedAt < ttl
  }

  /// The node's metadata if fetched within the TTL, else fetched now.
  func currentMetadata(of node: Node, context: ErrorMapping.Context = .metadata) async throws
    -> ObjectMetadata
  {
    if isFresh(node), let metadata = withLock({ $0.metadata[node.key] }) { return metadata }
    return try await fetchMetadata(node.key, context: context)
  }

  func fetchMetadata(_ key: String, context: ErrorMapping.Context = .metadata) async throws -> ObjectMetadata
  {
    do {
      let metadata = try await store.metadata(of: key)
      // A PATCH may have answered with newer metadata while this GET was under way.
      return remember(metadata)
    } catch {
      throw diagnostics.failure(error, operation: "get metadata", key: key, context: context)
    }
  }

  func optionalMetadata(_ key: String) async throws -> ObjectMetadata? {
    do {
      return try await store.metadata(of: key)
    } catch StorageError.notFound {
      return nil
    } catch {
      throw diagnostics.failure(error, operation: "get metadata", key: key)
    }
  }

  /// Takes what the service answered now; returns the newest known version.
  @discardableResult
  func remember(_ metadata: ObjectMetadata) -> ObjectMetadata {
    let now = clock()
    return withLock { $0.refresh(metadata, at: now) }
  }

  /// Counts a lookup of directory `key`, answered at `at`, with its
  /// placeholder when the answer showed it (its stored mode and owner).
  func rememberDirectory(_ key: String, at now: Double, placeholder: ObjectMetadata? = nil) -> UInt64 {
    withLock { table in
      let inode = table.remember(key: key, kind: .directory, metadata: nil, at: now)
      if let placeholder, Names.same(placeholder.name, key) { table[inode]?.facts = FileFacts(placeholder) }
      return inode
    }
  }

  /// What a directory's placeholder (nil: it has none) says, kept on its
  /// node; returns the facts stat shows.
  @discardableResult
  func notePlaceholder(inode: UInt64, _ placeholder: ObjectMetadata?, at now: Double) -> FileFacts {
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

  /// Counts a lookup of an object (a file or a link); returns its inode,
  /// kind and the newest facts known of it.
  func rememberObject(_ key: String, _ metadata: ObjectMetadata, at now: Double) -> (
    inode: UInt64, kind: Node.Kind, facts: FileFacts
  ) {
    let kind = Node.Kind(object: metadata)
    return withLock { table in
      let inode = table.remember(key: key, kind: kind, metadata: metadata, at: now)
      return (inode, table[inode]?.kind ?? kind, table[inode]?.facts ?? FileFacts(metadata))
    }
  }

  func forget(inode: UInt64, count: UInt64) {
    withLock { $0.forget(inode, count: count) }
  }

  /// The bucket no longer has `key`: its node (if held) stops answering for it.
  func forgetKey(_ key: String) {
    withLock { table in
      if let inode = table.inode(of: key) { table.detach(inode) }
      table.removeMetadata(of: key)
    }
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

  /// A node the kernel holds, with its full metadata if cached and fresh.
  func metadataInline(_ inode: UInt64) -> (Node, ObjectMetadata?)? {
    let now = clock()
    return withLock { table in
      guard let node = table[inode] else { return nil }
      return (node, now - node.fetchedAt < ttl ? table.metadata[node.key] : nil)
    }
  }

  // MARK: - What the kernel holds

  /// The inode `key` has now, if the kernel holds it.
  func inode(of key: String) -> UInt64? {
    withLock { $0.inode(of: key) }
  }

  /// The inodes of those of `keys` the kernel holds, in their order.
  func inodes(of keys: [String]) -> [UInt64] {
    withLock { table in keys.compactMap { table.inode(of: $0) } }
  }

  func key(of inode: UInt64) -> String? {
    withLock { $0[inode]?.key }
  }

  /// What stat shows of a held node, whatever its age.
  func facts(of inode: UInt64) -> FileFacts? {
    withLock { $0[inode]?.facts }
  }

  /// The full metadata kept of `key`, whatever its age.
  func cachedMetadata(of key: String) -> ObjectMetadata? {
    withLock { $0.metadata[key] }
  }

  /// Held nodes whose key starts with `prefix` (a directory's descendants).
  func held(under prefix: String) -> [(inode: UInt64, node: Node)] {
    withLock { $0.inodes(under: prefix) }
  }

  /// The version of a held file the mount showed (its facts' generation),
  /// and its full metadata when that is what is kept.
  func shownVersion(inode: UInt64, key: String) -> (generation: Int64?, metadata: ObjectMetadata?) {
    withLock { table in
      let generation = table[inode]?.facts?.generation
      return (generation, table.metadata[key].flatMap { $0.generation == generation ? $0 : nil })
    }
  }

  /// Inodes the kernel holds (for tests).
  var count: Int { withLock { $0.count } }

  /// The kernel's references to `inode`; nil when it holds none (for tests).
  func lookups(of inode: UInt64) -> UInt64? {
    withLock { $0[inode]?.lookups }
  }

  /// The full-metadata cache's places in its order, entries and capacity (for tests).
  var metadataCacheUsage: (places: Int, entries: Int, capacity: Int) {
    withLock { ($0.metadata.orderCount, $0.metadata.count, $0.metadata.capacity) }
  }

  // MARK: - Kernel references

  /// One more kernel reference to a node it holds (a lookup answered from
  /// what is known, or a readdirplus entry); nothing if it holds none.
  func retain(_ inode: UInt64) {
    withLock { $0[inode]?.lookups += 1 }
  }

  /// The node of `key` if held with facts fetched within the TTL, counting
  /// the lookup it answers.
  func retainFresh(_ key: String) -> (inode: UInt64, node: Node)? {
    let now = clock()
    return withLock { table in
      guard let inode = table.inode(of: key), var node = table[inode], now - node.fetchedAt < ttl else {
        return nil
      }
      node.lookups += 1
      table[inode] = node
      return (inode, node)
    }
  }

  /// What a listing shows of `key`, answered at `now`. With `counting`
  /// (readdirplus) it is a kernel reference to the name's node, made if
  /// needed; without, it only refreshes a held node. Returns the inode and
  /// the kind and facts to show: the held node's when newer than the page's.
  func listed(
    _ key: String, kind: Node.Kind, metadata: ObjectMetadata?, facts: FileFacts?, at now: Double,
    counting: Bool
  ) -> (inode: UInt64, kind: Node.Kind, facts: FileFacts?) {
    withLock { table in
      if counting {
        let inode = table.remember(key: key, kind: kind, metadata: metadata, facts: facts, at: now)
        return (inode, table[inode]?.kind ?? kind, table[inode]?.facts ?? facts)
      }
      if let metadata { table.refresh(metadata, at: now) }
      return (table.expectedInode(of: key), kind, facts)
    }
  }

  // MARK: - Changes this mount made or saw

  /// Unhooks `inode` from its name (unlinked or replaced while the kernel
  /// holds it): the name's next object gets a node of its own.
  func detach(_ inode: UInt64) {
    withLock { $0.detach(inode) }
  }

  /// This mount deleted `key`; `inode` is the node that showed it, if held.
  func deleted(_ key: String, inode: UInt64?) {
    withLock { table in
      if let inode { table.detach(inode) }
      table.removeMetadata(of: key)
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

  /// An open of `inode` showing `generation`; whether the kernel may keep
  /// its cached pages (the last open showed the same generation).
  func recordOpen(_ inode: UInt64, generation: Int64) -> Bool {
    withLock { table in
      defer { table[inode]?.openedGeneration = generation }
      return table[inode]?.openedGeneration == generation
    }
  }

  /// The staged file `inode` was stored as `uploaded`: the kernel's pages
  /// are those bytes, so its next open keeps them.
  func recordUpload(_ uploaded: ObjectMetadata, inode: UInt64, at now: Double) {
    withLock { table in
      table.refresh(uploaded, at: now)
      if table.inode(of: uploaded.name) == inode { table[inode]?.openedGeneration = uploaded.generation }
    }
  }

  /// What stat knows of `inode` must come from the bucket again.
  func expire(_ inode: UInt64) {
    withLock { $0[inode]?.fetchedAt = -.infinity }
  }

  /// The version the mount showed of file `key` is gone: its facts are
  /// fetched again, and its next open drops the kernel's pages.
  func versionGone(_ key: String) {
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
  func movedFile(_ inode: UInt64?, from: String, to moved: ObjectMetadata, sameBytesAs generation: Int64) {
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
      // mount still holds had vanished with its last object.
      if let vanished = table.inode(of: moved.name + "/") { table.detach(vanished) }
      table.removeMetadata(of: from)
      table.refresh(moved, at: now)
    }
  }

  /// Directory `from` moved to `to` with the objects `moved`: every held
  /// node under it (and its own) takes the new name. Returns the held files
  /// among them, with their new names and generations.
  func movedDirectory(from: String, to: String, moved: [ObjectMetadata]) -> [(
    inode: UInt64, key: String, generation: Int64
  )] {
    let now = clock()
    return withLock { table in
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

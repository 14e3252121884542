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

  init(
    configuration: Configuration, store: any ObjectStore, diagnostics: Diagnostics,
    clock: @escaping @Sendable () -> Double
  ) {
    self.table = Mutex(
      InodeTable(rootKey: configuration.rootPrefix, metadataCapacity: configuration.metadataCacheEntries))
    self.store = store
    self.diagnostics = diagnostics
    self.clock = clock
    self.ttl = configuration.metadataTTL
  }

  func withLock<T>(_ body: (inout InodeTable) throws -> T) rethrows -> T {
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
}

import FUSE
import Logging
import NIOCore
import ObjectStore
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// The filesystem: a bucket (or a sub-tree of one) as directories and files,
/// with object metadata as extended attributes.
public final class BucketFileSystem: FileSystem, Sendable {
  let store: any ObjectStore
  let configuration: Configuration
  let logger: Logger
  private let mountTime = Timestamp.now()
  private let clock: @Sendable () -> Double
  private let onMounted: @Sendable () -> Void

  private struct State {
    var inodes: InodeTable
    var directories: [UInt64: DirectoryStream] = [:]
    var files: [UInt64: FileReader] = [:]
    var nextHandle: UInt64 = 1
    /// Keys already warned about (conflicts, access denied), bounded.
    var warned: Set<String> = []
    /// Lookups under way per directory key, and the listing a burst of them shares.
    var bursts: [String: LookupBurst] = [:]
  }
  private struct LookupBurst {
    var inFlight = 0
    var page: Task<ListPage, any Error>?
  }
  /// A lookup that finds this many others under way in its directory joins
  /// one shared list call instead of making two requests of its own: fifty
  /// parallel `stat`s of cold files then cost about one request's time.
  static let burstSize = 3
  private let state: Mutex<State>

  public init(
    store: any ObjectStore, configuration: Configuration, logger: Logger,
    clock: @escaping @Sendable () -> Double = BucketFileSystem.monotonicSeconds,
    onMounted: @escaping @Sendable () -> Void = {}
  ) {
    self.store = store
    self.configuration = configuration
    self.logger = logger
    self.clock = clock
    self.onMounted = onMounted
    self.state = Mutex(
      State(
        inodes: InodeTable(
          rootKey: configuration.rootPrefix, metadataCapacity: configuration.metadataCacheEntries)))
  }

  public static func monotonicSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
  }

  public func mounted() { onMounted() }

  // MARK: - Names and attributes

  public func lookup(parent: UInt64, name: String) async throws -> Entry {
    guard name.utf8.count <= 255 else { throw Errno.nameTooLong }
    guard Names.isValidComponent(name) else { throw Errno.noEntry }
    let parentKey = try node(parent, kind: .directory).key
    let fileKey = parentKey + name
    let directoryKey = fileKey + "/"
    if let entry = cachedEntry(directoryKey) ?? cachedEntry(fileKey) { return entry }

    let shared = joinBurst(parentKey)
    defer { leaveBurst(parentKey) }
    if let shared, let page = try? await shared.value,
      let entry = resolve(fileKey: fileKey, directoryKey: directoryKey, from: page)
    {
      return entry
    }

    // Not known yet: ask for the object and for anything under the prefix at once.
    async let object = optionalMetadata(fileKey)
    async let children = store.list(prefix: directoryKey, delimiter: "/", pageSize: 1, pageToken: nil)
    let isDirectory: Bool
    do {
      let page = try await children
      isDirectory = !page.items.isEmpty || !page.prefixes.isEmpty
    } catch {
      throw failure(error, operation: "list", key: directoryKey)
    }
    let metadata = try await object
    let now = clock()
    if isDirectory {
      if metadata != nil { warnConflict(fileKey) }
      let inode = state.withLock {
        $0.inodes.remember(key: directoryKey, kind: .directory, metadata: nil, at: now)
      }
      return entry(inode: inode, kind: .directory, facts: nil)
    }
    guard let metadata else { return .negative(timeout: configuration.negativeTTL) }
    let inode = state.withLock { $0.inodes.remember(key: fileKey, kind: .file, metadata: metadata, at: now) }
    return entry(inode: inode, kind: .file, facts: FileFacts(metadata))
  }

  private func joinBurst(_ parentKey: String) -> Task<ListPage, any Error>? {
    state.withLock { state in
      var burst = state.bursts[parentKey, default: LookupBurst()]
      burst.inFlight += 1
      if burst.page == nil, burst.inFlight >= Self.burstSize {
        let (store, pageSize) = (self.store, configuration.pageSize)
        burst.page = Task {
          try await store.list(prefix: parentKey, delimiter: "/", pageSize: pageSize, pageToken: nil)
        }
      }
      state.bursts[parentKey] = burst
      return burst.page
    }
  }

  private func leaveBurst(_ parentKey: String) {
    state.withLock { state in
      guard var burst = state.bursts[parentKey] else { return }
      burst.inFlight -= 1
      state.bursts[parentKey] = burst.inFlight > 0 ? burst : nil
    }
  }

  /// The answer to a lookup from the first page of its directory's listing,
  /// when that page is enough to tell; nil when the name may be further on.
  private func resolve(fileKey: String, directoryKey: String, from page: ListPage) -> Entry? {
    if page.nextPageToken != nil {
      let last = [page.items.last?.name, page.prefixes.last].compactMap { $0 }.max(by: Names.precedes)
      guard let last, Names.precedes(directoryKey, last) else { return nil }
    }
    let now = clock()
    let metadata = page.items.first { $0.name == fileKey }
    if page.prefixes.contains(directoryKey) {
      if metadata != nil { warnConflict(fileKey) }
      let inode = state.withLock {
        $0.inodes.remember(key: directoryKey, kind: .directory, metadata: nil, at: now)
      }
      return entry(inode: inode, kind: .directory, facts: nil)
    }
    guard let metadata else { return .negative(timeout: configuration.negativeTTL) }
    let inode = state.withLock { $0.inodes.remember(key: fileKey, kind: .file, metadata: metadata, at: now) }
    return entry(inode: inode, kind: .file, facts: FileFacts(metadata))
  }

  public func forget(inode: UInt64, count: UInt64) {
    state.withLock { $0.inodes.forget(inode, count: count) }
  }

  public func getattr(inode: UInt64) async throws -> (FileAttributes, timeout: Double) {
    let node = try node(inode)
    if node.kind == .directory {
      return (attributes(inode: inode, kind: .directory, facts: nil), configuration.metadataTTL)
    }
    if let facts = node.facts, isFresh(node) {
      return (attributes(inode: inode, kind: .file, facts: facts), configuration.metadataTTL)
    }
    let metadata = try await fetchMetadata(node.key)
    return (attributes(inode: inode, kind: .file, facts: FileFacts(metadata)), configuration.metadataTTL)
  }

  /// An entry for a key the kernel already holds with fresh metadata; counts the lookup.
  private func cachedEntry(_ key: String) -> Entry? {
    let now = clock()
    let ttl = configuration.metadataTTL
    let found: (UInt64, Node)? = state.withLock { state in
      guard let inode = state.inodes.inode(of: key), var node = state.inodes[inode],
        now - node.fetchedAt < ttl
      else { return nil }
      node.lookups += 1
      state.inodes[inode] = node
      return (inode, node)
    }
    guard let (inode, node) = found else { return nil }
    return entry(inode: inode, kind: node.kind, facts: node.facts)
  }

  private func entry(inode: UInt64, kind: Node.Kind, facts: FileFacts?) -> Entry {
    Entry(
      attributes: attributes(inode: inode, kind: kind, facts: facts),
      entryTimeout: configuration.metadataTTL, attributeTimeout: configuration.metadataTTL)
  }

  /// SPEC §3.
  func attributes(inode: UInt64, kind: Node.Kind, facts: FileFacts?) -> FileAttributes {
    guard kind == .file, let facts else {
      return FileAttributes(
        inode: inode, kind: .directory, size: 0, permissions: configuration.directoryMode,
        uid: configuration.uid, gid: configuration.gid, accessTime: mountTime, modificationTime: mountTime,
        changeTime: mountTime)
    }
    let modified = facts.modified ?? facts.created ?? mountTime
    let changed = facts.changed ?? modified
    return FileAttributes(
      inode: inode, kind: .file, size: facts.size, permissions: configuration.fileMode,
      uid: configuration.uid, gid: configuration.gid, accessTime: modified, modificationTime: modified,
      changeTime: changed)
  }

  // MARK: - Directories

  public func opendir(inode: UInt64) async throws -> UInt64 {
    let key = try node(inode, kind: .directory).key
    let stream = DirectoryStream(
      prefix: key, store: store, pageSize: configuration.pageSize,
      onConflict: { [weak self] in self?.warnConflict($0) })
    return state.withLock { state in
      let handle = state.nextHandle
      state.nextHandle += 1
      state.directories[handle] = stream
      return handle
    }
  }

  public func readdir(inode: UInt64, handle: UInt64, offset: UInt64, into buffer: DirectoryBuffer)
    async throws
  {
    guard let stream = state.withLock({ $0.directories[handle] }) else { throw Errno.badHandle }
    logger.trace("readdir \(stream.prefix) handle \(handle) offset \(offset)")
    if offset == 0 { await stream.rewind() }
    let own = attributes(inode: inode, kind: .directory, facts: nil)
    let dot = Entry(attributes: own, entryTimeout: 0, attributeTimeout: 0)
    if offset == 0, !buffer.add(name: ".", entry: dot, nextOffset: 1) { return }
    if offset <= 1, !buffer.add(name: "..", entry: dot, nextOffset: 2) { return }
    var index = Int(max(offset, 2) - 2)
    var added = false
    while true {
      let batch: ArraySlice<ListedEntry>
      do {
        // Once some entries are packed, send them rather than wait for a page.
        batch = try await stream.entries(from: index, fetch: !added)
      } catch {
        let errno = failure(error, operation: "list", key: stream.prefix)
        // Entries already packed are worth sending; the next call retries.
        if added { return }
        throw errno
      }
      if batch.isEmpty { return }
      let now = clock()
      for listed in batch {
        let facts = listed.metadata.map(FileFacts.init)
        let inode: UInt64 = state.withLock { state in
          if buffer.isPlus {
            return state.inodes.remember(
              key: listed.key, kind: listed.kind, metadata: listed.metadata, facts: facts, at: now)
          }
          if let metadata = listed.metadata { state.inodes.refresh(metadata, at: now) }
          return state.inodes.inode(of: listed.key) ?? InodeTable.hash(listed.key)
        }
        let next = UInt64(index + 3)
        guard
          buffer.add(
            name: listed.name, entry: entry(inode: inode, kind: listed.kind, facts: facts),
            nextOffset: next)
        else {
          if buffer.isPlus { forget(inode: inode, count: 1) }
          return
        }
        added = true
        index += 1
      }
    }
  }

  public func releasedir(inode: UInt64, handle: UInt64) {
    _ = state.withLock { $0.directories.removeValue(forKey: handle) }
  }

  // MARK: - Files

  public func open(inode: UInt64, flags: Int32) async throws -> OpenResult {
    if flags & O_ACCMODE != O_RDONLY || flags & O_TRUNC != 0 { throw Errno.readOnly }
    let node = try node(inode)
    guard node.kind == .file else { throw Errno.isDirectory }
    let facts: FileFacts
    if let known = node.facts, isFresh(node) {
      facts = known
    } else {
      facts = FileFacts(try await fetchMetadata(node.key))
    }
    let reader = FileReader(
      key: node.key, generation: facts.generation, size: facts.size, store: store,
      maxSegment: configuration.readAheadMaxChunk, maxAhead: configuration.readAheadMaxBytes)
    return state.withLock { state in
      let keepCache = state.inodes[inode]?.openedGeneration == facts.generation
      state.inodes[inode]?.openedGeneration = facts.generation
      let handle = state.nextHandle
      state.nextHandle += 1
      state.files[handle] = reader
      return OpenResult(handle: handle, keepCache: keepCache)
    }
  }

  public func readAtHand(inode: UInt64, handle: UInt64, offset: UInt64, size: Int) -> [ByteBuffer]? {
    state.withLock({ $0.files[handle] })?.atHand(offset: offset, count: size)
  }

  public func read(inode: UInt64, handle: UInt64, offset: UInt64, size: Int) async throws -> [ByteBuffer] {
    guard let reader = state.withLock({ $0.files[handle] }) else { throw Errno.badHandle }
    do {
      return try await reader.read(offset: offset, count: size)
    } catch {
      throw failure(error, operation: "read", key: reader.key, context: .read)
    }
  }

  public func release(inode: UInt64, handle: UInt64) {
    _ = state.withLock { $0.files.removeValue(forKey: handle) }
  }

  // MARK: - Extended attributes (SPEC §4)

  public func getxattr(inode: UInt64, name: String) async throws -> [UInt8] {
    if let answer = getxattrAtHand(inode: inode, name: name) { return try answer.get() }
    guard let property = XattrName(name) else { throw Errno.notSupported }
    let node = try node(inode)
    guard node.kind == .file else { throw Errno.noData }
    let metadata = try await currentMetadata(inode: inode, node: node)
    guard let value = property.value(in: metadata) else { throw Errno.noData }
    return Array(value.utf8)
  }

  public func listxattr(inode: UInt64) async throws -> [String] {
    if let answer = listxattrAtHand(inode: inode) { return try answer.get() }
    let node = try node(inode)
    guard node.kind == .file else { return [] }
    return XattrName.names(of: try await currentMetadata(inode: inode, node: node))
  }

  public func getxattrAtHand(inode: UInt64, name: String) -> Result<[UInt8], Errno>? {
    guard let property = XattrName(name) else { return .failure(.notSupported) }
    guard let (node, metadata) = metadataAtHand(inode) else { return nil }
    guard node.kind == .file else { return .failure(.noData) }
    guard let metadata, let value = property.value(in: metadata) else {
      return metadata == nil ? nil : .failure(.noData)
    }
    return .success(Array(value.utf8))
  }

  public func listxattrAtHand(inode: UInt64) -> Result<[String], Errno>? {
    guard let (node, metadata) = metadataAtHand(inode) else { return nil }
    guard node.kind == .file else { return .success([]) }
    return metadata.map { .success(XattrName.names(of: $0)) }
  }

  /// A node the kernel holds, with its full metadata if cached and fresh.
  private func metadataAtHand(_ inode: UInt64) -> (Node, ObjectMetadata?)? {
    let now = clock()
    let ttl = configuration.metadataTTL
    return state.withLock { state in
      guard let node = state.inodes[inode] else { return nil }
      return (node, now - node.fetchedAt < ttl ? state.inodes.metadata[node.key] : nil)
    }
  }

  public func setxattr(inode: UInt64, name: String, value: [UInt8], flags: XattrFlags) async throws {
    let (property, node) = try writableProperty(inode: inode, name: name)
    guard let text = String(validating: value, as: UTF8.self) else { throw Errno.invalid }
    if case .custom = property, text.utf8.count > MetadataLimits.maxValueBytes { throw Errno.tooBig }
    try await update(property, to: text, flags: flags, inode: inode, node: node)
  }

  public func removexattr(inode: UInt64, name: String) async throws {
    let (property, node) = try writableProperty(inode: inode, name: name)
    try await update(property, to: nil, flags: .replace, inode: inode, node: node)
  }

  /// The checks that need no network, in the order SPEC §4 gives them.
  private func writableProperty(inode: UInt64, name: String) throws -> (XattrName, Node) {
    guard let property = XattrName(name) else { throw Errno.notSupported }
    if configuration.readOnly { throw Errno.readOnly }
    let node = try node(inode)
    guard node.kind == .file, property.isWritable else { throw Errno.notPermitted }
    return (property, node)
  }

  /// Decides against the metadata at hand and patches only if the object still
  /// has that metageneration; when it changed meanwhile, reads it again and
  /// decides again.
  private func update(
    _ property: XattrName, to value: String?, flags: XattrFlags, inode: UInt64, node: Node
  ) async throws {
    var metadata = try await currentMetadata(inode: inode, node: node)
    let patch = property.patch(value)
    for _ in 0..<5 {
      let exists = property.value(in: metadata) != nil
      if flags.contains(.create) && exists { throw Errno.exists }
      if flags.contains(.replace) && !exists { throw Errno.noData }
      var proposed = metadata
      patch.apply(to: &proposed)
      guard MetadataLimits.fits(proposed.custom) else { throw Errno.tooBig }
      do {
        let updated = try await store.patch(node.key, patch, ifMetagenerationMatch: metadata.metageneration)
        let now = clock()
        state.withLock { $0.inodes.refresh(updated, at: now) }
        return
      } catch StorageError.preconditionFailed {
        logger.debug("metadata of \(node.key) changed meanwhile; deciding again")
        metadata = try await fetchMetadata(node.key)
      } catch {
        throw failure(error, operation: "patch", key: node.key)
      }
    }
    logger.warning("metadata of \(node.key) keeps changing; giving up this update")
    throw Errno(EAGAIN)
  }

  // MARK: - Metadata cache

  private func node(_ inode: UInt64, kind: Node.Kind? = nil) throws -> Node {
    guard let node = state.withLock({ $0.inodes[inode] }) else { throw Errno.stale }
    if let kind, node.kind != kind { throw kind == .directory ? Errno.notDirectory : Errno.isDirectory }
    return node
  }

  /// The node's metadata if fetched within the TTL, else fetched now.
  private func currentMetadata(inode: UInt64, node: Node) async throws -> ObjectMetadata {
    if isFresh(node), let metadata = state.withLock({ $0.inodes.metadata[node.key] }) { return metadata }
    return try await fetchMetadata(node.key)
  }

  private func isFresh(_ node: Node) -> Bool {
    clock() - node.fetchedAt < configuration.metadataTTL
  }

  private func fetchMetadata(_ key: String) async throws -> ObjectMetadata {
    do {
      let metadata = try await store.metadata(of: key)
      let now = clock()
      state.withLock { $0.inodes.refresh(metadata, at: now) }
      return metadata
    } catch {
      throw failure(error, operation: "get metadata", key: key)
    }
  }

  private func optionalMetadata(_ key: String) async throws -> ObjectMetadata? {
    do {
      return try await store.metadata(of: key)
    } catch StorageError.notFound {
      return nil
    } catch {
      throw failure(error, operation: "get metadata", key: key)
    }
  }

  // MARK: - Errors and warnings

  /// Maps a failure to errno, logging what deserves it.
  private func failure(
    _ error: any Error, operation: String, key: String, context: ErrorMapping.Context = .metadata
  ) -> Errno {
    if let storage = error as? StorageError {
      switch storage {
      case .accessDenied(let message):
        if firstWarning("denied:" + key) {
          logger.error("\(operation) \(key): access denied: \(message)")
          if let hint = ErrorMapping.hint(for: storage) { logger.error("\(hint)") }
        }
      case .unavailable, .invalidResponse, .badRequest:
        logger.error("\(operation) \(key): \(storage)")
      default:
        break
      }
    } else if !(error is Errno) && !(error is CancellationError) {
      logger.error("\(operation) \(key): \(error)")
    }
    return ErrorMapping.errno(for: error, context: context)
  }

  func warnConflict(_ fileKey: String) {
    if firstWarning("conflict:" + fileKey) {
      logger.warning(
        "object '\(fileKey)' has the same name as a directory; the directory is shown, the object is left untouched"
      )
    }
  }

  private func firstWarning(_ key: String) -> Bool {
    state.withLock { state in
      if state.warned.count > 10_000 { state.warned.removeAll() }
      return state.warned.insert(key).inserted
    }
  }
}

import FUSE
import ObjectStore

#if canImport(Glibc)
  import Glibc
#endif

/// Lookups (alone or sharing a burst's list call), forget, getattr, and
/// stat facts turned into attributes.
extension BucketFileSystem {
  // MARK: - Names and attributes

  public func lookup(parent: UInt64, name: String) async throws -> Entry {
    guard name.utf8.count <= 255 else { throw Errno.nameTooLong }
    guard Names.isValidComponent(name) else { throw Errno.noEntry }
    let parentKey = try node(parent, kind: .directory).key
    let fileKey = parentKey + name
    let directoryKey = fileKey + "/"
    if let entry = cachedEntry(directoryKey) ?? cachedEntry(fileKey) ?? stagedEntry(key: fileKey) {
      return entry
    }
    if knownAbsent(parentKey, name) { return .negative(timeout: configuration.negativeTTL) }

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
    return rememberFile(fileKey, metadata, at: now)
  }

  /// Counts a lookup of a file and answers with the newest facts known of it.
  func rememberFile(_ key: String, _ metadata: ObjectMetadata, at answeredAt: Double) -> Entry {
    let (inode, facts) = state.withLock { state in
      let inode = state.inodes.remember(key: key, kind: .file, metadata: metadata, at: answeredAt)
      return (inode, state.inodes[inode]?.facts ?? FileFacts(metadata))
    }
    return entry(inode: inode, kind: .file, facts: facts, answeredAt: answeredAt)
  }

  func joinBurst(_ parentKey: String) -> Task<DatedPage, any Error>? {
    let now = clock()
    // A name missing from the page is answered ENOENT: the page may be no
    // older than a negative answer may be remembered.
    let maxAge = min(configuration.metadataTTL, configuration.negativeTTL)
    return state.withLock { state in
      var burst = state.bursts[ObjectKey(parentKey), default: LookupBurst()]
      burst.inFlight += 1
      if burst.page != nil, now - burst.pageAskedAt > maxAge { burst.page = nil }
      if burst.page == nil, burst.inFlight >= Self.burstSize {
        let (store, pageSize, clock) = (self.store, configuration.pageSize, self.clock)
        burst.pageAskedAt = now
        burst.page = Task {
          let page = try await store.list(
            prefix: parentKey, delimiter: "/", pageSize: pageSize, pageToken: nil)
          return DatedPage(page: page, answeredAt: clock())
        }
      }
      state.bursts[ObjectKey(parentKey)] = burst
      return burst.page
    }
  }

  func leaveBurst(_ parentKey: String) {
    state.withLock { state in
      guard var burst = state.bursts[ObjectKey(parentKey)] else { return }
      burst.inFlight -= 1
      state.bursts[ObjectKey(parentKey)] = burst.inFlight > 0 ? burst : nil
    }
  }

  /// The answer to a lookup from the first page of its directory's listing,
  /// when that page is enough to tell; nil when the name may be further on.
  func resolve(fileKey: String, directoryKey: String, from answered: DatedPage) -> Entry? {
    let page = answered.page
    if page.nextPageToken != nil {
      let last = [page.items.last?.name, page.prefixes.last].compactMap { $0 }.max(by: Names.precedes)
      guard let last, Names.precedes(directoryKey, last) else { return nil }
    }
    let now = answered.answeredAt
    let metadata = page.items.first { Names.same($0.name, fileKey) }
    if page.prefixes.contains(where: { Names.same($0, directoryKey) }) {
      if metadata != nil { warnConflict(fileKey) }
      let inode = state.withLock {
        $0.inodes.remember(key: directoryKey, kind: .directory, metadata: nil, at: now)
      }
      return entry(inode: inode, kind: .directory, facts: nil)
    }
    guard let metadata else { return .negative(timeout: configuration.negativeTTL) }
    return rememberFile(fileKey, metadata, at: now)
  }

  public func forget(inode: UInt64, count: UInt64) {
    state.withLock { $0.inodes.forget(inode, count: count) }
  }

  public func getattr(inode: UInt64) async throws -> (FileAttributes, timeout: Double) {
    let node = try node(inode)
    if node.kind == .directory {
      return (attributes(inode: inode, kind: .directory, facts: nil), configuration.metadataTTL)
    }
    // An unlinked or replaced file held open: its name now means something else.
    if let facts = node.facts, isFresh(node) || node.isDetached || stagedView(inode) != nil {
      // Fresh facts: the kernel may keep them for what is left of the TTL since they were fetched.
      let left =
        isFresh(node) && !node.isDetached && stagedView(inode) == nil
        ? max(configuration.metadataTTL - max(clock() - node.fetchedAt, 0), 0) : configuration.metadataTTL
      return (attributes(inode: inode, kind: .file, facts: facts), left)
    }
    let metadata = try await fetchMetadata(node.key)
    return (attributes(inode: inode, kind: .file, facts: FileFacts(metadata)), configuration.metadataTTL)
  }

  /// An entry for a key the kernel already holds with fresh metadata; counts the lookup.
  func cachedEntry(_ key: String) -> Entry? {
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
    return entry(inode: inode, kind: node.kind, facts: node.facts, answeredAt: node.fetchedAt)
  }

  /// The kernel may keep it for the TTL counted from when the service answered.
  func entry(inode: UInt64, kind: Node.Kind, facts: FileFacts?, answeredAt: Double? = nil) -> Entry {
    let age = answeredAt.map { max(clock() - $0, 0) } ?? 0
    let timeout = max(configuration.metadataTTL - age, 0)
    return Entry(
      attributes: attributes(inode: inode, kind: kind, facts: facts), entryTimeout: timeout,
      attributeTimeout: timeout)
  }

  /// docs/SEMANTICS.md#attributes.
  func attributes(inode: UInt64, kind: Node.Kind, facts: FileFacts?) -> FileAttributes {
    guard kind == .file, let facts else {
      return FileAttributes(
        inode: inode, kind: .directory, size: 0, permissions: configuration.directoryMode,
        uid: configuration.uid, gid: configuration.gid, accessTime: mountTime, modificationTime: mountTime,
        changeTime: mountTime)
    }
    var modified = facts.modified ?? facts.created ?? mountTime
    var size = facts.size
    if let staged = stagedView(inode) {
      size = staged.size
      modified = staged.modified ?? modified
    }
    let changed = max(facts.changed ?? modified, modified)
    return FileAttributes(
      inode: inode, kind: .file, size: size, permissions: configuration.fileMode,
      uid: configuration.uid, gid: configuration.gid, accessTime: modified, modificationTime: modified,
      changeTime: changed)
  }
}

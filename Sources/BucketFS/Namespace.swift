import FUSE
import ObjectStore

#if canImport(Glibc)
  import Glibc
#endif

/// unlink, mkdir and rmdir (docs/SEMANTICS.md#tree), and what renames
/// share with them: name checks and what a name holds in the bucket now.
extension BucketFileSystem {
  public func unlink(parent: UInt64, name: String) async throws {
    try checkWritable()
    let parentKey = try node(parent, kind: .directory).key
    guard name.utf8.count <= 255 else { throw Errno.nameTooLong }
    guard Names.isValidComponent(name) else { throw Errno.noEntry }
    let key = parentKey + name
    // Kept tree listings that could show the name go, whatever the outcome.
    defer { walks.invalidateListings(under: key) }
    if unlinkNeverStored(key) { return }
    let (inode, metadata) = try await existingFile(key)
    do {
      try await store.delete(key, ifGenerationMatch: metadata.generation)
    } catch StorageError.notFound {
      forgetKey(key)
      throw Errno.noEntry
    } catch StorageError.preconditionFailed {
      throw await changedMeanwhile(key, operation: "unlink")
    } catch {
      throw failure(error, operation: "delete", key: key)
    }
    state.withLock { state in
      if let inode { state.inodes.detach(inode) }
      state.inodes.removeMetadata(of: key)
    }
    if let inode { stagedFileUnlinked(inode: inode) }
  }

  /// A file this mount created and has not stored yet has no object to
  /// delete: unlinking it drops the name at once, and its handles keep their
  /// bytes but never upload them (a create-then-unlink scratch file).
  private func unlinkNeverStored(_ key: String) -> Bool {
    guard let inode = state.withLock({ $0.inodes.inode(of: key) }), let staged = stagedFile(inode: inode),
      staged.state.withLock({ $0.baseGeneration == 0 && !$0.unlinked })
    else { return false }
    stagedFileUnlinked(inode: inode)
    state.withLock { $0.inodes.detach(inode) }
    return true
  }

  public func mkdir(parent: UInt64, name: String, mode: UInt32) async throws -> Entry {
    try checkWritable()
    let parentKey = try node(parent, kind: .directory).key
    let fileKey = try newKey(parentKey, name, placeholder: true)
    let directoryKey = fileKey + "/"
    defer { walks.invalidateListings(under: directoryKey) }
    // The bucket decides, not a held node: an implicit directory vanishes with its last object.
    let found = try await lookInBucket(fileKey: fileKey, directoryKey: directoryKey)
    if found.file != nil || found.directory != nil { throw Errno.exists }
    do {
      _ = try await store.upload(
        directoryKey, from: BytesSource([]), attributes: ObjectAttributes(), ifGenerationMatch: 0)
    } catch StorageError.preconditionFailed {
      throw Errno.exists
    } catch {
      throw failure(error, operation: "create placeholder", key: directoryKey)
    }
    let now = clock()
    let inode = state.withLock { state in
      // The bucket had no file of that name: a node the mount still holds for one is stale.
      if let stale = state.inodes.inode(of: fileKey) { state.inodes.detach(stale) }
      return state.inodes.remember(key: directoryKey, kind: .directory, metadata: nil, at: now)
    }
    return entry(inode: inode, kind: .directory, facts: nil)
  }

  public func rmdir(parent: UInt64, name: String) async throws {
    try checkWritable()
    let parentKey = try node(parent, kind: .directory).key
    guard name.utf8.count <= 255 else { throw Errno.nameTooLong }
    guard Names.isValidComponent(name) else { throw Errno.noEntry }
    let fileKey = parentKey + name
    let directoryKey = fileKey + "/"
    defer { walks.invalidateListings(under: directoryKey) }
    let held = probe(fileKey: fileKey, directoryKey: directoryKey)
    if held.kind == .file { throw Errno.notDirectory }
    for _ in 0..<3 {
      switch try await contents(of: directoryKey) {
      case .nonEmpty:
        throw Errno(ENOTEMPTY)
      case .empty(nil):
        // Nothing under the prefix: gone already (its last object was
        // removed) if the kernel saw it; else a file or nothing.
        if held.inode == nil {
          if try await optionalMetadata(fileKey) != nil { throw Errno.notDirectory }
          throw Errno.noEntry
        }
      case .empty(let placeholder?):
        do {
          try await store.delete(directoryKey, ifGenerationMatch: placeholder.generation)
        } catch StorageError.notFound {
        } catch StorageError.preconditionFailed {
          logger.debug("placeholder \(directoryKey) replaced meanwhile; looking again")
          continue
        } catch {
          throw failure(error, operation: "delete", key: directoryKey)
        }
      }
      if let inode = held.inode { state.withLock { $0.inodes.detach(inode) } }
      return
    }
    throw await changedMeanwhile(directoryKey, operation: "rmdir")
  }

  // MARK: - Shared by namespace changes

  func checkWritable() throws {
    if configuration.readOnly { throw Errno.readOnly }
  }

  /// The key a new name gets under `parentKey`, checked against the name
  /// rules before any request: EINVAL for a name no listing could show,
  /// ENAMETOOLONG past 255 bytes or the service's 1024-byte object names
  /// (counting the trailing `/` of a directory's placeholder).
  func newKey(_ parentKey: String, _ name: String, placeholder: Bool = false) throws -> String {
    guard name.utf8.count <= 255 else { throw Errno.nameTooLong }
    guard Names.isValidComponent(name) else { throw Errno.invalid }
    let key = parentKey + name
    guard key.utf8.count + (placeholder ? 1 : 0) <= Self.maxObjectNameBytes else { throw Errno.nameTooLong }
    return key
  }

  static let maxObjectNameBytes = 1024

  /// What the kernel holds under a name: a file node, a directory node, or none.
  func probe(fileKey: String, directoryKey: String) -> (inode: UInt64?, kind: Node.Kind?) {
    state.withLock { state in
      if let inode = state.inodes.inode(of: directoryKey) { return (inode, .directory) }
      if let inode = state.inodes.inode(of: fileKey) { return (inode, .file) }
      return (nil, nil)
    }
  }

  /// The file `key` as the mount knows it (the generation of its last
  /// lookup or listing, whatever its age: a delete or rename must act on
  /// that version and no other), else as the bucket has it now.
  func existingFile(_ key: String) async throws -> (inode: UInt64?, metadata: ObjectMetadata) {
    let held = probe(fileKey: key, directoryKey: key + "/")
    if held.kind == .directory { throw Errno.isDirectory }
    if let inode = held.inode {
      let (known, cached) = state.withLock { ($0.inodes[inode]?.facts?.generation, $0.inodes.metadata[key]) }
      if let cached, cached.generation == known { return (inode, cached) }
      let metadata = try await fetchMetadata(key)
      // The full metadata was evicted, and the object is no longer the version the mount showed.
      if let known, metadata.generation != known { throw await changedMeanwhile(key, operation: "change") }
      return (inode, metadata)
    }
    let found = try await lookInBucket(fileKey: key, directoryKey: key + "/")
    if found.directory != nil { throw Errno.isDirectory }
    guard let metadata = found.file else { throw Errno.noEntry }
    return (nil, metadata)
  }

  /// What the bucket holds under a name now: the object and whether a
  /// directory of that name has anything in it, asked for at once.
  func lookInBucket(fileKey: String, directoryKey: String) async throws -> (
    file: ObjectMetadata?, directory: DirectoryContents?
  ) {
    async let object = optionalMetadata(fileKey)
    let directory = try await contents(of: directoryKey)
    let file = try await object
    if case .empty(nil) = directory { return (file, nil) }
    return (file, directory)
  }

  enum DirectoryContents {
    /// Nothing under the prefix but its placeholder, if it has one.
    case empty(placeholder: ObjectMetadata?)
    case nonEmpty
  }

  /// Whether anything but its own placeholder is under `directoryKey`: a
  /// list call of two entries (a page may come back short with a token, so
  /// follow tokens while only the placeholder has shown up).
  func contents(of directoryKey: String) async throws -> DirectoryContents {
    var placeholder: ObjectMetadata?
    var token: String?
    for _ in 0..<4 {
      let page: ListPage
      do {
        page = try await store.list(prefix: directoryKey, delimiter: "/", pageSize: 2, pageToken: token)
      } catch {
        throw failure(error, operation: "list", key: directoryKey)
      }
      if !page.prefixes.isEmpty || page.items.contains(where: { !Names.same($0.name, directoryKey) }) {
        return .nonEmpty
      }
      placeholder = placeholder ?? page.items.first
      guard let next = page.nextPageToken else { return .empty(placeholder: placeholder) }
      token = next
    }
    logger.warning("listing \(directoryKey) keeps answering empty pages; treating it as not empty")
    return .nonEmpty
  }

  /// Another client changed `key` since this mount looked (a 412): nothing
  /// was changed; what the mount knows of `key` is refreshed, so a repeated
  /// command acts on the current version.
  func changedMeanwhile(_ key: String, operation: String) async -> Errno {
    logger.warning("\(operation) \(key): changed by someone else meanwhile; left as it is")
    if (try? await optionalMetadata(key)) == nil { forgetKey(key) } else { _ = try? await fetchMetadata(key) }
    return .stale
  }

  /// The bucket no longer has `key`: its node (if held) stops answering for it.
  func forgetKey(_ key: String) {
    state.withLock { state in
      if let inode = state.inodes.inode(of: key) { state.inodes.detach(inode) }
      state.inodes.removeMetadata(of: key)
    }
  }
}

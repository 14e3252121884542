import FUSE
import Logging
import ObjectStore

#if canImport(Glibc)
  import Glibc
#endif

/// Changes of the tree: unlink, mknod, mkdir and rmdir here, renames of
/// files and directories in Renames.swift, each with
/// preconditions on the names it changes (docs/SEMANTICS.md#tree).
struct Namespace: MountComponent, Sendable {
  let context: MountContext
  /// The node, full metadata and staged file of each inode: a staged file
  /// is told of its unlink, and stored before its rename.
  let inodes: KnownInodes
  let entries: AttributeBuilder
  /// A staged file is stored before a rename.
  let uploader: Uploader
  /// What bucketfs chose of the files it stored, for an atomic save.
  let provenance: Provenance
  /// Told of every rename: open readers, staged files, provenance.
  let changes: NameChanges
  /// Told what a fresh look at the bucket found, and of a file in flight
  /// unlinked (the store tells it every write); asked which files are in flight.
  let directoryCache: DirectoryCache

  func unlink(parent: UInt64, name: String) async throws {
    try checkWritable()
    let parentKey = try inodes.node(parent, kind: .directory).key
    let key = try Names.key(name, under: parentKey, for: .existing)
    // A file this mount created and never stored has no object to delete.
    if let staged = inodes.stagedFile(named: key), staged.unlinkIfNeverStored() {
      inodes.nodes.deleted(key, inode: staged.inode)
      directoryCache.invalidate(.endedInFlight(key, inode: staged.inode))
      return
    }
    let (inode, metadata) = try await existingFile(key)
    do {
      try await store.delete(key, ifGenerationMatch: metadata.generation)
    } catch StorageError.notFound {
      inodes.nodes.deleted(key)
      throw Errno.noEntry
    } catch StorageError.preconditionFailed {
      throw await changedMeanwhile(key, operation: "unlink")
    } catch {
      throw diagnostics.failure(error, operation: "delete", key: key)
    }
    inodes.nodes.deleted(key, inode: inode)
    if let inode { inodes.stagedFile(inode)?.noteUnlinked() }
  }

  func mkdir(parent: UInt64, name: String, mode: UInt32) async throws -> Entry {
    try checkWritable()
    let parentKey = try inodes.node(parent, kind: .directory).key
    let fileKey = try Names.key(name, under: parentKey, for: .newDirectory)
    let directoryKey = fileKey + "/"
    // The bucket decides, not a held node: an implicit directory vanishes with its last object.
    let found = try await lookInBucket(fileKey: fileKey, directoryKey: directoryKey)
    if found.file != nil || found.directory != nil { throw Errno.exists }
    let placeholder: ObjectMetadata
    do {
      placeholder = try await store.upload(
        directoryKey, from: BytesSource([]),
        attributes: ObjectAttributes(
          custom: configuration.newObjectPosix(mode: mode & 0o7777, directory: true)),
        ifGenerationMatch: 0)
    } catch StorageError.preconditionFailed {
      throw Errno.exists
    } catch {
      throw diagnostics.failure(error, operation: "create placeholder", key: directoryKey)
    }
    let now = clock()
    // The bucket had no file of that name: a node the mount still holds for one is stale.
    let inode = inodes.nodes.created(
      directoryKey, kind: .directory, facts: FileFacts(placeholder), detaching: fileKey, at: now
    ).inode
    return entries.directory(inode)
  }

  /// An empty file, stored at once where nothing is (`ifGenerationMatch=0`):
  /// a file made without a handle has no close to store it at. A FIFO,
  /// socket or device is such an object whose stored mode carries its type
  /// (docs/SEMANTICS.md#special-files).
  func mknod(parent: UInt64, name: String, mode: UInt32, device: UInt64) async throws -> Entry {
    try checkWritable()
    let special = FileAttributes.Kind(special: mode)
    let type = mode & FileAttributes.typeMask
    if type != FileAttributes.Kind.file.mode, type != 0, special == nil {
      throw Errno.invalid
    }
    // Without stored modes an object cannot say it is anything but a file.
    if special != nil, !configuration.posixAttributes { throw Errno.notPermitted }
    let parentKey = try inodes.node(parent, kind: .directory).key
    let key = try Names.key(name, under: parentKey, for: .newFile)
    let found = try await lookInBucket(fileKey: key, directoryKey: key + "/")
    if found.file != nil || found.directory != nil || directoryCache.isInFlight(key) { throw Errno.exists }
    let (fileAttributes, inferred) = provenance.newFile(name: name, mode: mode & 0o7777)
    var attributes = fileAttributes
    if special != nil {
      attributes.custom[PosixKeys.mode] = PosixKeys.formatMode(mode & (FileAttributes.typeMask | 0o7777))
      if special == .characterDevice || special == .blockDevice {
        attributes.custom[PosixKeys.device] = String(device)
      }
    }
    let stored: ObjectMetadata
    do {
      stored = try await store.upload(
        key, from: BytesSource([]), attributes: attributes, ifGenerationMatch: 0)
    } catch StorageError.preconditionFailed {
      throw Errno.exists
    } catch {
      throw diagnostics.failure(error, operation: "create", key: key)
    }
    provenance.stored(key: stored.name, generation: stored.generation, inferred: inferred)
    return entries.object(key, stored, at: clock())
  }

  func rmdir(parent: UInt64, name: String) async throws {
    try checkWritable()
    let parentKey = try inodes.node(parent, kind: .directory).key
    let fileKey = try Names.key(name, under: parentKey, for: .existing)
    let directoryKey = fileKey + "/"
    let held = inodes.nodes.held(fileKey: fileKey, directoryKey: directoryKey)
    if let kind = held.kind, kind != .directory { throw Errno.notDirectory }
    // A file created in it and not stored yet is in it (docs/SEMANTICS.md#writes-in-flight).
    if directoryCache.holdsInFlight(under: directoryKey) { throw Errno(ENOTEMPTY) }
    for _ in 0..<3 {
      switch try await contents(of: directoryKey) {
      case .nonEmpty:
        throw Errno(ENOTEMPTY)
      case .empty(nil):
        // Nothing under the prefix: gone already (its last object was
        // removed) if the kernel saw it; else a file or nothing.
        if held.inode == nil {
          if try await inodes.metadata.fetchIfPresent(fileKey) != nil { throw Errno.notDirectory }
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
          throw diagnostics.failure(error, operation: "delete", key: directoryKey)
        }
      }
      if let inode = held.inode { inodes.nodes.deleted(directoryKey, inode: inode) }
      return
    }
    throw await changedMeanwhile(directoryKey, operation: "rmdir")
  }

  // MARK: - Shared by namespace changes

  func checkWritable() throws {
    if configuration.readOnly { throw Errno.readOnly }
  }

  /// The file `key` as the mount knows it (the generation of its last
  /// lookup or listing, whatever its age: a delete or rename must act on
  /// that version and no other), else as the bucket has it now.
  func existingFile(_ key: String) async throws -> (inode: UInt64?, metadata: ObjectMetadata) {
    let held = inodes.nodes.held(fileKey: key, directoryKey: key + "/")
    if held.kind == .directory { throw Errno.isDirectory }
    if let inode = held.inode {
      let (shown, cached) = inodes.shownVersion(inode: inode, key: key)
      if let cached { return (inode, cached) }
      let metadata = try await inodes.metadata.fetch(key)
      // The full metadata was evicted, and the object is no longer the version the mount showed.
      if let shown, metadata.generation != shown { throw await changedMeanwhile(key, operation: "change") }
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
    async let object = inodes.metadata.fetchIfPresent(fileKey)
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
  private func contents(of directoryKey: String) async throws -> DirectoryContents {
    // What is kept of the name may be older than what this finds; the
    // operation that asks may end here (EEXIST, ENOTEMPTY) or go on to a
    // write, which the store reports in turn.
    defer { directoryCache.invalidate(.touched(directoryKey)) }
    var placeholder: ObjectMetadata?
    var token: String?
    for _ in 0..<4 {
      let page: ListPage
      do {
        page = try await store.list(
          ListRequest(prefix: directoryKey, delimiter: "/", pageSize: 2, pageToken: token))
      } catch {
        throw diagnostics.failure(error, operation: "list", key: directoryKey)
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
    directoryCache.invalidate(.touched(key))
    if (try? await inodes.metadata.fetchIfPresent(key)) == nil {
      inodes.nodes.deleted(key)
    } else {
      _ = try? await inodes.metadata.fetch(key)
    }
    return .stale
  }
}

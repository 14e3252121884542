import FUSE

#if canImport(Glibc)
  import Glibc
#endif

/// Directory handles over ``DirectoryStream``.
extension BucketFileSystem {
  // MARK: - Directories

  public func opendir(inode: UInt64) async throws -> UInt64 {
    let key = try node(inode, kind: .directory).key
    let listed = await walks.opened(key, parent: SubtreeWalks.parent(of: key, root: configuration.rootPrefix))
    let stream = DirectoryStream(
      prefix: key, store: store, pageSize: configuration.pageSize, clock: clock, listed: listed,
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
    if offset == 0 {
      await stream.rewind()
      listingPassStarted(handle: handle, directory: stream.prefix)
    }
    var listedNames: [(String, Double)] = []
    defer { listingPassNoted(handle: handle, names: listedNames, complete: false) }
    let own = attributes(inode: inode, kind: .directory, facts: nil)
    let dot = Entry(attributes: own, entryTimeout: 0, attributeTimeout: 0)
    if offset == 0, !buffer.add(name: ".", entry: dot, nextOffset: 1) { return }
    if offset <= 1, !buffer.add(name: "..", entry: dot, nextOffset: 2) { return }
    // An offset no readdir gave (a garbage seekdir) is an index like any
    // other, clamped: past the end it lists nothing.
    var index = Int(clamping: max(offset, 2) - 2)
    var added = false
    var subdirectories: [String] = []
    var files: [SiblingPrefetch.File] = []
    defer {
      walks.read(stream.prefix, subdirectories: subdirectories)
      prefetch.listed(stream.prefix, files: files)
    }
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
      if batch.isEmpty {
        listingPassNoted(handle: handle, names: listedNames, complete: true)
        listedNames = []
        return
      }
      for listed in batch {
        // Fresh from when the page was answered, however long the reader paused.
        let now = listed.answeredAt
        let facts = listed.metadata.map(FileFacts.init)
        let (inode, shown): (UInt64, FileFacts?) = state.withLock { state in
          if buffer.isPlus {
            let inode = state.inodes.remember(
              key: listed.key, kind: listed.kind, metadata: listed.metadata, facts: facts, at: now)
            return (inode, state.inodes[inode]?.facts ?? facts)
          }
          if let metadata = listed.metadata { state.inodes.refresh(metadata, at: now) }
          return (state.inodes.expectedInode(of: listed.key), facts)
        }
        let next = UInt64(index) + 3
        guard
          buffer.add(
            name: listed.name, entry: entry(inode: inode, kind: listed.kind, facts: shown, answeredAt: now),
            nextOffset: next)
        else {
          if buffer.isPlus { forget(inode: inode, count: 1) }
          return
        }
        added = true
        listedNames.append((listed.name, listed.answeredAt))
        index += 1
        if listed.kind == .directory { subdirectories.append(listed.key) }
        if let facts = shown, listed.kind == .file {
          files.append(.init(key: listed.key, inode: inode, size: facts.size, generation: facts.generation))
        }
      }
    }
  }

  public func releasedir(inode: UInt64, handle: UInt64) {
    if let stream = state.withLock({ $0.directories.removeValue(forKey: handle) }) {
      walks.released(stream.prefix)
    }
    listings.withLock { $0.dropPass(handle: handle) }
  }
}

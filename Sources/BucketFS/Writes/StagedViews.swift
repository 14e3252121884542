import FUSE
import NIOCore
import ObjectStore

/// What reads, stat, lookups and the last close see of a staged file
/// (docs/SEMANTICS.md#writes-staging).
extension BucketFileSystem {
  // MARK: - Reading staged bytes

  /// A read-only handle on a staged inode: the stage's bytes once it holds
  /// them, the opened generation's until then. A handle on a loaded stage
  /// counts as its reader, so the stage outlives the writers' close for it.
  /// Nil when the last writer closed meanwhile: then the bucket has the bytes.
  func openStagedForReading(_ staged: StagedFile) -> OpenResult? {
    enum Source {
      case stage
      case base(ObjectMetadata?)
      case closed
    }
    let source = staged.state.withLock { s -> Source in
      guard s.handles > 0 else { return .closed }
      guard s.loaded else { return .base(s.base) }
      s.readers += 1
      return .stage
    }
    if case .closed = source { return nil }
    let handle = state.withLock { state in
      let handle = state.nextHandle
      state.nextHandle += 1
      if case .base(let base?) = source {
        state.files[handle] = FileReader(
          key: base.name, generation: base.generation, size: UInt64(base.size), store: store,
          maxSegment: configuration.readAheadMaxChunk, maxAhead: configuration.readAheadMaxBytes,
          budget: readAhead)
      }
      return handle
    }
    if case .stage = source {
      writes.withLock { $0.readers[handle] = staged }
      stagedCount.add(1, ordering: .relaxed)
    }
    return OpenResult(handle: handle, keepCache: false)
  }

  /// The stage a read-only handle reads, if it was opened on a loaded one.
  func stagedReader(handle: UInt64) -> StagedFile? {
    guard stagedCount.load(ordering: .relaxed) > 0 else { return nil }
    return writes.withLock { $0.readers[handle] }
  }

  /// A reader of a stage closed: the last one removes a stage its writers left.
  func releaseReader(handle: UInt64) {
    guard stagedCount.load(ordering: .relaxed) > 0,
      let staged = writes.withLock({ $0.readers.removeValue(forKey: handle) })
    else { return }
    stagedCount.subtract(1, ordering: .relaxed)
    let remove = staged.state.withLock { s in
      s.readers -= 1
      return s.readers == 0 && s.removeWhenUnread
    }
    if remove { staged.stage.remove() }
  }

  /// The bytes of a loaded stage, for any handle of the inode; nil when the
  /// inode is not staged or its bytes are still the object's.
  func stagedBytes(inode: UInt64, handle: UInt64, offset: UInt64, size: Int) -> Result<[ByteBuffer], Errno>? {
    guard let staged = stagedFile(handle: handle) ?? stagedReader(handle: handle) ?? stagedFile(inode: inode)
    else { return nil }
    guard let total = staged.state.withLock({ $0.loaded ? $0.size : nil }) else { return nil }
    guard offset < total, size > 0 else { return .success([]) }
    let count = Int(min(UInt64(size), total - offset))
    do {
      return .success([try staged.stage.read(at: Int64(offset), count: count)])
    } catch {
      return .failure(Errno(error.code))
    }
  }

  // MARK: - Attributes

  /// What stat shows of a staged inode: its staged size and mtime.
  func stagedView(_ inode: UInt64) -> (size: UInt64, modified: Timestamp?)? {
    stagedFile(inode: inode)?.state.withLock { ($0.size, $0.modified) }
  }

  /// An entry for a staged file the kernel holds, so a lookup of a file
  /// not yet uploaded finds it; counts the lookup.
  func stagedEntry(key: String) -> Entry? {
    guard stagedCount.load(ordering: .relaxed) > 0,
      let inode = state.withLock({ $0.inodes.inode(of: key) }),
      let staged = stagedFile(inode: inode), !staged.state.withLock({ $0.unlinked })
    else { return nil }
    state.withLock { $0.inodes[inode]?.lookups += 1 }
    return stagedEntry(inode)
  }

  func stagedEntry(_ inode: UInt64) -> Entry {
    let facts = state.withLock { $0.inodes[inode]?.facts }
    return entry(inode: inode, kind: .file, facts: facts ?? FileFacts(Self.placeholder(key: "", bucket: "")))
  }

  // MARK: - Release

  /// The last handle of a staged file closed: the stage goes, unless it
  /// holds bytes that were never stored (then it stays, and the log says where).
  func releaseWriter(handle: UInt64) {
    guard stagedCount.load(ordering: .relaxed) > 0 else { return }
    let closed = writes.withLock { writes -> StagedFile? in
      guard let staged = writes.handles.removeValue(forKey: handle) else { return nil }
      let last = staged.state.withLock { s in
        s.handles -= 1
        return s.handles <= 0
      }
      guard last else { return nil }
      if writes.byInode[staged.inode] === staged { writes.byInode[staged.inode] = nil }
      stagedCount.subtract(1, ordering: .relaxed)
      return staged
    }
    guard let closed else { return }
    let (key, dirty, unlinked, poisoned, uploadedOnce) = closed.state.withLock {
      ($0.key, $0.dirty, $0.unlinked, $0.poisoned, $0.baseGeneration != 0)
    }
    let localFault = poisoned != nil && poisoned != .stale
    if dirty && !unlinked && !localFault {
      logger.error(
        "\(key): closed with bytes that were not stored; they are kept in \(closed.stage.path) (see \(closed.stage.sidecarPath))"
      )
    } else if closed.state.withLock({ s in
      s.removeWhenUnread = s.readers > 0
      return !s.removeWhenUnread
    }) {
      closed.stage.remove()
    }
    if !uploadedOnce {
      // Never stored: what stat knows of it must come from the bucket again.
      state.withLock { $0.inodes[closed.inode]?.fetchedAt = -.infinity }
    }
  }
}

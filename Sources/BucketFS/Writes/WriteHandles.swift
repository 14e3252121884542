import FUSE
import Logging
import ObjectStore

#if canImport(Glibc)
  import Glibc
#endif

/// The handles on staged files: create, open for writing (a writer on the
/// inode's shared staged file, or on a stage made now), a read-only open of
/// a staged inode, setattr's size change, and each one's close: at the last
/// writer's, the stage goes, or stays with unstored bytes, or waits for its
/// readers or an upload under way (docs/SEMANTICS.md#writes-staging). It
/// knows staged files, never handle numbers: those are the
/// ``HandleTable``'s.
struct WriteHandles: MountComponent, Sendable {
  /// The store, settings, diagnostics and clock; its tasks run the removal
  /// of a stage its last reader let go.
  let context: MountContext
  /// The node, full metadata and staged file of each inode.
  let inodes: KnownInodes
  let stageStore: StageStore
  let uploader: Uploader
  /// What bucketfs chose of the files it stores: read at open, chosen at create.
  let provenance: Provenance
  /// A created file is in flight in its directory until stored or released.
  let directoryCache: DirectoryCache

  // MARK: - Opening

  /// Creates `key` as a new staged file, with one writer (the caller's
  /// write handle, closed by ``releaseWriter(_:)``). `mode` (after the
  /// umask) is stored with it, as is the caller's owner.
  func create(key: String, name: String, flags: Int32, mode: UInt32) async throws -> StagedFile {
    if let existing = inodes.stagedFile(named: key), existing.isShareable {
      // Created here and not yet uploaded: the kernel lost its entry.
      if flags & O_EXCL != 0 { throw Errno.exists }
      if try await attach(existing, truncate: flags & O_TRUNC != 0) {
        inodes.nodes.retain(existing.inode)
        return existing
      }
    }

    let stage = try stageStore.makeStage()
    let (attributes, inferred) = provenance.newFile(name: name, mode: mode & 0o7777)
    let now = clock()
    let bucket = store.bucket
    let inode = inodes.nodes.created(
      key, kind: .file, facts: FileFacts(Staging.placeholder(key: key, bucket: bucket)), at: now
    )
    .inode
    let staged = StagedFile(
      created: inode, stage: stage, key: key, attributes: attributes, inferred: inferred)
    let failure = await stage.writeRecord(staged.record)
    if failure != 0 {
      stage.remove()
      inodes.nodes.forget(inode: inode, count: 1)
      throw diagnostics.localFailure(failure, key: key)
    }
    inodes.staged.add(staged)
    directoryCache.invalidate(.createdInFlight(key, inode: inode))
    return staged
  }

  /// Opens an inode for writing (or with O_TRUNC): one more writer on its
  /// staged file, or the first on a stage made now over the generation it
  /// has (ESTALE if its object is gone: the kernel looks the name up again,
  /// and O_CREAT then creates it). ``releaseWriter(_:)`` closes it.
  func openForWriting(inode: UInt64, node: Node, truncate: Bool) async throws -> StagedFile {
    if configuration.readOnly { throw Errno.readOnly }
    guard node.kind == .file else { throw Errno.isDirectory }
    if let existing = inodes.staged.shared(inode: inode), try await attach(existing, truncate: truncate) {
      return existing
    }
    let base = try await inodes.metadata.current(of: node, context: .inode)
    let stage = try stageStore.makeStage()
    let inferred = provenance.inferred(key: base.name, generation: base.generation)
    let staged = StagedFile(
      opened: inode, stage: stage, key: node.key, base: base, inferred: inferred, truncate: truncate)
    // Truncating bytes away is a change: the sidecar says so before the open returns.
    let truncated = truncate && base.size > 0
    if truncated {
      let failure = await stage.writeRecord(staged.record)
      if failure != 0 {
        stage.remove()
        throw diagnostics.localFailure(failure, key: node.key)
      }
    }
    // Another open may have staged the inode meanwhile: share that one.
    if let winner = inodes.staged.addUnlessShared(staged) {
      stage.remove()
      guard try await attach(winner, truncate: truncate) else {
        return try await openForWriting(inode: inode, node: node, truncate: truncate)
      }
      return winner
    }
    return staged
  }

  /// One more writer on a staged file; false if its last one closed
  /// meanwhile (then the caller stages the file anew).
  private func attach(_ staged: StagedFile, truncate: Bool) async throws -> Bool {
    // Never a writer on a released stage: the file refuses one.
    guard staged.admitWriter() else { return false }
    if truncate {
      do {
        try await stageStore.resize(staged, to: 0)
      } catch {
        releaseWriter(staged)
        throw error
      }
    }
    return true
  }

  /// What a read-only open of a staged inode reads.
  enum Reading {
    /// The stage, which holds the bytes: the handle counts as its reader,
    /// so the stage outlives the writers' close for it (``releaseReader(_:)``).
    case stage(StagedFile)
    /// The generation the stage was opened on, which it does not hold yet.
    case base(ObjectMetadata)
  }

  /// A read-only open of `inode`: the stage's bytes once it holds them, the
  /// opened generation's until then. Nil when it is not staged, or the last
  /// writer closed meanwhile: then the bucket has the bytes.
  func openForReading(inode: UInt64) -> Reading? {
    guard let staged = inodes.stagedFile(inode) else { return nil }
    switch staged.admitReader() {
    case .stage: return .stage(staged)
    case .base(let base): return .base(base)
    case nil: return nil
    }
  }

  // MARK: - setattr

  /// Truncates or extends the file: through `writer` (the staged file of
  /// the write handle setattr came with), else as a writer of its own (on
  /// the inode's staged file if it has one) and uploaded at once. Never on
  /// a staged file it does not hold: its last writer's release could
  /// discard the stage meanwhile, and the change would rewrite the sidecar
  /// of a removed stage and be lost.
  func setSize(inode: UInt64, writer: StagedFile?, node: Node, to size: UInt64) async throws {
    if let refused = Staging.refusal(
      ofEnd: size, change: "truncate \(node.key) to \(size) bytes", logger: logger)
    {
      throw refused
    }
    if let writer {
      return try await stageStore.resize(writer, to: size)
    }
    let staged = try await openForWriting(inode: inode, node: node, truncate: false)
    defer { releaseWriter(staged) }
    try await stageStore.resize(staged, to: size)
    try await uploader.commit(staged)
  }

  // MARK: - Closing

  /// A writer of a staged file closed. At the last, the stage goes, unless
  /// it holds bytes that were never stored (then it stays, and the log says
  /// where) or readers remain (then the last of them removes it); an upload
  /// under way decides when it ends (``Uploader/settle(_:_:)``).
  func releaseWriter(_ closed: StagedFile) {
    let (last, settlement) = closed.dismissWriter()
    guard last else { return }
    inodes.staged.remove(closed)
    // Never stored, it is no longer in its directory: the bucket has no such name.
    if let key = closed.inFlightKey { directoryCache.invalidate(.endedInFlight(key, inode: closed.inode)) }
    if let settlement { uploader.settle(closed, settlement) }
  }

  /// A reader of a stage closed: the last one removes a stage its writers left.
  func releaseReader(_ staged: StagedFile) {
    // Apart from the caller: release runs on the FUSE loop thread, which never waits for the disk.
    if staged.dismissReader() { tasks.start(.finish, priority: .utility) { staged.stage.remove() } }
  }
}

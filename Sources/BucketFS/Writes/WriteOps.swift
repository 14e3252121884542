import FUSE
import NIOCore
import ObjectStore

#if canImport(Glibc)
  import Glibc
#endif

/// create, open for writing, write and resize of staged files. Every read
/// and write of a stage's bytes and sidecar runs under the file's gate,
/// never under its state lock (docs/ARCHITECTURE.md#locks).
extension Staging {
  /// Creates `key` as a new staged file, with one writer (the caller's
  /// write handle, closed by ``releaseWriter(_:)``). `mode` (after the
  /// umask) is stored with it, as is the caller's owner.
  func create(key: String, name: String, flags: Int32, mode: UInt32) async throws -> StagedFile {
    let existing = nodes.inode(of: key).flatMap { shared(inode: $0) }
    if let existing {
      // Created here and not yet uploaded: the kernel lost its entry.
      if flags & O_EXCL != 0 { throw Errno.exists }
      if try await attach(existing, truncate: flags & O_TRUNC != 0) {
        let inode = existing.inode
        nodes.retain(inode)
        return existing
      }
    }

    let stage = try makeStage()
    let (attributes, inferred) = provenance.newFile(name: name, mode: mode & 0o7777)
    let now = clock()
    let bucket = store.bucket
    let inode = nodes.created(
      key, kind: .file, facts: FileFacts(Self.placeholder(key: key, bucket: bucket)), at: now
    )
    .inode
    let staged = StagedFile(
      inode: inode, stage: stage,
      state: StagedFile.State(
        key: key, baseGeneration: 0, base: nil, attributes: attributes, inferred: inferred, size: 0,
        loaded: true, dirty: true, handles: 1, modified: .wholeSecondsNow(), sequential: true))
    let failure = await stage.writeRecord(staged.record)
    if failure != 0 {
      stage.remove()
      nodes.forget(inode: inode, count: 1)
      throw diagnostics.localFailure(failure, key: key)
    }
    inodes.add(staged)
    listings.invalidate(.createdInFlight(key))
    return staged
  }

  /// Opens an inode for writing (or with O_TRUNC): one more writer on its
  /// staged file, or the first on a stage made now over the generation it
  /// has (ESTALE if its object is gone: the kernel looks the name up again,
  /// and O_CREAT then creates it). ``releaseWriter(_:)`` closes it.
  func openForWriting(inode: UInt64, node: Node, truncate: Bool) async throws -> StagedFile {
    if configuration.readOnly { throw Errno.readOnly }
    guard node.kind == .file else { throw Errno.isDirectory }
    if let existing = shared(inode: inode), try await attach(existing, truncate: truncate) {
      return existing
    }
    let base = try await nodes.currentMetadata(of: node, context: .inode)
    let stage = try makeStage()
    let emptied = truncate || base.size == 0
    // Truncating bytes away is a change: it moves the mtime, as a write does.
    let truncated = truncate && base.size > 0
    let inferred = provenance.inferred(key: base.name, generation: base.generation)
    let staged = StagedFile(
      inode: inode, stage: stage,
      state: StagedFile.State(
        key: node.key, baseGeneration: base.generation, base: base, attributes: ObjectAttributes(of: base),
        inferred: inferred, size: emptied ? 0 : UInt64(base.size), loaded: emptied,
        dirty: truncated, handles: 1,
        modified: truncated
          ? .wholeSecondsNow() : FileFacts(base).modified ?? RFC3339.parse(base.timeCreated),
        sequential: emptied))
    if truncated {
      let failure = await stage.writeRecord(staged.record)
      if failure != 0 {
        stage.remove()
        throw diagnostics.localFailure(failure, key: node.key)
      }
    }
    // Another open may have staged the inode meanwhile: share that one.
    if let winner = inodes.addUnlessShared(staged) {
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
    // Under the inodes' lock, as the last release is: never a writer on a released stage.
    guard inodes.addWriter(staged) else { return false }
    if truncate {
      do {
        try await resize(staged, to: 0)
      } catch {
        releaseWriter(staged)
        throw error
      }
    }
    return true
  }

  // MARK: - Writing

  /// The answer to a write that needs no stage: a bad handle, a poisoned
  /// file, a write of no bytes or one past the largest object. Nil when
  /// the write goes to the stage (off the FUSE loop: it is file I/O).
  func answerWithoutStage(_ staged: StagedFile, offset: UInt64, count: Int) -> Result<Int, Errno>? {
    let (key, poisoned) = staged.state.withLock { ($0.key, $0.poisoned) }
    if let poisoned { return .failure(poisoned) }
    return unstagedWrite(key, offset: offset, count: count)
  }

  func write(_ staged: StagedFile, offset: UInt64, data: [UInt8]) async throws -> Int {
    try await staged.gate.run {
      let (key, poisoned, covered) = staged.state.withLock {
        ($0.key, $0.poisoned, Self.covers($0, offset: offset, count: data.count))
      }
      if let poisoned { throw poisoned }
      if let answer = unstagedWrite(key, offset: offset, count: data.count) { return try answer.get() }
      if !covered { try await load(staged) }
      try await markDirty(staged)
      try await streamBeforeWrite(staged, offset: offset, count: data.count)
      let code = await staged.stage.write(data, at: offset)
      try staged.state.withLock { s in
        // A local failure poisons the file: its stage may hold part of the
        // write, and is never uploaded.
        if code != 0 {
          s.poisoned = diagnostics.localFailure(code, key: s.key)
          throw Errno(code)
        }
        s.loaded = true
        s.size = max(s.size, offset + UInt64(data.count))
        s.modified = .wholeSecondsNow()
      }
      try await streamAfterWrite(staged)
      return data.count
    }
  }

  /// The answer to a write that leaves the stage alone: 0 for no bytes (the
  /// size stays), EFBIG when it would end past ``maxObjectBytes``.
  private func unstagedWrite(_ key: String, offset: UInt64, count: Int) -> Result<Int, Errno>? {
    if count == 0 { return .success(0) }
    let (end, overflow) = offset.addingReportingOverflow(UInt64(count))
    guard overflow || end > Self.maxObjectBytes else { return nil }
    logger.notice("write to \(key) at byte \(offset): past the largest object the service stores (5 TiB)")
    return .failure(Errno(EFBIG))
  }

  /// Whether a write needs none of the bytes not yet in the stage.
  private static func covers(_ s: StagedFile.State, offset: UInt64, count: Int) -> Bool {
    s.loaded || (offset == 0 && UInt64(count) >= s.size)
  }

  /// Marks the file dirty, first recording so in the sidecar (a kill -9
  /// from now on leaves a stage the next mount lists). Under the gate.
  func markDirty(_ staged: StagedFile) async throws {
    let record = staged.state.withLock { s -> StageRecord? in
      guard !s.dirty || s.recordUploaded else { return nil }
      return s.record(uploaded: false)
    }
    guard let record else { return }
    let code = await staged.stage.writeRecord(record)
    if code != 0 { throw diagnostics.localFailure(code, key: record.key) }
    staged.state.withLock { s in
      s.dirty = true
      s.recordUploaded = false
    }
  }

  /// Fills the stage with the bytes of the generation it was opened on.
  /// Under the gate.
  func load(_ staged: StagedFile, upTo limit: UInt64? = nil) async throws {
    let (base, size, loaded) = staged.state.withLock { ($0.base, $0.size, $0.loaded) }
    guard !loaded, let base else { return }
    let end = min(limit ?? size, size)
    let chunk: UInt64 = 8 << 20
    var at: UInt64 = 0
    while at < end {
      let upper = min(at + chunk, end)
      let bytes: ByteBuffer
      do {
        bytes = try await store.read(
          base.name, generation: base.generation, range: Int64(at)..<Int64(upper), reusing: nil)
      } catch {
        throw diagnostics.failure(error, operation: "read for writing", key: base.name, context: .read)
      }
      guard bytes.readableBytes > 0 else { break }
      let code = await staged.stage.write(bytes, at: at)
      if code != 0 { throw diagnostics.localFailure(code, key: base.name) }
      at += UInt64(bytes.readableBytes)
    }
    let code = await staged.stage.truncate(to: end)
    if code != 0 { throw diagnostics.localFailure(code, key: base.name) }
    staged.state.withLock { s in
      s.loaded = true
      s.size = end
    }
  }

  /// Truncates or extends the staged file to `size`, downloading only the
  /// bytes it keeps (none for 0).
  func resize(_ staged: StagedFile, to size: UInt64) async throws {
    try await staged.gate.run {
      let (poisoned, loaded, current) = staged.state.withLock { ($0.poisoned, $0.loaded, $0.size) }
      if let poisoned { throw poisoned }
      // Nothing changes, nothing to upload.
      if loaded && current == size { return }
      if !loaded && size > 0 { try await load(staged, upTo: min(size, current)) }
      // A stream's bytes come back for any size but 0, which drops them.
      try await endStream(staged, bringBack: size > 0)
      try await markDirty(staged)
      let code = await staged.stage.truncate(to: size)
      try staged.state.withLock { s in
        if code != 0 {
          s.poisoned = diagnostics.localFailure(code, key: s.key)
          throw Errno(code)
        }
        s.loaded = true
        s.size = size
        s.sequential = size == 0
        s.modified = .wholeSecondsNow()
      }
    }
  }
}

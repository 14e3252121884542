import FUSE
import NIOCore
import ObjectStore

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

#if canImport(Glibc)
  import Glibc
#endif

/// create, open for writing, write and release of staged files
/// (docs/SEMANTICS.md#writes).
extension BucketFileSystem {
  static let mtimeKey = "goog-reserved-file-mtime"
  static let firebaseTokenKey = "firebaseStorageDownloadTokens"

  public func create(parent: UInt64, name: String, mode: UInt32, flags: Int32) async throws -> (
    Entry, OpenResult
  ) {
    if configuration.readOnly { throw Errno.readOnly }
    let parentKey = try node(parent, kind: .directory).key
    let key = try Self.checkedKey(parentKey, name)
    let existing = state.withLock { $0.inodes.inode(of: key) }.flatMap { inode in
      writes.withLock { $0.byInode[inode] }.flatMap { $0.state.withLock { $0.unlinked } ? nil : $0 }
    }
    if let existing {
      // Created here and not yet uploaded: the kernel lost its entry.
      if flags & O_EXCL != 0 { throw Errno.exists }
      if let handle = try await attach(existing, truncate: flags & O_TRUNC != 0) {
        let inode = existing.inode
        state.withLock { $0.inodes[inode]?.lookups += 1 }
        return (stagedEntry(inode), OpenResult(handle: handle, keepCache: false))
      }
    }

    let stage = try makeStage()
    var attributes = ObjectAttributes()
    attributes.contentType = contentTypes.type(for: name)
    var inferred: Set<XattrName> = [.writable(.contentType)]
    if configuration.firebaseDownloadTokens {
      attributes.custom[Self.firebaseTokenKey] = UUID().uuidString.lowercased()
      inferred.insert(.custom(Self.firebaseTokenKey))
    }
    let now = clock()
    let (inode, handle) = state.withLock { state in
      let inode = state.inodes.remember(key: key, kind: .file, metadata: nil, at: now)
      state.inodes[inode]?.facts = FileFacts(Self.placeholder(key: key, bucket: store.bucket))
      state.inodes[inode]?.fetchedAt = now
      let handle = state.nextHandle
      state.nextHandle += 1
      return (inode, handle)
    }
    let staged = StagedFile(
      inode: inode, stage: stage,
      state: StagedFile.State(
        key: key, baseGeneration: 0, base: nil, attributes: attributes, inferred: inferred, size: 0,
        loaded: true, dirty: true, handles: 1, modified: .wholeSecondsNow()))
    let failure = stage.writeRecord(staged.record)
    if failure != 0 {
      stage.remove()
      forget(inode: inode, count: 1)
      throw localFailure(failure, key: key)
    }
    register(staged, handle: handle)
    noteStored(key)
    return (stagedEntry(inode), OpenResult(handle: handle, keepCache: false))
  }

  /// `parentKey + name` if the name may be stored, else EINVAL/ENAMETOOLONG.
  static func checkedKey(_ parentKey: String, _ name: String) throws -> String {
    guard name.utf8.count <= 255 else { throw Errno.nameTooLong }
    guard Names.isValidComponent(name) else { throw Errno.invalid }
    let key = parentKey + name
    guard key.utf8.count <= 1024 else { throw Errno.nameTooLong }
    return key
  }

  /// Metadata of an object that exists only in a stage, for stat's facts.
  static func placeholder(key: String, bucket: String) -> ObjectMetadata {
    ObjectMetadata(
      bucket: bucket, name: key, size: 0, generation: 0, metageneration: 0, timeCreated: "", updated: "")
  }

  /// Opens an inode for writing (or with O_TRUNC): shares its staged file,
  /// or stages it now over the generation it has.
  func openForWriting(inode: UInt64, node: Node, flags: Int32) async throws -> OpenResult {
    if configuration.readOnly { throw Errno.readOnly }
    guard node.kind == .file else { throw Errno.isDirectory }
    let truncate = flags & O_TRUNC != 0
    if let existing = writes.withLock({ $0.byInode[inode] }), !existing.state.withLock({ $0.unlinked }),
      let handle = try await attach(existing, truncate: truncate)
    {
      return OpenResult(handle: handle, keepCache: false)
    }
    let base = try await currentMetadata(inode: inode, node: node)
    let stage = try makeStage()
    let emptied = truncate || base.size == 0
    // Truncating bytes away is a change: it moves the mtime, as a write does.
    let truncated = truncate && base.size > 0
    let inferred = writes.withLock {
      $0.inferred[StagedFiles.InferredKey(key: base.name, generation: base.generation)] ?? []
    }
    let staged = StagedFile(
      inode: inode, stage: stage,
      state: StagedFile.State(
        key: node.key, baseGeneration: base.generation, base: base, attributes: ObjectAttributes(of: base),
        inferred: inferred, size: emptied ? 0 : UInt64(base.size), loaded: emptied,
        dirty: truncated, handles: 1,
        modified: truncated ? .wholeSecondsNow() : FileFacts(base).modified ?? RFC3339.parse(base.timeCreated)
      ))
    if staged.state.withLock({ $0.dirty }) {
      let failure = stage.writeRecord(staged.record)
      if failure != 0 {
        stage.remove()
        throw localFailure(failure, key: node.key)
      }
    }
    let handle = state.withLock { state in
      let handle = state.nextHandle
      state.nextHandle += 1
      if !emptied {
        // Reads before the first write come from the object.
        state.files[handle] = FileReader(
          key: base.name, generation: base.generation, size: UInt64(base.size), store: store,
          maxSegment: configuration.readAheadMaxChunk, maxAhead: configuration.readAheadMaxBytes,
          budget: readAhead)
      }
      return handle
    }
    // Another open may have staged the inode meanwhile: share that one.
    let winner = writes.withLock { writes -> StagedFile? in
      if let other = writes.byInode[inode], !other.state.withLock({ $0.unlinked }) { return other }
      writes.byInode[inode] = staged
      writes.handles[handle] = staged
      return nil
    }
    if let winner {
      stage.remove()
      state.withLock { _ = $0.files.removeValue(forKey: handle) }
      guard let shared = try await attach(winner, truncate: truncate) else {
        return try await openForWriting(inode: inode, node: node, flags: flags)
      }
      return OpenResult(handle: shared, keepCache: false)
    }
    stagedCount.add(1, ordering: .relaxed)
    return OpenResult(handle: handle, keepCache: false)
  }

  /// A new handle on a staged file; nil if its last handle closed meanwhile
  /// (then the caller stages the file anew).
  private func attach(_ staged: StagedFile, truncate: Bool) async throws -> UInt64? {
    let handle = state.withLock { state in
      let handle = state.nextHandle
      state.nextHandle += 1
      return handle
    }
    // Under the registry's lock, as the last release is: never a handle on a released stage.
    let attached = writes.withLock { writes -> Bool in
      guard writes.byInode[staged.inode] === staged else { return false }
      staged.state.withLock { $0.handles += 1 }
      writes.handles[handle] = staged
      return true
    }
    guard attached else { return nil }
    if truncate {
      do {
        try await resize(staged, to: 0)
      } catch {
        releaseWriter(handle: handle)
        throw error
      }
    }
    return handle
  }

  private func register(_ staged: StagedFile, handle: UInt64) {
    writes.withLock { writes in
      writes.byInode[staged.inode] = staged
      writes.handles[handle] = staged
    }
    stagedCount.add(1, ordering: .relaxed)
  }

  func makeStage() throws -> Stage {
    do {
      let directory = try stages.withLock { (stages: inout StageDirectory?) throws(StageFailure) in
        if let stages { return stages }
        let made = try StageDirectory(path: stageDirectoryPath, files: stageFiles)
        stages = made
        return made
      }
      return try directory.makeStage()
    } catch {
      logger.error("cannot stage a file in \(stageDirectoryPath): \(Errno(error.code))")
      throw Errno(error.code)
    }
  }

  var stageDirectoryPath: String {
    if !configuration.stageDirectory.isEmpty { return configuration.stageDirectory }
    let tmp = getenv("TMPDIR").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
    return "\(tmp)/bucketfs-\(getuid())/stages-\(getpid())"
  }

  /// The staged file a write handle belongs to.
  func stagedFile(handle: UInt64) -> StagedFile? {
    guard stagedCount.load(ordering: .relaxed) > 0 else { return nil }
    return writes.withLock { $0.handles[handle] }
  }

  func stagedFile(inode: UInt64) -> StagedFile? {
    guard stagedCount.load(ordering: .relaxed) > 0 else { return nil }
    return writes.withLock { $0.byInode[inode] }
  }

  // MARK: - Writing

  public func writeInline(inode: UInt64, handle: UInt64, offset: UInt64, data: UnsafeRawBufferPointer)
    -> Result<Int, Errno>?
  {
    guard let staged = stagedFile(handle: handle) else { return .failure(.badHandle) }
    return staged.state.withLock { s -> Result<Int, Errno>? in
      if let poisoned = s.poisoned { return .failure(poisoned) }
      if let answer = unstagedWrite(s.key, offset: offset, count: data.count) { return answer }
      if s.busy || !covers(s, offset: offset, count: data.count) { return nil }
      return write(staged, &s, data, at: offset)
    }
  }

  public func write(inode: UInt64, handle: UInt64, offset: UInt64, data: [UInt8]) async throws -> Int {
    guard let staged = stagedFile(handle: handle) else { throw Errno.badHandle }
    return try await staged.gate.run {
      if let poisoned = staged.state.withLock({ $0.poisoned }) { throw poisoned }
      let key = staged.state.withLock { $0.key }
      if let answer = unstagedWrite(key, offset: offset, count: data.count) { return try answer.get() }
      let needsBytes = staged.state.withLock { !covers($0, offset: offset, count: data.count) }
      if needsBytes { try await load(staged) }
      return try data.withUnsafeBytes { bytes in
        try staged.state.withLock { s in try write(staged, &s, bytes, at: offset).get() }
      }
    }
  }

  /// The largest object the service stores: a file cannot grow past it.
  static let maxObjectBytes: UInt64 = 5 << 40

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
  private func covers(_ s: StagedFile.State, offset: UInt64, count: Int) -> Bool {
    s.loaded || (offset == 0 && UInt64(count) >= s.size)
  }

  /// One write into the stage, under its lock. A local failure poisons the
  /// file: its stage may hold part of the write, and is never uploaded.
  private func write(
    _ staged: StagedFile, _ s: inout StagedFile.State, _ data: UnsafeRawBufferPointer, at offset: UInt64
  )
    -> Result<Int, Errno>
  {
    if let failure = markDirty(staged, &s) { return .failure(failure) }
    let code = staged.stage.write(data, at: offset)
    if code != 0 {
      s.poisoned = localFailure(code, key: s.key)
      return .failure(Errno(code))
    }
    s.loaded = true
    s.size = max(s.size, offset + UInt64(data.count))
    s.modified = .wholeSecondsNow()
    s.mtimeSet = false
    return .success(data.count)
  }

  /// Marks the file dirty, first recording so in the sidecar (a kill -9
  /// from now on leaves a stage the next mount lists).
  func markDirty(_ staged: StagedFile, _ s: inout StagedFile.State) -> Errno? {
    if !s.dirty || s.recordUploaded {
      s.dirty = true
      s.recordUploaded = false
      let record = StageRecord(
        key: s.key, baseGeneration: s.baseGeneration, uploaded: false,
        fields: Dictionary(uniqueKeysWithValues: s.attributes.fields.map { ($0.key.rawValue, $0.value) }),
        custom: s.attributes.custom)
      let code = staged.stage.writeRecord(record)
      if code != 0 { return localFailure(code, key: s.key) }
    }
    return nil
  }

  func localFailure(_ code: Int32, key: String) -> Errno {
    logger.error("staging \(key) failed locally: \(Errno(code)); nothing of it is uploaded")
    return Errno(code)
  }

  /// Fills the stage with the bytes of the generation it was opened on.
  /// Called under the gate.
  func load(_ staged: StagedFile, upTo limit: UInt64? = nil) async throws {
    let (base, size, loaded) = staged.state.withLock { s in
      if !s.loaded { s.busy = true }
      return (s.base, s.size, s.loaded)
    }
    guard !loaded, let base else { return }
    defer { staged.state.withLock { $0.busy = false } }
    let end = min(limit ?? size, size)
    let chunk: UInt64 = 8 << 20
    var at: UInt64 = 0
    while at < end {
      let upper = min(at + chunk, end)
      let bytes: ByteBuffer
      do {
        bytes = try await store.read(base.name, generation: base.generation, range: Int64(at)..<Int64(upper))
      } catch {
        throw failure(error, operation: "read for writing", key: base.name, context: .read)
      }
      guard bytes.readableBytes > 0 else { break }
      let code = bytes.withUnsafeReadableBytes { staged.stage.write($0, at: at) }
      if code != 0 { throw localFailure(code, key: base.name) }
      at += UInt64(bytes.readableBytes)
    }
    let code = staged.stage.truncate(to: end)
    if code != 0 { throw localFailure(code, key: base.name) }
    staged.state.withLock { s in
      s.loaded = true
      s.size = end
    }
  }

  /// Truncates or extends the staged file to `size`, downloading only the
  /// bytes it keeps (none for 0).
  func resize(_ staged: StagedFile, to size: UInt64) async throws {
    try await staged.gate.run {
      if let poisoned = staged.state.withLock({ $0.poisoned }) { throw poisoned }
      let (loaded, current) = staged.state.withLock { ($0.loaded, $0.size) }
      // Nothing changes, nothing to upload.
      if loaded && current == size { return }
      if !loaded {
        if size == 0 {
          staged.state.withLock { $0.loaded = true }
        } else {
          try await load(staged, upTo: min(size, current))
        }
      }
      try staged.state.withLock { s in
        if let failure = markDirty(staged, &s) { throw failure }
        let code = staged.stage.truncate(to: size)
        if code != 0 {
          s.poisoned = localFailure(code, key: s.key)
          throw Errno(code)
        }
        s.loaded = true
        s.size = size
        s.modified = .wholeSecondsNow()
        s.mtimeSet = false
      }
    }
  }
}

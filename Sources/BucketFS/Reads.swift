import FUSE
import NIOCore
import ObjectStore

#if canImport(Glibc)
  import Glibc
#endif

/// open/read/release of files over ``FileReader``.
extension BucketFileSystem {
  // MARK: - Files

  public func open(inode: UInt64, flags: Int32) async throws -> OpenResult {
    await settleStaleRead(inode)
    let node = try node(inode)
    guard node.kind == .file else { throw Errno.isDirectory }
    if flags & O_ACCMODE != O_RDONLY || flags & O_TRUNC != 0 {
      return try await openForWriting(inode: inode, node: node, flags: flags)
    }
    if let staged = stagedFile(inode: inode), let opened = openStagedForReading(staged) { return opened }
    let facts: FileFacts
    if let known = node.facts, isFresh(node) {
      facts = known
    } else {
      facts = FileFacts(try await fetchMetadata(node.key))
    }
    let reader = FileReader(
      key: node.key, generation: facts.generation, size: facts.size, store: store,
      maxSegment: configuration.readAheadMaxChunk, maxAhead: configuration.readAheadMaxBytes,
      budget: readAhead, prefetched: prefetch.opened(node.key, generation: facts.generation))
    return state.withLock { state in
      let keepCache = state.inodes[inode]?.openedGeneration == facts.generation
      state.inodes[inode]?.openedGeneration = facts.generation
      let handle = state.nextHandle
      state.nextHandle += 1
      state.files[handle] = reader
      return OpenResult(handle: handle, keepCache: keepCache)
    }
  }

  public func readInline(inode: UInt64, handle: UInt64, offset: UInt64, size: Int) -> [ByteBuffer]? {
    if let staged = stagedBytes(inode: inode, handle: handle, offset: offset, size: size) {
      return try? staged.get()
    }
    guard let reader = state.withLock({ $0.files[handle] }),
      let pieces = reader.buffered(offset: offset, count: size)
    else { return nil }
    if Self.reachesEnd(offset, size, of: reader.size) { prefetch.readToEnd(reader.key) }
    return pieces
  }

  public func read(inode: UInt64, handle: UInt64, offset: UInt64, size: Int) async throws -> [ByteBuffer] {
    if let staged = stagedBytes(inode: inode, handle: handle, offset: offset, size: size) {
      return try staged.get()
    }
    guard let reader = state.withLock({ $0.files[handle] }) else { throw Errno.badHandle }
    let bound = state.withLock { $0.readDeadlines.begin(reader.key) }
    do {
      let pieces = try await OperationDeadline.$current.withValue(bound) {
        try await reader.read(offset: offset, count: size)
      }
      state.withLock { $0.readDeadlines.end(reader.key, nil) }
      if Self.reachesEnd(offset, size, of: reader.size) { prefetch.readToEnd(reader.key) }
      return pieces
    } catch {
      state.withLock { $0.readDeadlines.end(reader.key, error) }
      if Self.isGenerationGone(error) {
        generationGone(inode: inode, key: reader.key, generation: reader.generation)
      }
      throw failure(error, operation: "read", key: reader.key, context: .read)
    }
  }

  /// Whether a read of `size` bytes at `offset` reaches the end of a file of
  /// `total` bytes; without overflow for any offset and size a caller passes.
  static func reachesEnd(_ offset: UInt64, _ size: Int, of total: UInt64) -> Bool {
    let count = UInt64(clamping: size)
    return count >= total || offset >= total - count
  }

  public func release(inode: UInt64, handle: UInt64) {
    _ = state.withLock { $0.files.removeValue(forKey: handle) }
    releaseWriter(handle: handle)
    releaseReader(handle: handle)
  }
}

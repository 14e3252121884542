import FUSE
import NIOCore

#if canImport(Glibc)
  import Glibc
#endif

/// The FUSE operations on open files. Open puts a ``Handle`` in the
/// ``HandleTable``; read, write and release look it up once and switch on
/// it: an object's bytes through ``ReadService``, a stage's through ``StageStore``
/// (opens and closes of staged files through ``WriteHandles``).
/// What needs the disk or the network runs in the request's task, never
/// inline on the FUSE loop thread.
extension BucketFileSystem {
  public func open(inode: UInt64, flags: Int32) async throws -> OpenResult {
    let opened = try await boundary("open") {
      await readService.staleReads.settle(inode)
      let node = try inodes.node(inode)
      switch node.kind {
      case .file: break
      case .directory: throw Errno.isDirectory
      // The kernel follows links and never opens one; open(O_NOFOLLOW) says ELOOP.
      case .symlink: throw Errno(ELOOP)
      }
      if flags & O_ACCMODE != O_RDONLY || flags & O_TRUNC != 0 {
        let staged = try await writers.openForWriting(
          inode: inode, node: node, truncate: flags & O_TRUNC != 0)
        return OpenResult(handle: putWriter(staged), keepCache: false)
      }
      switch writers.openForReading(inode: inode) {
      case .stage(let staged):
        return OpenResult(handle: handles.put(.stageReader(staged)), keepCache: false)
      case .base(let base):
        return OpenResult(handle: handles.put(.object(readService.reader(of: base))), keepCache: false)
      case nil:
        let (reader, cache) = try await readService.open(inode: inode, node: node)
        return OpenResult(
          handle: handles.put(.object(reader)), keepCache: cache == .keep, directIO: cache == .bypass)
      }
    }
    nodes.opened(inode)
    return opened
  }

  public func create(parent: UInt64, name: String, mode: UInt32, flags: Int32) async throws -> (
    Entry, OpenResult
  ) {
    try await boundary("create") {
      if configuration.readOnly { throw Errno.readOnly }
      let parentKey = try inodes.node(parent, kind: .directory).key
      let key = try Names.key(name, under: parentKey, for: .newFile)
      let staged = try await writers.create(key: key, name: name, flags: flags, mode: mode)
      let handle = putWriter(staged)
      nodes.opened(staged.inode)
      return (entries.staged(staged.inode), OpenResult(handle: handle, keepCache: false))
    }
  }

  /// A write handle on a staged file it was just opened on; until the
  /// stage holds the bytes, its reads come from the generation opened.
  private func putWriter(_ staged: StagedFile) -> UInt64 {
    handles.put(.write(staged, base: staged.unloadedBase.map { readService.reader(of: $0) }))
  }

  /// Where reads of a handle come from: a stage that holds the file's bytes
  /// (any handle of a staged inode reads them once it does), or an object.
  private enum ReadSource {
    case stage(StagedFile)
    case object(FileReader)
  }

  private func readSource(inode: UInt64, handle: UInt64) -> ReadSource? {
    switch handles.find(handle) {
    case .stageReader(let staged):
      return .stage(staged)
    case .write(let staged, let base):
      if staged.holdsBytes { return .stage(staged) }
      return base.map(ReadSource.object)
    case .object(let reader):
      if let staged = inodes.stagedFile(inode), staged.holdsBytes { return .stage(staged) }
      return .object(reader)
    case .directory, nil:
      return nil
    }
  }

  public func readInline(inode: UInt64, handle: UInt64, offset: UInt64, size: Int) -> [ByteBuffer]? {
    // A stage's bytes are file I/O: never at hand.
    guard case .object(let reader) = readSource(inode: inode, handle: handle) else { return nil }
    return readService.readInline(reader, offset: offset, size: size)
  }

  public func read(inode: UInt64, handle: UInt64, offset: UInt64, size: Int) async throws -> [ByteBuffer] {
    try await boundary("read") {
      switch readSource(inode: inode, handle: handle) {
      case .stage(let staged): try await stageStore.read(staged, offset: offset, size: size)
      case .object(let reader): try await readService.read(inode: inode, reader, offset: offset, size: size)
      case nil: throw Errno.badHandle
      }
    }
  }

  /// The staged file a write handle writes.
  func writer(_ handle: UInt64) -> StagedFile? {
    guard case .write(let staged, _) = handles.find(handle) else { return nil }
    return staged
  }

  public func writeInline(inode: UInt64, handle: UInt64, offset: UInt64, data: UnsafeRawBufferPointer)
    -> Result<Int, Errno>?
  {
    guard let staged = writer(handle) else { return .failure(.badHandle) }
    return stageStore.answerWithoutStage(staged, offset: offset, count: data.count)
  }

  public func write(inode: UInt64, handle: UInt64, offset: UInt64, data: [UInt8]) async throws -> Int {
    try await boundary("write") {
      guard let staged = writer(handle) else { throw Errno.badHandle }
      return try await stageStore.write(staged, offset: offset, data: data)
    }
  }

  public func flush(inode: UInt64, handle: UInt64) async throws {
    try await boundary("flush") {
      switch handles.find(handle) {
      case .write(let staged, _): try await uploader.commit(staged)
      case .object(let reader): try readService.closing(inode: inode, reader)
      case .stageReader, .directory, nil: break
      }
    }
  }

  public func fsync(inode: UInt64, handle: UInt64, dataOnly: Bool) async throws {
    try await boundary("fsync") {
      if let staged = writer(handle) { try await uploader.commit(staged) }
    }
  }

  public func release(inode: UInt64, handle: UInt64) {
    close(handle, of: inode)
  }

  /// Takes the handle out of the table, once, and lets go of what it held
  /// (release and releasedir); `inode` may be evicted again once no handle is open on it.
  func close(_ handle: UInt64, of inode: UInt64) {
    switch handles.take(handle) {
    case .write(let staged, _): writers.releaseWriter(staged)
    case .stageReader(let staged): writers.releaseReader(staged)
    case .directory(let directory): directories.released(directory, handle: handle)
    case .object(let reader): readService.released(inode: inode, reader)
    case nil: return
    }
    nodes.closed(inode)
  }
}

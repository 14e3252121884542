import FUSE
import NIOCore

#if canImport(Glibc)
  import Glibc
#endif

/// The FUSE operations on open files: reads through ``Reads``, writes and
/// uploads through ``Staging``. What needs the disk or the network runs in
/// the request's task, never inline on the FUSE loop thread.
extension BucketFileSystem {
  public func open(inode: UInt64, flags: Int32) async throws -> OpenResult {
    try await boundary("open") {
      await reads.settle(inode)
      let node = try nodes.node(inode)
      switch node.kind {
      case .file: break
      case .directory: throw Errno.isDirectory
      // The kernel follows links and never opens one; open(O_NOFOLLOW) says ELOOP.
      case .symlink: throw Errno(ELOOP)
      }
      if flags & O_ACCMODE != O_RDONLY || flags & O_TRUNC != 0 {
        return try await staging.openForWriting(inode: inode, node: node, flags: flags)
      }
      if let staged = staging.file(inode: inode), let opened = staging.openForReading(staged) {
        return opened
      }
      return try await reads.open(inode: inode, node: node, handle: handles.next())
    }
  }

  public func create(parent: UInt64, name: String, mode: UInt32, flags: Int32) async throws -> (
    Entry, OpenResult
  ) {
    try await boundary("create") {
      if configuration.readOnly { throw Errno.readOnly }
      let parentKey = try nodes.node(parent, kind: .directory).key
      let key = try Names.key(name, under: parentKey, for: .newFile)
      let (inode, handle) = try await staging.create(key: key, name: name, flags: flags, mode: mode)
      return (entries.staged(inode), OpenResult(handle: handle, keepCache: false))
    }
  }

  public func readInline(inode: UInt64, handle: UInt64, offset: UInt64, size: Int) -> [ByteBuffer]? {
    if staging.holdsBytes(inode: inode, handle: handle) { return nil }
    return reads.readInline(handle: handle, offset: offset, size: size)
  }

  public func read(inode: UInt64, handle: UInt64, offset: UInt64, size: Int) async throws -> [ByteBuffer] {
    try await boundary("read") {
      if let staged = try await staging.bytes(inode: inode, handle: handle, offset: offset, size: size) {
        return staged
      }
      return try await reads.read(inode: inode, handle: handle, offset: offset, size: size)
    }
  }

  public func writeInline(inode: UInt64, handle: UInt64, offset: UInt64, data: UnsafeRawBufferPointer)
    -> Result<Int, Errno>?
  {
    staging.answerWithoutStage(handle: handle, offset: offset, count: data.count)
  }

  public func write(inode: UInt64, handle: UInt64, offset: UInt64, data: [UInt8]) async throws -> Int {
    try await boundary("write") {
      try await staging.write(handle: handle, offset: offset, data: data)
    }
  }

  public func flush(inode: UInt64, handle: UInt64) async throws {
    try await boundary("flush") {
      try await staging.commit(handle: handle)
    }
  }

  public func fsync(inode: UInt64, handle: UInt64, dataOnly: Bool) async throws {
    try await boundary("fsync") {
      try await staging.commit(handle: handle)
    }
  }

  public func release(inode: UInt64, handle: UInt64) {
    staging.release(handle: handle)
  }
}

import NIOCore

/// The operations a filesystem implements to be served by ``FUSESession``.
///
/// Asynchronous methods run in their own task, so a slow one never blocks the
/// session loop; the task is cancelled when the kernel interrupts the request.
/// They throw ``Errno``; any other error is answered with EIO. Synchronous
/// methods are answered inline on the session thread and must not block.
public protocol FileSystem: AnyObject, Sendable {
  /// The kernel has finished INIT: the mount is live. `kernel` drops what
  /// the kernel caches of an inode or a name when the bucket changed under it.
  func mounted(kernel: KernelCache)

  /// A reply the kernel did not take (the caller was killed): undo what the
  /// request created, or it would never be forgotten or released.
  func replyFailed(_ reply: FailedReply)

  func lookup(parent: UInt64, name: String) async throws -> Entry
  /// The kernel drops `count` references to `inode`.
  func forget(inode: UInt64, count: UInt64)
  func getattr(inode: UInt64) async throws -> (FileAttributes, timeout: Double)
  /// The target of a symbolic link, as bytes (no NUL). The kernel follows
  /// links itself; this only says where one points.
  func readlink(inode: UInt64) async throws -> [UInt8]

  /// The handle, and whether the kernel may cache the directory's readdir
  /// results or keep those it cached.
  func opendir(inode: UInt64) async throws -> OpenResult
  /// Fills `buffer` with entries following `offset` (0 starts from the top).
  func readdir(inode: UInt64, handle: UInt64, offset: UInt64, into buffer: DirectoryBuffer)
    async throws
  func releasedir(inode: UInt64, handle: UInt64)

  func open(inode: UInt64, flags: Int32) async throws -> OpenResult
  /// The bytes at `offset`, fewer only at the end of the file, in the pieces
  /// the filesystem holds them (the reply hands the kernel all of them at once).
  func read(inode: UInt64, handle: UInt64, offset: UInt64, size: Int) async throws -> [ByteBuffer]
  /// The same bytes if they are already at hand, else nil (then ``read`` is
  /// called). Answered inline: a hit costs no task and no thread hop.
  func readInline(inode: UInt64, handle: UInt64, offset: UInt64, size: Int) -> [ByteBuffer]?
  func release(inode: UInt64, handle: UInt64)

  /// The whole value; the session answers size probes and ERANGE itself.
  func getxattr(inode: UInt64, name: String) async throws -> [UInt8]
  func listxattr(inode: UInt64) async throws -> [String]
  /// The same answers when they need no waiting, else nil; answered inline
  /// like ``readInline(inode:handle:offset:size:)``.
  func getxattrInline(inode: UInt64, name: String) -> Result<[UInt8], Errno>?
  func listxattrInline(inode: UInt64) -> Result<[String], Errno>?
  func setxattr(inode: UInt64, name: String, value: [UInt8], flags: XattrFlags) async throws
  func removexattr(inode: UInt64, name: String) async throws

  // Writes and namespace changes. A read-only mount never sees them: the
  // kernel answers EROFS itself for an `ro` mount.

  /// Creates and opens a regular file `name` in `parent`.
  func create(parent: UInt64, name: String, mode: UInt32, flags: Int32) async throws -> (Entry, OpenResult)
  /// Bytes written at `offset`; answered inline when it needs no waiting
  /// (nil: ``write(inode:handle:offset:data:)`` is called in a task).
  func writeInline(inode: UInt64, handle: UInt64, offset: UInt64, data: UnsafeRawBufferPointer) -> Result<
    Int, Errno
  >?
  func write(inode: UInt64, handle: UInt64, offset: UInt64, data: [UInt8]) async throws -> Int
  /// A close(2) of a descriptor on `handle` (one per dup); errors reach close.
  func flush(inode: UInt64, handle: UInt64) async throws
  func fsync(inode: UInt64, handle: UInt64, dataOnly: Bool) async throws
  /// truncate, utimens, chmod, chown; `handle` when the caller has the file open.
  func setattr(inode: UInt64, handle: UInt64?, changes: AttributeChanges) async throws
    -> (FileAttributes, timeout: Double)
  func mkdir(parent: UInt64, name: String, mode: UInt32) async throws -> Entry
  /// mknod(2): `mode` carries the type (regular file, FIFO, socket,
  /// device) and `device` a device's number. A regular file is an empty
  /// file made without opening it (`tar --xattrs` makes each file so, sets
  /// its xattrs, then writes it).
  func mknod(parent: UInt64, name: String, mode: UInt32, device: UInt64) async throws -> Entry
  /// Creates a symbolic link `name` in `parent` holding `target`, the bytes
  /// the caller passed (never empty, no NUL; the kernel checks).
  func symlink(parent: UInt64, name: String, target: [UInt8]) async throws -> Entry
  func unlink(parent: UInt64, name: String) async throws
  func rmdir(parent: UInt64, name: String) async throws
  func rename(parent: UInt64, name: String, newParent: UInt64, newName: String, flags: RenameFlags)
    async throws
}

/// What a request whose reply failed had created.
public enum FailedReply: Sendable, Equatable {
  /// One lookup count of `inode` (0: a negative entry, nothing to undo).
  case lookup(inode: UInt64)
  case open(inode: UInt64, handle: UInt64)
  case opendir(inode: UInt64, handle: UInt64)
  /// A created file: its lookup count and its open handle.
  case create(inode: UInt64, handle: UInt64)
}

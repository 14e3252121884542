import NIOCore

/// The operations a filesystem implements to be served by ``FUSESession``.
///
/// Asynchronous methods run in their own task, so a slow one never blocks the
/// session loop; the task is cancelled when the kernel interrupts the request.
/// They throw ``Errno``; any other error is answered with EIO. Synchronous
/// methods are answered inline on the session thread and must not block.
public protocol FileSystem: AnyObject, Sendable {
  /// The kernel has finished INIT: the mount is live.
  func mounted()

  func lookup(parent: UInt64, name: String) async throws -> Entry
  /// The kernel drops `count` references to `inode`.
  func forget(inode: UInt64, count: UInt64)
  func getattr(inode: UInt64) async throws -> (FileAttributes, timeout: Double)

  func opendir(inode: UInt64) async throws -> UInt64
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
  func readAtHand(inode: UInt64, handle: UInt64, offset: UInt64, size: Int) -> [ByteBuffer]?
  func release(inode: UInt64, handle: UInt64)

  /// The whole value; the session answers size probes and ERANGE itself.
  func getxattr(inode: UInt64, name: String) async throws -> [UInt8]
  func listxattr(inode: UInt64) async throws -> [String]
  /// The same answers when they need no waiting, else nil; answered inline
  /// like ``readAtHand(inode:handle:offset:size:)``.
  func getxattrAtHand(inode: UInt64, name: String) -> Result<[UInt8], Errno>?
  func listxattrAtHand(inode: UInt64) -> Result<[String], Errno>?
  func setxattr(inode: UInt64, name: String, value: [UInt8], flags: XattrFlags) async throws
  func removexattr(inode: UInt64, name: String) async throws
}

import FUSE

// Namespace changes: answered EROFS until they land (issue 13).
extension BucketFileSystem {
  public func mkdir(parent: UInt64, name: String, mode: UInt32) async throws -> Entry { throw Errno.readOnly }
  public func unlink(parent: UInt64, name: String) async throws { throw Errno.readOnly }
  public func rmdir(parent: UInt64, name: String) async throws { throw Errno.readOnly }
  public func rename(parent: UInt64, name: String, newParent: UInt64, newName: String, flags: RenameFlags)
    async throws
  { throw Errno.readOnly }
}

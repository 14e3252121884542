import FUSE

/// The FUSE operations on extended attributes, answered by ``ExtendedAttributes``.
extension BucketFileSystem {
  public func getxattr(inode: UInt64, name: String) async throws -> [UInt8] {
    try await boundary("getxattr") {
      try await extendedAttributes.getxattr(inode: inode, name: name)
    }
  }

  public func listxattr(inode: UInt64) async throws -> [String] {
    try await boundary("listxattr") {
      try await extendedAttributes.listxattr(inode: inode)
    }
  }

  public func getxattrInline(inode: UInt64, name: String) -> Result<[UInt8], Errno>? {
    extendedAttributes.getxattrInline(inode: inode, name: name)
  }

  public func listxattrInline(inode: UInt64) -> Result<[String], Errno>? {
    extendedAttributes.listxattrInline(inode: inode)
  }

  public func setxattr(inode: UInt64, name: String, value: [UInt8], flags: XattrFlags) async throws {
    try await boundary("setxattr") {
      try await extendedAttributes.setxattr(inode: inode, name: name, value: value, flags: flags)
    }
  }

  public func removexattr(inode: UInt64, name: String) async throws {
    try await boundary("removexattr") {
      try await extendedAttributes.removexattr(inode: inode, name: name)
    }
  }
}

import FUSE

/// The FUSE operations on names, attributes and directories.
extension BucketFileSystem {
  public func lookup(parent: UInt64, name: String) async throws -> Entry {
    try await boundary("lookup") {
      try await nameLookup.lookup(parent: parent, name: name)
    }
  }

  public func forget(inode: UInt64, count: UInt64) {
    nodes.forget(inode: inode, count: count)
  }

  public func getattr(inode: UInt64) async throws -> (FileAttributes, timeout: Double) {
    try await boundary("getattr") {
      try await entries.getattr(inode: inode)
    }
  }

  /// Size goes to the stage; mtime, mode and owner to a pending upload or
  /// one PATCH (a directory's to its placeholder); atime is accepted and not
  /// stored (docs/SEMANTICS.md#writes-setattr).
  public func setattr(inode: UInt64, handle: UInt64?, changes: AttributeChanges) async throws
    -> (FileAttributes, timeout: Double)
  {
    try await boundary("setattr") {
      if configuration.readOnly { throw Errno.readOnly }
      let node = try inodes.node(inode)
      if node.kind == .directory, changes.size != nil { throw Errno.isDirectory }
      // truncate follows links: a size for the link itself comes from no tool.
      if node.kind == .symlink, changes.size != nil { throw Errno.invalid }
      if let size = changes.size {
        try await writers.setSize(inode: inode, writer: handle.flatMap(writer), node: node, to: size)
      }
      try await changeStatFields(inode: inode, node: node, changes: changes)
      return try await getattr(inode: inode)
    }
  }

  public func readlink(inode: UInt64) async throws -> [UInt8] {
    try await boundary("readlink") { try await symlinks.readlink(inode: inode) }
  }

  public func opendir(inode: UInt64) async throws -> OpenResult {
    let opened = try await boundary("opendir") {
      try await directories.opendir(inode: inode)
    }
    nodes.opened(inode)
    return opened
  }

  public func readdir(inode: UInt64, handle: UInt64, offset: UInt64, into buffer: DirectoryBuffer)
    async throws
  {
    try await boundary("readdir") {
      try await directories.readdir(inode: inode, handle: handle, offset: offset, into: buffer)
    }
  }

  public func releasedir(inode: UInt64, handle: UInt64) {
    close(handle, of: inode)
  }

  public func mkdir(parent: UInt64, name: String, mode: UInt32) async throws -> Entry {
    try await boundary("mkdir") {
      try await namespace.mkdir(parent: parent, name: name, mode: mode)
    }
  }

  public func mknod(parent: UInt64, name: String, mode: UInt32, device: UInt64) async throws -> Entry {
    try await boundary("mknod") {
      try await namespace.mknod(parent: parent, name: name, mode: mode, device: device)
    }
  }

  public func symlink(parent: UInt64, name: String, target: [UInt8]) async throws -> Entry {
    try await boundary("symlink") { try await symlinks.create(parent: parent, name: name, target: target) }
  }

  public func unlink(parent: UInt64, name: String) async throws {
    try await boundary("unlink") {
      try await namespace.unlink(parent: parent, name: name)
    }
  }

  public func rmdir(parent: UInt64, name: String) async throws {
    try await boundary("rmdir") {
      try await namespace.rmdir(parent: parent, name: name)
    }
  }

  public func rename(parent: UInt64, name: String, newParent: UInt64, newName: String, flags: RenameFlags)
    async throws
  {
    try await boundary("rename") {
      try await namespace.rename(
        parent: parent, name: name, newParent: newParent, newName: newName, flags: flags)
    }
  }
}

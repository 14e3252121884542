import FUSE

// Writes: answered EROFS until they land (issue 12).
extension BucketFileSystem {
  public func create(parent: UInt64, name: String, mode: UInt32, flags: Int32) async throws -> (
    Entry, OpenResult
  ) {
    throw Errno.readOnly
  }
  public func writeAtHand(inode: UInt64, handle: UInt64, offset: UInt64, data: UnsafeRawBufferPointer)
    -> Result<Int, Errno>?
  { .failure(.readOnly) }
  public func write(inode: UInt64, handle: UInt64, offset: UInt64, data: [UInt8]) async throws -> Int {
    throw Errno.readOnly
  }
  public func flush(inode: UInt64, handle: UInt64) async throws {}
  public func fsync(inode: UInt64, handle: UInt64, dataOnly: Bool) async throws {}
  public func setattr(inode: UInt64, handle: UInt64?, changes: AttributeChanges) async throws
    -> (FileAttributes, timeout: Double)
  { throw Errno.readOnly }
}

// What namespace changes need from the write layer (issue 12 fills these in).
extension BucketFileSystem {
  /// Uploads the staged bytes of `inode` if a handle holds them dirty, so a
  /// rename acts on stored bytes. No file is staged yet: nothing to do.
  func commitStaged(inode: UInt64) async throws {}

  /// Properties of generation `generation` of `key` that bucketfs inferred
  /// or generated (a contentType from the name, a generated download token)
  /// rather than the user set: an atomic save lets the replaced file's
  /// values win over these. Nothing is uploaded yet: none.
  func inferredProperties(of key: String, generation: Int64) -> Set<XattrName> { [] }

  /// `inode` was unlinked (its handles keep their bytes but never upload),
  /// or renamed to `newKey` (its handles upload there from now on).
  func stagedFileUnlinked(inode: UInt64) {}
  func stagedFileRenamed(inode: UInt64, to newKey: String, generation: Int64) {}
}

import ObjectStore

// Uploads, deletes, rewrites and moves: not sent yet (issue 12).
extension CloudStorageClient {
  public func upload(
    _ name: String, from source: any UploadSource, attributes: ObjectAttributes, ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    throw StorageError.unsupported("uploads are not implemented yet")
  }

  public func delete(_ name: String, ifGenerationMatch: Int64?) async throws {
    throw StorageError.unsupported("deletes are not implemented yet")
  }

  public func copy(
    _ source: String, sourceGeneration: Int64, to destination: String, attributes: ObjectAttributes?,
    ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    throw StorageError.unsupported("copies are not implemented yet")
  }

  public func move(
    _ source: String, sourceGeneration: Int64, to destination: String, ifGenerationMatch: Int64?
  )
    async throws -> ObjectMetadata
  {
    throw StorageError.unsupported("moves are not implemented yet")
  }
}

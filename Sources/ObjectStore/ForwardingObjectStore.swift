import NIOCore

/// A store that wraps another and changes some of its operations. Every
/// requirement forwards to the same requirement of `inner`, so a wrapper
/// implements only what it changes. Each operation has one form: a wrapper
/// that changes `read` or `list` sees every call of it, and every field of a
/// ``ListRequest`` (the early token taker too) and a read's spare buffer go
/// through whatever the wrapper does.
public protocol ForwardingObjectStore: ObjectStore {
  /// The store this one wraps.
  var inner: any ObjectStore { get }
}

extension ForwardingObjectStore {
  public var bucket: String { inner.bucket }

  public func list(_ request: ListRequest) async throws -> ListPage {
    try await inner.list(request)
  }

  public func metadata(of name: String) async throws -> ObjectMetadata {
    try await inner.metadata(of: name)
  }

  public func read(_ name: String, generation: Int64, range: Range<Int64>, reusing spare: SpareBuffer?)
    async throws -> ByteBuffer
  {
    try await inner.read(name, generation: generation, range: range, reusing: spare)
  }

  public func patch(
    _ name: String, _ patch: MetadataPatch, ifGenerationMatch: Int64?, ifMetagenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    try await inner.patch(
      name, patch, ifGenerationMatch: ifGenerationMatch, ifMetagenerationMatch: ifMetagenerationMatch)
  }

  public func upload(
    _ name: String, from source: any UploadSource, attributes: ObjectAttributes, ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    try await inner.upload(name, from: source, attributes: attributes, ifGenerationMatch: ifGenerationMatch)
  }

  public func delete(_ name: String, ifGenerationMatch: Int64?) async throws {
    try await inner.delete(name, ifGenerationMatch: ifGenerationMatch)
  }

  public func copy(
    _ source: String, sourceGeneration: Int64, to destination: String, attributes: ObjectAttributes?,
    ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    try await inner.copy(
      source, sourceGeneration: sourceGeneration, to: destination, attributes: attributes,
      ifGenerationMatch: ifGenerationMatch)
  }

  public func move(
    _ source: String, sourceGeneration: Int64, to destination: String, ifGenerationMatch: Int64?
  )
    async throws -> ObjectMetadata
  {
    try await inner.move(
      source, sourceGeneration: sourceGeneration, to: destination, ifGenerationMatch: ifGenerationMatch)
  }

  public var partPlan: PartPlan? { inner.partPlan }

  public func partedUpload() -> (any PartedUpload)? { inner.partedUpload() }

  public func forgetCopies(of name: String, generation: Int64) {
    inner.forgetCopies(of: name, generation: generation)
  }
}

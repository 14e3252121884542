import NIOCore

/// A store that wraps another and changes some of its operations. Every
/// requirement forwards to the same requirement of `inner`, so a wrapper
/// implements only what it changes, and nothing it leaves alone falls to a
/// default of ``ObjectStore`` that would drop a spare buffer or an early page
/// token on the way.
///
/// Listings have three forms (a token taker, an end offset), and each form
/// forwards on its own. A wrapper that changes the plain form must route the other form
/// through it (or change both alike), or callers of the other form bypass
/// the change: directory streams list with a token taker.
///
/// ```swift
/// func list(
///   prefix: String, delimiter: String?, includeTrailingDelimiter: Bool, pageSize: Int, pageToken: String?,
///   nextPageToken: @escaping @Sendable (String) -> Void
/// ) async throws -> ListPage {
///   let page = try await list(
///     prefix: prefix, delimiter: delimiter, includeTrailingDelimiter: includeTrailingDelimiter,
///     pageSize: pageSize, pageToken: pageToken)
///   if let token = page.nextPageToken { nextPageToken(token) }
///   return page
/// }
/// ```
public protocol ForwardingObjectStore: ObjectStore {
  /// The store this one wraps.
  var inner: any ObjectStore { get }
}

extension ForwardingObjectStore {
  public var bucket: String { inner.bucket }

  public func list(
    prefix: String, delimiter: String?, includeTrailingDelimiter: Bool, pageSize: Int, pageToken: String?
  ) async throws -> ListPage {
    try await inner.list(
      prefix: prefix, delimiter: delimiter, includeTrailingDelimiter: includeTrailingDelimiter,
      pageSize: pageSize, pageToken: pageToken)
  }

  public func list(
    prefix: String, delimiter: String?, includeTrailingDelimiter: Bool, pageSize: Int, pageToken: String?,
    nextPageToken: @escaping @Sendable (String) -> Void
  ) async throws -> ListPage {
    try await inner.list(
      prefix: prefix, delimiter: delimiter, includeTrailingDelimiter: includeTrailingDelimiter,
      pageSize: pageSize, pageToken: pageToken, nextPageToken: nextPageToken)
  }

  public func list(prefix: String, delimiter: String?, pageSize: Int, pageToken: String?, endOffset: String)
    async throws -> ListPage
  {
    try await inner.list(
      prefix: prefix, delimiter: delimiter, pageSize: pageSize, pageToken: pageToken, endOffset: endOffset)
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
}

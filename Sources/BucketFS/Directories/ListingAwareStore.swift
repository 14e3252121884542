import NIOCore
import ObjectStore

/// The store as the filesystem uses it: the one place every write tells the
/// ``DirectoryCache``, once, whichever operation made it (an upload, a copy,
/// a move, a delete, a compose) and whatever its outcome. A name stored
/// joins its directory's complete listing, and a directory placeholder
/// created where no object was (`ifGenerationMatch=0`) starts as a
/// complete, empty listing; a file deleted or moved away leaves it. A write
/// that fails drops the kept listings that show its name (a 412 or a 404
/// means another client changed it). Reads, listings and patches go to
/// `inner` unchanged.
struct ListingAwareStore: ForwardingObjectStore {
  let inner: any ObjectStore
  let directoryCache: DirectoryCache
  let clock: @Sendable () -> Double

  /// Runs a write; tells the cache what it changed, or that it failed.
  private func write<T>(
    _ keys: [String], _ body: () async throws -> T, changes: (T) -> [DirectoryCache.Change]
  ) async throws -> T {
    let result: T
    do {
      result = try await body()
    } catch {
      for key in keys { directoryCache.invalidate(.touched(key)) }
      throw error
    }
    for change in changes(result) { directoryCache.invalidate(change) }
    return result
  }

  func upload(
    _ name: String, from source: any UploadSource, attributes: ObjectAttributes, ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    let started = clock()
    return try await write([name]) {
      try await inner.upload(name, from: source, attributes: attributes, ifGenerationMatch: ifGenerationMatch)
    } changes: { _ in
      name.hasSuffix("/") && ifGenerationMatch == 0
        ? [.createdDirectory(name, since: started)] : [.stored(name)]
    }
  }

  func delete(_ name: String, ifGenerationMatch: Int64?) async throws {
    try await write([name]) {
      try await inner.delete(name, ifGenerationMatch: ifGenerationMatch)
    } changes: { _ in
      [.removed(name)]
    }
  }

  func copy(
    _ source: String, sourceGeneration: Int64, to destination: String, attributes: ObjectAttributes?,
    ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    try await write([destination]) {
      try await inner.copy(
        source, sourceGeneration: sourceGeneration, to: destination, attributes: attributes,
        ifGenerationMatch: ifGenerationMatch)
    } changes: { _ in
      [.stored(destination)]
    }
  }

  func move(_ source: String, sourceGeneration: Int64, to destination: String, ifGenerationMatch: Int64?)
    async throws -> ObjectMetadata
  {
    try await write([source, destination]) {
      try await inner.move(
        source, sourceGeneration: sourceGeneration, to: destination, ifGenerationMatch: ifGenerationMatch)
    } changes: { _ in
      [.removed(source), .stored(destination)]
    }
  }

  func partedUpload() -> (any PartedUpload)? {
    inner.partedUpload().map { ListedPartedUpload(inner: $0, store: self) }
  }

  /// The compose of a parted upload, told as an upload is.
  fileprivate func compose(
    _ upload: any PartedUpload, _ parts: [StoredPart], into name: String, attributes: ObjectAttributes,
    ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    try await write([name]) {
      try await upload.compose(
        parts, into: name, attributes: attributes, ifGenerationMatch: ifGenerationMatch)
    } changes: { _ in
      [.stored(name)]
    }
  }
}

/// A parted upload whose object joins its directory's listing, as an upload does.
struct ListedPartedUpload: PartedUpload {
  let inner: any PartedUpload
  let store: ListingAwareStore

  var prefix: String { inner.prefix }

  func store(_ source: any UploadSource) async throws -> StoredPart { try await inner.store(source) }

  func read(_ part: StoredPart, range: Range<Int64>) async throws -> ByteBuffer {
    try await inner.read(part, range: range)
  }

  func compose(
    _ parts: [StoredPart], into name: String, attributes: ObjectAttributes, ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    try await store.compose(
      inner, parts, into: name, attributes: attributes, ifGenerationMatch: ifGenerationMatch)
  }

  func combine(_ parts: [StoredPart]) async throws -> StoredPart { try await inner.combine(parts) }

  func remove(_ parts: [StoredPart]) async { await inner.remove(parts) }

  func removeParts(all: Bool) async { await inner.removeParts(all: all) }
}

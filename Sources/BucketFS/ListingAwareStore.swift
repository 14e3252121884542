import NIOCore
import ObjectStore

/// The store as the filesystem uses it: every name stored through it joins
/// its directory's complete listing, whichever operation stored it (an
/// upload, a copy, a move), and a directory placeholder created where no
/// object was (`ifGenerationMatch=0`) starts as a complete, empty listing.
/// Reads, listings and patches go to `inner` unchanged.
struct ListingAwareStore: ForwardingObjectStore {
  let inner: any ObjectStore
  let listings: SharedListings
  /// Listings kept by tree walks: a change through this store drops those it could make wrong.
  let walks: SubtreeWalks
  /// The kernel's cached listings: a change through this store ends those it could make wrong.
  let kernelListings: KernelListings
  let clock: @Sendable () -> Double

  func upload(
    _ name: String, from source: any UploadSource, attributes: ObjectAttributes, ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    let started = clock()
    let stored = try await inner.upload(
      name, from: source, attributes: attributes, ifGenerationMatch: ifGenerationMatch)
    walks.invalidateListings(under: name)
    kernelListings.changed(name)
    listings.withLock { listings in
      listings.add(key: name)
      if name.hasSuffix("/"), ifGenerationMatch == 0 {
        listings.record(directory: name, names: [], at: started)
      }
    }
    return stored
  }

  func delete(_ name: String, ifGenerationMatch: Int64?) async throws {
    try await inner.delete(name, ifGenerationMatch: ifGenerationMatch)
    walks.invalidateListings(under: name)
    kernelListings.changed(name)
  }

  func copy(
    _ source: String, sourceGeneration: Int64, to destination: String, attributes: ObjectAttributes?,
    ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    let stored = try await inner.copy(
      source, sourceGeneration: sourceGeneration, to: destination, attributes: attributes,
      ifGenerationMatch: ifGenerationMatch)
    walks.invalidateListings(under: destination)
    kernelListings.changed(destination)
    listings.withLock { $0.add(key: destination) }
    return stored
  }

  func move(_ source: String, sourceGeneration: Int64, to destination: String, ifGenerationMatch: Int64?)
    async throws -> ObjectMetadata
  {
    let stored = try await inner.move(
      source, sourceGeneration: sourceGeneration, to: destination, ifGenerationMatch: ifGenerationMatch)
    walks.invalidateListings(under: source)
    walks.invalidateListings(under: destination)
    kernelListings.changed(source)
    kernelListings.changed(destination)
    listings.withLock { $0.add(key: destination) }
    return stored
  }

  func partedUpload() -> (any PartedUpload)? {
    inner.partedUpload().map { ListedPartedUpload(inner: $0, store: self) }
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
    let stored = try await inner.compose(
      parts, into: name, attributes: attributes, ifGenerationMatch: ifGenerationMatch)
    store.walks.invalidateListings(under: name)
    store.listings.withLock { $0.add(key: name) }
    return stored
  }

  func combine(_ parts: [StoredPart]) async throws -> StoredPart { try await inner.combine(parts) }

  func remove(_ parts: [StoredPart]) async { await inner.remove(parts) }

  func removeParts(all: Bool) async { await inner.removeParts(all: all) }
}

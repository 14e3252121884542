import NIOCore
import ObjectStore
import Synchronization

/// Directories this mount has seen listed fresh and complete (a readdir from
/// the first entry to the last, or a directory it just created): a name not
/// in one is known absent without a lookup request while the record is
/// younger than the negative TTL. Names this mount stores are added, so only
/// another client's new objects can be missed, for as long as the kernel's
/// own negative entries would miss them.
struct CompleteListings: Sendable {
  struct Listing {
    var names: Set<ObjectKey>
    var at: Double
  }
  private var byDirectory: [ObjectKey: Listing] = [:]
  private var order: [ObjectKey] = []
  /// readdir passes under way, by directory handle.
  private var passes: [UInt64: (directory: String, names: Set<ObjectKey>, at: Double)] = [:]
  static let capacity = 256
  /// Larger directories are not recorded (their names would cost memory).
  static let maxNames = 10_000

  func knownAbsent(directory: String, name: String, now: Double, ttl: Double) -> Bool {
    guard let listing = byDirectory[ObjectKey(directory)], now - listing.at < ttl else { return false }
    return !listing.names.contains(ObjectKey(name))
  }

  mutating func record(directory: String, names: Set<ObjectKey>, at time: Double) {
    guard names.count <= Self.maxNames else { return }
    if byDirectory.updateValue(Listing(names: names, at: time), forKey: ObjectKey(directory)) == nil {
      order.append(ObjectKey(directory))
    }
    if order.count > Self.capacity {
      let old = order.removeFirst()
      byDirectory[old] = nil
    }
  }

  /// A key this mount stored (a file, or a directory's `name/` placeholder):
  /// its name joins its directory's record, and each directory on its path
  /// joins its parent's (a directory renamed here has no placeholder).
  mutating func add(key: String) {
    guard !byDirectory.isEmpty else { return }
    var rest = Substring(key)
    if rest.hasSuffix("/") { rest = rest.dropLast() }
    while !rest.isEmpty {
      let cut = rest.lastIndex(of: "/").map { rest.index(after: $0) } ?? rest.startIndex
      byDirectory[ObjectKey(rest[..<cut])]?.names.insert(ObjectKey(rest[cut...]))
      rest = cut == rest.startIndex ? "" : rest[..<rest.index(before: cut)]
    }
  }

  mutating func startPass(handle: UInt64, directory: String, at time: Double) {
    passes[handle] = (directory, [], time)
  }

  /// A name the pass handed the kernel, from a page answered at `answeredAt`:
  /// the listing is as fresh as its oldest page.
  mutating func note(handle: UInt64, name: String, answeredAt: Double) {
    guard passes[handle] != nil else { return }
    passes[handle]!.names.insert(ObjectKey(name))
    passes[handle]!.at = min(passes[handle]!.at, answeredAt)
    if passes[handle]!.names.count > Self.maxNames { passes[handle] = nil }
  }

  mutating func finishPass(handle: UInt64) {
    guard let pass = passes.removeValue(forKey: handle) else { return }
    record(directory: pass.directory, names: pass.names, at: pass.at)
  }

  mutating func dropPass(handle: UInt64) {
    passes[handle] = nil
  }
}

/// The listings one mount shares between its lookups and its store.
final class SharedListings: Sendable {
  let state = Mutex(CompleteListings())

  func withLock<T>(_ body: (inout CompleteListings) -> T) -> T {
    state.withLock { body(&$0) }
  }
}

/// The store as the filesystem uses it: every name stored through it joins
/// its directory's complete listing, whichever operation stored it (an
/// upload, a copy, a move), and a directory placeholder created where no
/// object was (`ifGenerationMatch=0`) starts as a complete, empty listing.
struct ListingAwareStore: ObjectStore {
  let inner: any ObjectStore
  let listings: SharedListings
  /// Listings kept by tree walks: a change through this store drops those it could make wrong.
  let walks: SubtreeWalks
  let clock: @Sendable () -> Double

  var bucket: String { inner.bucket }

  func list(prefix: String, delimiter: String?, pageSize: Int, pageToken: String?) async throws -> ListPage {
    try await inner.list(prefix: prefix, delimiter: delimiter, pageSize: pageSize, pageToken: pageToken)
  }

  func list(
    prefix: String, delimiter: String?, pageSize: Int, pageToken: String?,
    nextPageToken: @escaping @Sendable (String) -> Void
  ) async throws -> ListPage {
    try await inner.list(
      prefix: prefix, delimiter: delimiter, pageSize: pageSize, pageToken: pageToken,
      nextPageToken: nextPageToken)
  }

  func metadata(of name: String) async throws -> ObjectMetadata { try await inner.metadata(of: name) }

  func read(_ name: String, generation: Int64, range: Range<Int64>) async throws -> ByteBuffer {
    try await inner.read(name, generation: generation, range: range)
  }

  func read(_ name: String, generation: Int64, range: Range<Int64>, reusing spare: SpareBuffer)
    async throws -> ByteBuffer
  {
    try await inner.read(name, generation: generation, range: range, reusing: spare)
  }

  func patch(_ name: String, _ patch: MetadataPatch, ifMetagenerationMatch: Int64?) async throws
    -> ObjectMetadata
  {
    try await inner.patch(name, patch, ifMetagenerationMatch: ifMetagenerationMatch)
  }

  func upload(
    _ name: String, from source: any UploadSource, attributes: ObjectAttributes, ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    let started = clock()
    let stored = try await inner.upload(
      name, from: source, attributes: attributes, ifGenerationMatch: ifGenerationMatch)
    walks.invalidateListings(under: name)
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
  }

  func copy(
    _ source: String, sourceGeneration: Int64, to destination: String, attributes: ObjectAttributes?,
    ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    let stored = try await inner.copy(
      source, sourceGeneration: sourceGeneration, to: destination, attributes: attributes,
      ifGenerationMatch: ifGenerationMatch)
    walks.invalidateListings(under: destination)
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
    listings.withLock { $0.add(key: destination) }
    return stored
  }
}

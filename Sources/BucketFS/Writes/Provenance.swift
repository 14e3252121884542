import ObjectStore
import Synchronization

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

/// Which properties of the objects this mount stored it chose itself, and
/// which objects it created lately: what two policies decide with
/// (docs/SEMANTICS.md#writes).
/// - An atomic save (``AtomicSave``) lets the replaced file's values win
///   over the properties bucketfs inferred (a contentType from a temp
///   file's name, a generated download token), per key and generation.
/// - Read-only names a copying tool sets or removes on a file this mount
///   created within the metadata TTL are ignored (rsync -X reopens its temp
///   file to set them after closing it).
final class Provenance: Sendable {
  static let firebaseTokenKey = "firebaseStorageDownloadTokens"
  /// Uploads remembered, oldest dropped first.
  static let capacity = 4096

  private struct Version: Hashable, Sendable {
    let key: ObjectKey
    let generation: Int64
  }
  private struct State {
    var inferred = BoundedMap<Version, Set<XattrName>>(capacity: Provenance.capacity)
    /// When each object was created through the mount.
    var created = BoundedMap<ObjectKey, Double>(capacity: Provenance.capacity)
  }
  private let state = Mutex(State())
  private let contentTypes: ContentTypes
  private let configuration: Configuration
  private let clock: @Sendable () -> Double

  init(configuration: Configuration, clock: @escaping @Sendable () -> Double) {
    self.contentTypes = ContentTypes(mimeTypesPath: configuration.mimeTypesPath)
    self.configuration = configuration
    self.clock = clock
  }

  /// What a new file is stored with (`mode` after the umask), and which of
  /// it bucketfs chose: a content type from the name, and a download token
  /// when the mount gives them.
  func newFile(name: String, mode: UInt32) -> (ObjectAttributes, inferred: Set<XattrName>) {
    var attributes = ObjectAttributes()
    attributes.custom = configuration.newObjectPosix(mode: mode)
    attributes.contentType = contentTypes.type(for: name)
    var inferred: Set<XattrName> = [.writable(.contentType)]
    if configuration.firebaseDownloadTokens {
      attributes.custom[Self.firebaseTokenKey] = UUID().uuidString.lowercased()
      inferred.insert(.custom(Self.firebaseTokenKey))
    }
    return (attributes, inferred)
  }

  /// Generation `generation` of `key` was stored (uploaded, or moved there)
  /// with `inferred` still only inferred; `created` when it is a new object
  /// the mount created.
  func stored(key: String, generation: Int64, inferred: Set<XattrName>, created: Bool = false) {
    let now = clock()
    state.withLock { state in
      if !inferred.isEmpty {
        state.inferred.insert(inferred, for: Version(key: ObjectKey(key), generation: generation))
      }
      if created { state.created.insert(now, for: ObjectKey(key)) }
    }
  }

  /// Properties of generation `generation` of `key` that bucketfs inferred
  /// or generated rather than the user set.
  func inferred(key: String, generation: Int64) -> Set<XattrName> {
    state.withLock { $0.inferred[Version(key: ObjectKey(key), generation: generation)] ?? [] }
  }

  /// The user set `property` of `key`'s generation: no longer inferred.
  func userSet(_ property: XattrName, key: String, generation: Int64) {
    let version = Version(key: ObjectKey(key), generation: generation)
    state.withLock { state in
      guard var properties = state.inferred[version], properties.remove(property) != nil else { return }
      state.inferred.insert(properties, for: version)
    }
  }

  /// Whether this mount created `key` within the metadata TTL.
  func isRecentlyCreated(_ key: String) -> Bool {
    let now = clock()
    return state.withLock { $0.created[ObjectKey(key)] }.map { now - $0 < configuration.metadataTTL } ?? false
  }
}

extension Provenance: NameChangeObserver {
  /// What bucketfs chose of a moved file stays chosen at its new name, but
  /// for what the replaced file had (an atomic save carries those over).
  func observe(_ change: NameChange) {
    let moves: [FileMove]
    switch change {
    case .fileRenamed(let move): moves = [move]
    case .directoryRenamed(let all, _): moves = all
    }
    for move in moves {
      let inferred = inferred(key: move.from, generation: move.sourceGeneration).filter { property in
        move.replaced.map { property.value(in: $0) == nil } ?? true
      }
      stored(key: move.to.name, generation: move.to.generation, inferred: inferred)
    }
  }
}

import ObjectStore

/// The JSON API's compose, with its rules: 1 to 32 sources in this bucket,
/// each live (a named generation must be the live one: 404 otherwise) and
/// matching its own `ifGenerationMatch` (412); the destination's
/// `ifGenerationMatch` / `ifMetagenerationMatch`; at most 1024 components in
/// the result. The result has a crc32c and no md5Hash, and a `componentCount`.
extension InMemoryObjectStore {
  /// One source of a compose: its generation and precondition when given.
  public struct ComposeSource: Sendable, Equatable {
    public var name: String
    public var generation: Int64?
    public var ifGenerationMatch: Int64?

    public init(_ name: String, generation: Int64? = nil, ifGenerationMatch: Int64? = nil) {
      self.name = name
      self.generation = generation
      self.ifGenerationMatch = ifGenerationMatch
    }
  }

  public static let maxComposeSources = 32
  public static let maxComponents = 1024

  public func compose(
    _ sources: [ComposeSource], into destination: String, attributes: ObjectAttributes,
    ifGenerationMatch: Int64?, ifMetagenerationMatch: Int64? = nil
  ) async throws -> ObjectMetadata {
    try await enter(.compose(sources.map(\.name), to: destination, ifGenerationMatch: ifGenerationMatch))
    runHooks(.compose)
    guard (1...Self.maxComposeSources).contains(sources.count) else {
      throw StorageError.badRequest(
        "The number of source components provided (\(sources.count)) must be 1 to \(Self.maxComposeSources).")
    }
    try Self.checkCustomLimits(attributes.custom)
    var attributes = attributes
    if attributes.contentType?.isEmpty ?? true { attributes.contentType = "application/octet-stream" }
    return try state.withLock { (s: inout State) throws(StorageError) -> ObjectMetadata in
      var data: [UInt8] = []
      var components = 0
      for source in sources {
        guard let entry = s.objects[Key(source.name.utf8)],
          source.generation.map({ $0 == entry.meta.generation }) ?? true
        else { throw .notFound }
        if let expected = source.ifGenerationMatch, expected != entry.meta.generation {
          throw .preconditionFailed
        }
        data += entry.data
        components += entry.components ?? 1
      }
      let live = s.objects[Key(destination.utf8)]
      try Self.check(ifGenerationMatch, against: live)
      if let expected = ifMetagenerationMatch, expected != live?.meta.metageneration {
        throw .preconditionFailed
      }
      guard components <= Self.maxComponents else {
        throw .badRequest(
          "The composite would have \(components) components; the limit is \(Self.maxComponents).")
      }
      return storeLocked(&s, name: destination, data: data, attributes: attributes, components: components)
    }
  }

  /// The `componentCount` of a composite object; nil for others and for missing names.
  public func componentCount(_ name: String) -> Int? {
    state.withLock { $0.objects[Key(name.utf8)]?.components }
  }
}

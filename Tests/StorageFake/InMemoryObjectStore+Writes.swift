import NIOCore
import ObjectStore

/// Uploads, deletes, copies (rewrite) and moves, with the service's
/// preconditions: `ifGenerationMatch` 0 means "no live object", n means
/// "generation n is live"; a mismatch is a 412 and changes nothing.
extension InMemoryObjectStore {
  /// Whether ``move(_:sourceGeneration:to:ifGenerationMatch:)`` is offered;
  /// when not, it throws ``StorageError/unsupported(_:)`` as a bucket without it would.
  public var supportsMove: Bool {
    get { state.withLock { $0.supportsMove } }
    set { state.withLock { $0.supportsMove = newValue } }
  }

  /// Runs `action` inside the next call of `kind` (upload, delete, copy, move),
  /// after its fault check and before its preconditions are evaluated: a
  /// concurrent writer at the worst moment.
  public func beforeNext(_ kind: CallKind, _ action: @escaping @Sendable (InMemoryObjectStore) -> Void) {
    state.withLock { $0.writeHooks[kind, default: []].append(action) }
  }

  public func upload(
    _ name: String, from source: any UploadSource, attributes: ObjectAttributes, ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    try await enter(.upload(name, ifGenerationMatch: ifGenerationMatch))
    runHooks(.upload)
    // Read the whole source first: a source that fails stores nothing.
    var data: [UInt8] = []
    data.reserveCapacity(Int(source.size))
    while Int64(data.count) < source.size {
      let piece = try source.read(at: Int64(data.count), count: min(1 << 20, Int(source.size) - data.count))
      if piece.readableBytes == 0 { break }
      data += piece.readableBytesView
    }
    guard Int64(data.count) == source.size else {
      throw StorageError.invalidResponse("upload source ended at \(data.count) of \(source.size) bytes")
    }
    try Self.checkCustomLimits(attributes.custom)
    // The service stores application/octet-stream when an upload names no type.
    var attributes = attributes
    if attributes.contentType?.isEmpty ?? true { attributes.contentType = "application/octet-stream" }
    return try state.withLock { (s: inout State) throws(StorageError) -> ObjectMetadata in
      try Self.check(ifGenerationMatch, against: s.objects[Key(name.utf8)])
      return storeLocked(&s, name: name, data: data, attributes: attributes)
    }
  }

  public func delete(_ name: String, ifGenerationMatch: Int64?) async throws {
    try await enter(.delete(name, ifGenerationMatch: ifGenerationMatch))
    runHooks(.delete)
    try state.withLock { (s: inout State) throws(StorageError) in
      let key = Key(name.utf8)
      guard let entry = s.objects[key] else { throw .notFound }
      if let expected = ifGenerationMatch, expected != entry.meta.generation { throw .preconditionFailed }
      Self.removeLocked(&s, key)
    }
  }

  public func copy(
    _ source: String, sourceGeneration: Int64, to destination: String, attributes: ObjectAttributes?,
    ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    try await enter(.copy(source, to: destination, ifGenerationMatch: ifGenerationMatch))
    runHooks(.copy)
    if let attributes { try Self.checkCustomLimits(attributes.custom) }
    return try state.withLock { (s: inout State) throws(StorageError) -> ObjectMetadata in
      guard let from = s.objects[Key(source.utf8)], from.meta.generation == sourceGeneration else {
        throw .notFound
      }
      try Self.check(ifGenerationMatch, against: s.objects[Key(destination.utf8)])
      return storeLocked(
        &s, name: destination, data: from.data, attributes: attributes ?? ObjectAttributes(of: from.meta))
    }
  }

  public func move(
    _ source: String, sourceGeneration: Int64, to destination: String, ifGenerationMatch: Int64?
  )
    async throws -> ObjectMetadata
  {
    try await enter(.move(source, to: destination, ifGenerationMatch: ifGenerationMatch))
    runHooks(.move)
    return try state.withLock { (s: inout State) throws(StorageError) -> ObjectMetadata in
      guard s.supportsMove else { throw .unsupported("this bucket does not support moving objects") }
      guard !source.utf8.elementsEqual(destination.utf8) else {  // names are bytes, not Unicode-equivalent strings
        throw .badRequest("Source and destination object names must differ.")
      }
      let sourceKey = Key(source.utf8)
      // The service: no source is a 404, another generation of it fails ifSourceGenerationMatch.
      guard let from = s.objects[sourceKey] else { throw .notFound }
      guard from.meta.generation == sourceGeneration else { throw .preconditionFailed }
      try Self.check(ifGenerationMatch, against: s.objects[Key(destination.utf8)])
      let moved = storeLocked(
        &s, name: destination, data: from.data, attributes: ObjectAttributes(of: from.meta))
      Self.removeLocked(&s, sourceKey)
      return moved
    }
  }

  func runHooks(_ kind: CallKind) {
    let hooks = state.withLock { s in
      defer { s.writeHooks[kind] = nil }
      return s.writeHooks[kind] ?? []
    }
    for hook in hooks { hook(self) }
  }

  static func check(_ ifGenerationMatch: Int64?, against entry: Entry?) throws(StorageError) {
    guard let expected = ifGenerationMatch else { return }
    if expected != (entry?.meta.generation ?? 0) { throw .preconditionFailed }
  }

  static func removeLocked(_ s: inout State, _ key: Key) {
    guard s.objects.removeValue(forKey: key) != nil else { return }
    if let index = s.keys.firstIndex(of: key) { s.keys.remove(at: index) }
  }

  /// A new generation of `name`, metageneration 1, as an upload makes it;
  /// with `components`, a composite object (a crc32c but no md5Hash).
  func storeLocked(
    _ s: inout State, name: String, data: [UInt8], attributes: ObjectAttributes, components: Int? = nil
  ) -> ObjectMetadata {
    let key = Key(name.utf8)
    let now = Timestamp.nowMillis()
    // Generations are microsecond timestamps in the service; keep them unique and rising.
    let generation = max(now * 1000, s.lastGeneration + 1)
    s.lastGeneration = generation
    let time = Timestamp.rfc3339(millis: now)
    var meta = ObjectMetadata(
      bucket: bucket, name: name, size: Int64(data.count), generation: generation, metageneration: 1,
      timeCreated: time, updated: time, md5Hash: components == nil ? Checksum.md5Base64(data) : nil,
      crc32c: Checksum.crc32cBase64(data),
      etag: Self.etag(generation: generation, metageneration: 1), storageClass: "STANDARD",
      custom: attributes.custom)
    for (field, value) in attributes.fields { meta[field] = value }
    if s.objects.updateValue(
      Entry(meta: meta, data: data, updatedMillis: now, components: components), forKey: key) == nil
    {
      if let last = s.keys.last, !last.precedes(key) { s.keysSorted = false }
      s.keys.append(key)
    }
    return meta
  }
}

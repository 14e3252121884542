import NIOCore
import ObjectStore
import Synchronization

/// The in-memory store with a log of which requirement each call came in
/// by, overloads apart (and lists by what their request carried): every
/// requirement is implemented here, none left to a default, so the log shows
/// what a wrapper around it forwards and how.
public final class RecordingStore: ObjectStore {
  /// One requirement of ``ObjectStore``; a list with a token taker or an end
  /// offset is its own case.
  public enum Requirement: Sendable, Hashable, CaseIterable {
    case bucket, list, listHandingToken, listEnding, metadata, read, readReusing, patch, upload, delete, copy,
      move
  }

  public let base: InMemoryObjectStore
  private let log = Mutex<[Requirement]>([])

  public init(_ base: InMemoryObjectStore) { self.base = base }

  /// The requirements called, in order.
  public var calls: [Requirement] { log.withLock { $0 } }

  public func resetCalls() { log.withLock { $0.removeAll() } }

  private func note(_ requirement: Requirement) { log.withLock { $0.append(requirement) } }

  public var bucket: String {
    note(.bucket)
    return base.bucket
  }

  /// Noted by what the request carries: a token taker, an end offset, or neither.
  public func list(_ request: ListRequest) async throws -> ListPage {
    note(request.onNextPageToken != nil ? .listHandingToken : request.endOffset != nil ? .listEnding : .list)
    return try await base.list(request)
  }

  public func metadata(of name: String) async throws -> ObjectMetadata {
    note(.metadata)
    return try await base.metadata(of: name)
  }

  public func read(_ name: String, generation: Int64, range: Range<Int64>, reusing spare: SpareBuffer?)
    async throws -> ByteBuffer
  {
    note(spare == nil ? .read : .readReusing)
    return try await base.read(name, generation: generation, range: range, reusing: spare)
  }

  public func patch(
    _ name: String, _ patch: MetadataPatch, ifGenerationMatch: Int64?, ifMetagenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    note(.patch)
    return try await base.patch(
      name, patch, ifGenerationMatch: ifGenerationMatch, ifMetagenerationMatch: ifMetagenerationMatch)
  }

  public func upload(
    _ name: String, from source: any UploadSource, attributes: ObjectAttributes, ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    note(.upload)
    return try await base.upload(
      name, from: source, attributes: attributes, ifGenerationMatch: ifGenerationMatch)
  }

  public func delete(_ name: String, ifGenerationMatch: Int64?) async throws {
    note(.delete)
    try await base.delete(name, ifGenerationMatch: ifGenerationMatch)
  }

  public func copy(
    _ source: String, sourceGeneration: Int64, to destination: String, attributes: ObjectAttributes?,
    ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    note(.copy)
    return try await base.copy(
      source, sourceGeneration: sourceGeneration, to: destination, attributes: attributes,
      ifGenerationMatch: ifGenerationMatch)
  }

  public func move(
    _ source: String, sourceGeneration: Int64, to destination: String, ifGenerationMatch: Int64?
  )
    async throws -> ObjectMetadata
  {
    note(.move)
    return try await base.move(
      source, sourceGeneration: sourceGeneration, to: destination, ifGenerationMatch: ifGenerationMatch)
  }
}

extension RecordingStore {
  /// Calls every requirement of `store` once, in ``Requirement/allCases``
  /// order, on objects seeded in ``base``; returns what it saw: the bucket,
  /// the token the token-handing list handed, and the bytes of both reads.
  public func callEveryRequirement(of store: any ObjectStore) async throws -> Exercise {
    var seen = Exercise()
    base.put("d/a", data: [1, 2, 3])
    base.put("d/b", data: [4])
    // A subdirectory's placeholder: an item only when includeTrailingDelimiter reaches the base.
    base.put("d/s/", data: [])
    let object = base.object("d/a")!
    seen.bucket = store.bucket
    seen.listed = try await store.list(
      ListRequest(
        prefix: "d/", delimiter: "/", includeTrailingDelimiter: true, pageSize: 10
      )
    ).items.count
    let handed = Locked<String?>(nil)
    let page = try await store.list(
      ListRequest(
        prefix: "d/", delimiter: "/", includeTrailingDelimiter: true, pageSize: 1,
        onNextPageToken: { token in handed.withLock { $0 = token } }))
    seen.handedToken = handed.withLock { $0 } == page.nextPageToken && page.nextPageToken != nil
    seen.listedBefore = try await store.list(
      ListRequest(
        prefix: "d/", pageSize: 10, endOffset: "d/b"
      )
    ).items.map(\.name)
    seen.metadata = try await store.metadata(of: "d/a").name
    seen.read = try await store.read("d/a", generation: object.generation, range: 0..<3, reusing: nil).array
    let spare = ByteBufferAllocator().buffer(capacity: 64)
    seen.readReusing = try await store.read(
      "d/a", generation: object.generation, range: 1..<3, reusing: SpareBuffer(spare)
    ).array
    let patched = try await store.patch(
      "d/a", MetadataPatch(custom: ["k": "v"]), ifMetagenerationMatch: object.metageneration)
    seen.patchedCustom = patched.custom
    let uploaded = try await store.upload(
      "d/c", from: BytesSource([7]), attributes: ObjectAttributes(), ifGenerationMatch: 0)
    try await store.delete("d/b", ifGenerationMatch: nil)
    let copied = try await store.copy(
      "d/c", sourceGeneration: uploaded.generation, to: "d/e", attributes: nil, ifGenerationMatch: 0)
    _ = try await store.move("d/e", sourceGeneration: copied.generation, to: "d/f", ifGenerationMatch: 0)
    seen.names = base.names
    return seen
  }

  /// What ``callEveryRequirement(of:)`` sees.
  public struct Exercise: Sendable, Equatable {
    /// What a store that changes none of the answers shows, in bucket "b".
    public static let unchanged = Exercise(
      bucket: "b", listed: 3, handedToken: true, listedBefore: ["d/a"], metadata: "d/a", read: [1, 2, 3],
      readReusing: [2, 3], patchedCustom: ["k": "v"], names: ["d/a", "d/c", "d/f", "d/s/"])

    public var bucket = ""
    public var listed = 0
    public var handedToken = false
    public var listedBefore: [String] = []
    public var metadata = ""
    public var read: [UInt8] = []
    public var readReusing: [UInt8] = []
    public var patchedCustom: [String: String] = [:]
    public var names: [String] = []
  }
}

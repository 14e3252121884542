import NIOCore

/// The writable properties an object is stored with: the standard ones and
/// the custom map. Everything else (size, hashes, times, generations) the
/// service decides.
public struct ObjectAttributes: Sendable, Equatable {
  public var fields: [ObjectMetadata.WritableField: String]
  public var custom: [String: String]

  public init(fields: [ObjectMetadata.WritableField: String] = [:], custom: [String: String] = [:]) {
    self.fields = fields
    self.custom = custom
  }

  /// The writable properties `metadata` has: what an edit carries across.
  public init(of metadata: ObjectMetadata) {
    var fields: [ObjectMetadata.WritableField: String] = [:]
    for field in ObjectMetadata.WritableField.allCases {
      if let value = metadata[field] { fields[field] = value }
    }
    self.init(fields: fields, custom: metadata.custom)
  }

  public var contentType: String? {
    get { fields[.contentType] }
    set { fields[.contentType] = newValue }
  }
}

/// The bytes of an upload, read in pieces: a staged file on disk in the
/// filesystem, memory in tests. An upload may read a range more than once
/// (a resumed session re-sends what the service did not keep).
public protocol UploadSource: Sendable {
  var size: Int64 { get }
  /// `count` bytes at `offset`; fewer only at the end. Throws for local
  /// failures (an unreadable stage), which the upload passes on unchanged.
  func read(at offset: Int64, count: Int) throws -> ByteBuffer
  /// The same bytes, for a caller on the concurrency pool: a source on
  /// disk reads them on an I/O thread. By default ``read(at:count:)``.
  func load(at offset: Int64, count: Int) async throws -> ByteBuffer
  /// The same bytes, written into `spare`'s memory when nothing else holds
  /// it any more (a sender's piece from two pieces back): pages already
  /// mapped, not fresh ones. By default ``load(at:count:)``.
  func load(at offset: Int64, count: Int, reusing spare: SpareBuffer) async throws -> ByteBuffer
  /// The CRC-32C of all the source's bytes when its owner summed them as
  /// they were written (a file written in order): the upload declares it
  /// without reading them first. Nil: unknown. By default nil.
  var crc32c: UInt32? { get }
  /// Gives the file holding the source's bytes a second name, `path` (a
  /// hard link), so a cache can keep the bytes just stored without copying
  /// them; false where it cannot (bytes in memory, another filesystem). The
  /// source's owner removes that name before it changes the bytes again.
  func link(to path: String) -> Bool
}

extension UploadSource {
  public func link(to path: String) -> Bool { false }
  public func load(at offset: Int64, count: Int) async throws -> ByteBuffer {
    try read(at: offset, count: count)
  }
  public func load(at offset: Int64, count: Int, reusing spare: SpareBuffer) async throws -> ByteBuffer {
    try await load(at: offset, count: count)
  }
  public var crc32c: UInt32? { nil }
}

/// An upload source over bytes in memory.
public struct BytesSource: UploadSource {
  public let bytes: [UInt8]
  public init(_ bytes: [UInt8]) { self.bytes = bytes }
  public var size: Int64 { Int64(bytes.count) }
  public func read(at offset: Int64, count: Int) throws -> ByteBuffer {
    let start = Int(min(max(offset, 0), Int64(bytes.count)))
    let end = min(start + max(count, 0), bytes.count)
    return ByteBuffer(bytes: bytes[start..<end])
  }
}

import NIOCore
import ObjectStore

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

/// The JSON API's object resource, read leniently where the service is
/// strict: int64 fields arrive as strings, but numbers are accepted too, and
/// `null` counts as absent.
struct ObjectResource {
  /// Whether this resource carries everything a cache entry needs; a PATCH
  /// answer that does not is followed by a GET.
  var isComplete: Bool { generation != nil && metageneration != nil && timeCreated != nil && size != nil }

  var bucket: String?
  var name = ""
  var size: Int64?
  var generation: Int64?
  var metageneration: Int64?
  var timeCreated: String?
  var updated: String?
  var md5Hash: String?
  var crc32c: String?
  var etag: String?
  var storageClass: String?
  var cacheControl: String?
  var contentDisposition: String?
  var contentEncoding: String?
  var contentLanguage: String?
  var contentType: String?
  var metadata: [String: String]?

  init(reading reader: inout JSONReader) throws {
    var named: String?
    try reader.readObject { key, reader in
      switch key {
      case "bucket": bucket = try reader.readOptionalString()
      case "name": named = try reader.readOptionalString()
      case "size": size = try reader.readOptionalInt64()
      case "generation": generation = try reader.readOptionalInt64()
      case "metageneration": metageneration = try reader.readOptionalInt64()
      case "timeCreated": timeCreated = try reader.readOptionalString()
      case "updated": updated = try reader.readOptionalString()
      case "md5Hash": md5Hash = try reader.readOptionalString()
      case "crc32c": crc32c = try reader.readOptionalString()
      case "etag": etag = try reader.readOptionalString()
      case "storageClass": storageClass = try reader.readOptionalString()
      case "cacheControl": cacheControl = try reader.readOptionalString()
      case "contentDisposition": contentDisposition = try reader.readOptionalString()
      case "contentEncoding": contentEncoding = try reader.readOptionalString()
      case "contentLanguage": contentLanguage = try reader.readOptionalString()
      case "contentType": contentType = try reader.readOptionalString()
      case "metadata":
        if try reader.readNull() { break }
        var custom: [String: String] = [:]
        try reader.readObject { key, reader in custom[key] = try reader.readOptionalString() }
        metadata = custom
      default: try reader.skipValue()
      }
    }
    guard let named else { throw JSONReader.Failure(offset: reader.offset, reason: "object without a name") }
    name = named
  }

  /// CRC32C (and MD5, when sent) of zero bytes.
  private var isEmptyByChecksums: Bool {
    crc32c == "AAAAAA==" && (md5Hash == nil || md5Hash == "1B2M2Y8AsgTpgAmY7PhCfg==")
  }

  func metadata(defaultBucket: String) throws(StorageError) -> ObjectMetadata {
    guard let generation else {
      throw .invalidResponse("object \(name) has no generation")
    }
    guard let metageneration else {
      throw .invalidResponse("object \(name) has no metageneration")
    }
    // Without its size a file would show empty, and a write to it would
    // replace the object's bytes with only the new ones. An answer that
    // omits a zero size (protobuf's JSON does, as storage-testbench shows)
    // is taken at its checksums: those of no bytes mean 0.
    guard let size = size ?? (isEmptyByChecksums ? 0 : nil) else {
      throw .invalidResponse("object \(name) has no size")
    }
    guard size >= 0, generation >= 0, metageneration >= 0 else {
      throw .invalidResponse(
        "object \(name) has a negative size \(size), generation \(generation) or metageneration \(metageneration)"
      )
    }
    // The service omits unset properties; an empty one is unset too.
    func present(_ value: String?) -> String? { value?.isEmpty == false ? value : nil }
    return ObjectMetadata(
      bucket: bucket ?? defaultBucket, name: name, size: size, generation: generation,
      metageneration: metageneration, timeCreated: timeCreated ?? "", updated: updated ?? timeCreated ?? "",
      md5Hash: present(md5Hash), crc32c: present(crc32c), etag: present(etag),
      storageClass: present(storageClass),
      cacheControl: present(cacheControl), contentDisposition: present(contentDisposition),
      contentEncoding: present(contentEncoding), contentLanguage: present(contentLanguage),
      contentType: present(contentType), custom: metadata ?? [:])
  }
}

/// A page of a list answer.
struct ObjectList {
  var items: [ObjectResource] = []
  var prefixes: [String] = []
  var nextPageToken: String?

  init(reading reader: inout JSONReader) throws {
    try reader.readObject { key, reader in
      switch key {
      case "items":
        if try reader.readNull() { break }
        try reader.readArray { reader in items.append(try ObjectResource(reading: &reader)) }
      case "prefixes":
        if try reader.readNull() { break }
        try reader.readArray { reader in
          if let prefix = try reader.readOptionalString() { prefixes.append(prefix) }
        }
      case "nextPageToken": nextPageToken = try reader.readOptionalString()
      default: try reader.skipValue()
      }
    }
  }

  /// What the start of a list answer shows of its `nextPageToken`.
  enum LeadingToken: Equatable {
    /// The token (nil: null), before any entry.
    case found(String?)
    /// Entries come first (or the answer ended): the token, if any, is later.
    case notFirst
    /// The bytes so far end before either shows.
    case incomplete
  }

  /// The `nextPageToken` of a list answer from its first bytes, when it
  /// comes before `items` and `prefixes` (the service's documented order):
  /// the next page can be asked for while the rest of this one arrives.
  static func leadingNextPageToken(in head: ByteBuffer) -> LeadingToken {
    head.withUnsafeReadableBytes { bytes in
      var reader = JSONReader(bytes)
      var result = LeadingToken.notFirst
      do {
        try reader.readObject { key, reader in
          switch key {
          case "nextPageToken":
            result = .found(try reader.readOptionalString())
            throw Found()
          case "items", "prefixes": throw Found()
          default: try reader.skipValue()
          }
        }
      } catch is Found {
        return result
      } catch {
        return .incomplete
      }
      return .notFirst
    }
  }

  /// The top-level `nextPageToken` of a list answer, found without decoding
  /// the rest; nil when absent, null or the text is not a JSON object. At
  /// the end (where the emulator puts it) it is read from there; otherwise
  /// the top level is scanned from the start, skipping values.
  static func nextPageToken(in body: ByteBuffer) -> String? {
    body.withUnsafeReadableBytes { bytes in
      if let token = JSONReader.trailingString(named: "nextPageToken", in: bytes) { return token }
      var reader = JSONReader(bytes)
      var token: String?
      do {
        try reader.readObject { key, reader in
          if key == "nextPageToken" {
            token = try reader.readOptionalString()
            throw Found()
          }
          try reader.skipValue()
        }
      } catch is Found {
        return token
      } catch {
        return nil
      }
      return nil
    }
  }
  private struct Found: Error {}
}

struct ErrorBody: Decodable {
  struct Detail: Decodable {
    var code: Int?
    var message: String?
  }
  var error: Detail?
}

/// Any key of a JSON object the client writes.
struct JSONKey: CodingKey {
  var stringValue: String
  var intValue: Int? { nil }
  init(_ string: String) { stringValue = string }
  init?(stringValue: String) { self.stringValue = stringValue }
  init?(intValue: Int) { nil }
}

/// A PATCH body: only the fields the patch names, JSON `null` for removal.
struct PatchBody: Encodable {
  let patch: MetadataPatch

  func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: JSONKey.self)
    for (field, value) in patch.fields.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
      if let value {
        try container.encode(value, forKey: JSONKey(field.rawValue))
      } else {
        try container.encodeNil(forKey: JSONKey(field.rawValue))
      }
    }
    guard !patch.custom.isEmpty else { return }
    var custom = container.nestedContainer(keyedBy: JSONKey.self, forKey: JSONKey("metadata"))
    for (key, value) in patch.custom.sorted(by: { $0.key < $1.key }) {
      if let value {
        try custom.encode(value, forKey: JSONKey(key))
      } else {
        try custom.encodeNil(forKey: JSONKey(key))
      }
    }
  }
}

/// Only the fields the filesystem uses, so list pages stay small.
enum Fields {
  static let object =
    "bucket,name,size,generation,metageneration,timeCreated,updated,md5Hash,crc32c,etag,storageClass,"
    + "cacheControl,contentDisposition,contentEncoding,contentLanguage,contentType,metadata"
  static let list = "nextPageToken,prefixes,items(\(object))"
}

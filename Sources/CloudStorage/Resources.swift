import ObjectStore

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

/// The JSON API's object resource, decoded leniently where the service is
/// strict: int64 fields arrive as strings, but numbers are accepted too.
struct ObjectResource: Decodable {
  /// Whether this resource carries everything a cache entry needs; a PATCH
  /// answer that does not is followed by a GET.
  var isComplete: Bool { generation != nil && metageneration != nil && timeCreated != nil && size != nil }

  var bucket: String?
  var name: String
  var size: FlexibleInt64?
  var generation: FlexibleInt64?
  var metageneration: FlexibleInt64?
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
  var metadata: [String: String?]?

  func metadata(defaultBucket: String) throws(StorageError) -> ObjectMetadata {
    guard let generation = generation?.value else {
      throw .invalidResponse("object \(name) has no generation")
    }
    guard let metageneration = metageneration?.value else {
      throw .invalidResponse("object \(name) has no metageneration")
    }
    // The service omits unset properties; an empty one is unset too.
    func present(_ value: String?) -> String? { value?.isEmpty == false ? value : nil }
    return ObjectMetadata(
      bucket: bucket ?? defaultBucket, name: name, size: size?.value ?? 0, generation: generation,
      metageneration: metageneration, timeCreated: timeCreated ?? "", updated: updated ?? timeCreated ?? "",
      md5Hash: present(md5Hash), crc32c: present(crc32c), etag: present(etag),
      storageClass: present(storageClass),
      cacheControl: present(cacheControl), contentDisposition: present(contentDisposition),
      contentEncoding: present(contentEncoding), contentLanguage: present(contentLanguage),
      contentType: present(contentType), custom: (metadata ?? [:]).compactMapValues { $0 })
  }
}

struct FlexibleInt64: Decodable {
  let value: Int64

  init(from decoder: any Decoder) throws {
    let container = try decoder.singleValueContainer()
    // The string form first: it is the service's, and a failed attempt costs
    // a thrown error, which on a page of 1,000 objects adds up.
    if let text = try? container.decode(String.self) {
      guard let number = Int64(text) else {
        throw DecodingError.dataCorruptedError(in: container, debugDescription: "not an int64: \(text)")
      }
      value = number
    } else {
      value = try container.decode(Int64.self)
    }
  }
}

struct ObjectList: Decodable {
  var items: [ObjectResource]?
  var prefixes: [String]?
  var nextPageToken: String?
}

struct ErrorBody: Decodable {
  struct Detail: Decodable {
    var code: Int?
    var message: String?
  }
  var error: Detail?
}

/// A PATCH body: only the fields the patch names, JSON `null` for removal.
struct PatchBody: Encodable {
  let patch: MetadataPatch

  private struct Key: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(_ string: String) { stringValue = string }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
  }

  func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: Key.self)
    for (field, value) in patch.fields.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
      if let value {
        try container.encode(value, forKey: Key(field.rawValue))
      } else {
        try container.encodeNil(forKey: Key(field.rawValue))
      }
    }
    guard !patch.custom.isEmpty else { return }
    var custom = container.nestedContainer(keyedBy: Key.self, forKey: Key("metadata"))
    for (key, value) in patch.custom.sorted(by: { $0.key < $1.key }) {
      if let value {
        try custom.encode(value, forKey: Key(key))
      } else {
        try custom.encodeNil(forKey: Key(key))
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

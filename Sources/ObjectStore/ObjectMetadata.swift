/// One object's metadata, as the JSON API's object resource carries it.
///
/// Optional properties are `nil` when the object does not have them; the
/// filesystem lists only what is present.
public struct ObjectMetadata: Sendable, Equatable {
  public var bucket: String
  public var name: String
  public var size: Int64
  public var generation: Int64
  public var metageneration: Int64
  /// RFC 3339 text exactly as the service returned it.
  public var timeCreated: String
  public var updated: String
  public var md5Hash: String?
  public var crc32c: String?
  public var etag: String?
  public var storageClass: String?
  public var cacheControl: String?
  public var contentDisposition: String?
  public var contentEncoding: String?
  public var contentLanguage: String?
  public var contentType: String?
  /// The JSON API's `metadata` map (Firebase calls it customMetadata).
  public var custom: [String: String]

  public init(
    bucket: String, name: String, size: Int64, generation: Int64, metageneration: Int64,
    timeCreated: String, updated: String, md5Hash: String? = nil, crc32c: String? = nil,
    etag: String? = nil, storageClass: String? = nil, cacheControl: String? = nil,
    contentDisposition: String? = nil, contentEncoding: String? = nil,
    contentLanguage: String? = nil, contentType: String? = nil, custom: [String: String] = [:]
  ) {
    self.bucket = bucket
    self.name = name
    self.size = size
    self.generation = generation
    self.metageneration = metageneration
    self.timeCreated = timeCreated
    self.updated = updated
    self.md5Hash = md5Hash
    self.crc32c = crc32c
    self.etag = etag
    self.storageClass = storageClass
    self.cacheControl = cacheControl
    self.contentDisposition = contentDisposition
    self.contentEncoding = contentEncoding
    self.contentLanguage = contentLanguage
    self.contentType = contentType
    self.custom = custom
  }

  /// The writable standard properties, by their JSON API field names.
  public enum WritableField: String, Sendable, CaseIterable {
    case cacheControl, contentDisposition, contentEncoding, contentLanguage, contentType
  }

  public subscript(field: WritableField) -> String? {
    get {
      switch field {
      case .cacheControl: cacheControl
      case .contentDisposition: contentDisposition
      case .contentEncoding: contentEncoding
      case .contentLanguage: contentLanguage
      case .contentType: contentType
      }
    }
    set {
      switch field {
      case .cacheControl: cacheControl = newValue
      case .contentDisposition: contentDisposition = newValue
      case .contentEncoding: contentEncoding = newValue
      case .contentLanguage: contentLanguage = newValue
      case .contentType: contentType = newValue
      }
    }
  }
}

/// A PATCH of object metadata: only the fields named here change.
///
/// A value of `nil` removes the property (sent as JSON `null`), matching the
/// seeds' "set it to nil" and the service's patch semantics.
public struct MetadataPatch: Sendable, Equatable {
  public var fields: [ObjectMetadata.WritableField: String?]
  public var custom: [String: String?]

  public init(fields: [ObjectMetadata.WritableField: String?] = [:], custom: [String: String?] = [:]) {
    self.fields = fields
    self.custom = custom
  }

  public var isEmpty: Bool { fields.isEmpty && custom.isEmpty }

  /// Applies the patch to `metadata` the way the service does.
  public func apply(to metadata: inout ObjectMetadata) {
    for (field, value) in fields { metadata[field] = value }
    for (key, value) in custom { metadata.custom[key] = value }
  }
}

/// One page of a delimited list call.
public struct ListPage: Sendable, Equatable {
  /// Objects directly under the prefix, in the service's (byte-wise) order.
  public var items: [ObjectMetadata]
  /// Sub-prefixes, each ending in the delimiter, in order.
  public var prefixes: [String]
  public var nextPageToken: String?

  public init(items: [ObjectMetadata], prefixes: [String], nextPageToken: String?) {
    self.items = items
    self.prefixes = prefixes
    self.nextPageToken = nextPageToken
  }
}

import FUSE
import ObjectStore

/// docs/SEMANTICS.md#xattrs-table: object metadata as `user.*` extended attributes.
enum XattrName: Hashable {
  enum ReadOnly: String, CaseIterable {
    case bucket, generation, metageneration, fullPath, name, size, timeCreated, updated, md5Hash
    case crc32c, etag, storageClass
  }

  case readOnly(ReadOnly)
  case writable(ObjectMetadata.WritableField)
  /// A custom metadata key: `user.custom.KEY`, or another program's `user.`
  /// name (`user.xdg.origin.url`), kept under a key that is the name itself.
  case custom(String)
  /// `user.` or `user.custom.` with nothing after it.
  case unknown

  static let namespace = "user."
  static let customPrefix = "user.custom."

  /// Nil for names outside the `user.` namespace (EOPNOTSUPP, no network).
  init?(_ name: String) {
    guard name.hasPrefix(Self.namespace) else { return nil }
    if name.hasPrefix(Self.customPrefix) {
      let key = String(name.dropFirst(Self.customPrefix.count))
      self = key.isEmpty ? .unknown : .custom(key)
      return
    }
    let property = String(name.dropFirst(Self.namespace.count))
    if let field = ObjectMetadata.WritableField(rawValue: property) {
      self = .writable(field)
    } else if let readOnly = ReadOnly(rawValue: property) {
      self = .readOnly(readOnly)
    } else if property.isEmpty {
      self = .unknown
    } else {
      // Copying a local file in keeps the user. names other programs gave it
      // (browsers write user.xdg.origin.url), byte for byte.
      self = .custom(name)
    }
  }

  /// The one name custom key `key` shows as: the key itself when it is
  /// another program's `user.` name, else `user.custom.KEY`. Either way
  /// `XattrName(shownName(of: key)) == .custom(key)`.
  static func shownName(ofCustomKey key: String) -> String {
    if key.hasPrefix(namespace), case .custom(let parsed)? = XattrName(key), parsed == key { return key }
    return customPrefix + key
  }

  var isWritable: Bool {
    switch self {
    case .writable, .custom: true
    case .readOnly, .unknown: false
    }
  }

  /// The value this name has on `metadata`, nil when absent.
  func value(in metadata: ObjectMetadata) -> String? {
    switch self {
    case .readOnly(let property):
      switch property {
      case .bucket: metadata.bucket
      case .generation: String(metadata.generation)
      case .metageneration: String(metadata.metageneration)
      case .fullPath: metadata.name
      case .name: metadata.name.split(separator: "/").last.map(String.init) ?? metadata.name
      case .size: String(metadata.size)
      case .timeCreated: metadata.timeCreated
      case .updated: metadata.updated
      case .md5Hash: metadata.md5Hash
      case .crc32c: metadata.crc32c
      case .etag: metadata.etag
      case .storageClass: metadata.storageClass
      }
    case .writable(let field): metadata[field]
    case .custom(let key): metadata.custom[key]
    case .unknown: nil
    }
  }

  /// Every name `metadata` has now, in table order, custom keys sorted;
  /// without the keys stat shows (mode, owner, times) when `hidingStatKeys`.
  static func names(of metadata: ObjectMetadata, hidingStatKeys: Bool = false) -> [String] {
    var names: [String] = []
    for property in ReadOnly.allCases {
      let name = Self.namespace + property.rawValue
      if XattrName.readOnly(property).value(in: metadata) != nil { names.append(name) }
    }
    for field in ObjectMetadata.WritableField.allCases where metadata[field] != nil {
      names.append(Self.namespace + field.rawValue)
    }
    names += metadata.custom.keys.filter { !hidingStatKeys || !PosixKeys.isStatKey($0, in: metadata.custom) }
      .map(shownName(ofCustomKey:)).sorted()
    return names
  }

  /// The PATCH that sets (or, with nil, removes) this name.
  func patch(_ value: String?) -> MetadataPatch {
    switch self {
    case .writable(let field): MetadataPatch(fields: [field: value])
    case .custom(let key): MetadataPatch(custom: [key: value])
    case .readOnly, .unknown: MetadataPatch()
    }
  }
}

/// The service's published limits on custom metadata.
enum MetadataLimits {
  static let maxValueBytes = 4096
  static let maxTotalBytes = 8192

  /// Whether custom metadata `custom` fits, counting keys and values.
  static func fits(_ custom: [String: String]) -> Bool {
    var total = 0
    for (key, value) in custom {
      guard value.utf8.count <= maxValueBytes else { return false }
      total += key.utf8.count + value.utf8.count
    }
    return total <= maxTotalBytes
  }
}

/// The one validation of an xattr change, the same for a staged file's
/// pending upload and a stored object's PATCH (docs/SEMANTICS.md#xattrs-errors).
extension XattrName {
  /// The text a set stores (nil: a removal): UTF-8 (else EINVAL), a custom
  /// value within the service's limit (else E2BIG).
  func text(of value: [UInt8]?) throws(Errno) -> String? {
    guard let value else { return nil }
    guard let text = String(validating: value, as: UTF8.self) else { throw .invalid }
    if case .custom = self, text.utf8.count > MetadataLimits.maxValueBytes { throw .tooBig }
    return text
  }

  /// Whether a set or remove of this name changes anything. A read-only
  /// name is accepted and ignored (copying tools set every xattr they saw:
  /// rsync -X, cp -a), or EPERM with `refuseReadOnly`; a name that is no
  /// property is EPERM; stat's keys, among `statKeys` (the object's custom
  /// keys when stored modes are on, else nil), are set by chmod, chown and
  /// utimens only: a copy's `rsync -X` must not undo what its `-p -t` set.
  func changes(refuseReadOnly: Bool, statKeys: [String: String]?) throws(Errno) -> Bool {
    switch self {
    case .readOnly:
      if refuseReadOnly { throw .notPermitted }
      return false
    case .unknown:
      throw .notPermitted
    case .custom(let key):
      if let statKeys, PosixKeys.isStatKey(key, in: statKeys) { return false }
      return true
    case .writable:
      return true
    }
  }
}

import Foundation
import NIOCore
import ObjectStore
import Synchronization

/// An exact in-process model of one Cloud Storage bucket, for what ``ObjectStore`` covers.
///
/// Semantics follow the JSON API rather than any emulator:
/// - Names are UTF-8 byte strings, listed in byte order.
/// - `list` merges items and prefixes into one sorted sequence; `pageSize` (the service's
///   `maxResults`, clamped to 1...1000) bounds their combined count. An object named exactly
///   like the listed prefix (a folder placeholder `dir/` under `dir/`) is an item.
/// - Page tokens are opaque (base64 of the last returned entry) and stay valid when objects
///   are added or removed between pages.
/// - `read` of a generation that is not the live one is `notFound` (the service's 404).
///   A range starting at or past the end of a non-empty object is
///   `badRequest("416 range not satisfiable")`; on an empty object every range yields `[]`.
/// - `patch` with `nil` removes the field or custom key (unlike fake-gcs-server, which keeps
///   ""), bumps metageneration, and moves `updated` strictly forward.
///
/// - Writes (InMemoryObjectStore+Writes.swift): `ifGenerationMatch` 0 means "no live object", n
///   "generation n is live"; a mismatch is `preconditionFailed` and changes nothing. An upload
///   without a content type stores application/octet-stream. `copy` of a generation that is
///   gone is `notFound`; `move` of a missing source `notFound`, of another generation
///   `preconditionFailed`, onto its own name `badRequest`.
///
/// Test hooks: ``calls``, ``injectFaults(_:for:)``, ``latency``, ``beforeNextPatch(_:)``,
/// ``beforeNext(_:_:)`` (writes), ``supportsMove``.
/// Seeding and inspection (`put`, `delete`, `object`, `data`, `applyPatch`) are not logged and
/// see no faults or latency.
public final class InMemoryObjectStore: ObjectStore, @unchecked Sendable {
  /// One call made through the ``ObjectStore`` protocol.
  public enum Call: Sendable, Equatable, CustomStringConvertible {
    case list(prefix: String, pageToken: String?)
    case metadata(String)
    case read(String, Range<Int64>)
    case patch(String)
    case upload(String, ifGenerationMatch: Int64?)
    case delete(String, ifGenerationMatch: Int64?)
    case copy(String, to: String, ifGenerationMatch: Int64?)
    case move(String, to: String, ifGenerationMatch: Int64?)
    case compose([String], to: String, ifGenerationMatch: Int64?)

    public var kind: CallKind {
      switch self {
      case .list: .list
      case .metadata: .metadata
      case .read: .read
      case .patch: .patch
      case .upload: .upload
      case .delete: .delete
      case .copy: .copy
      case .move: .move
      case .compose: .compose
      }
    }

    public var description: String {
      switch self {
      case .list(let prefix, let token): "list(\(prefix), token: \(token ?? "nil"))"
      case .metadata(let name): "metadata(\(name))"
      case .read(let name, let range): "read(\(name), \(range))"
      case .patch(let name): "patch(\(name))"
      case .upload(let name, let match):
        "upload(\(name), ifGenerationMatch: \(match.map(String.init) ?? "nil"))"
      case .delete(let name, let match):
        "delete(\(name), ifGenerationMatch: \(match.map(String.init) ?? "nil"))"
      case .copy(let from, let to, let match):
        "copy(\(from) -> \(to), ifGenerationMatch: \(match.map(String.init) ?? "nil"))"
      case .move(let from, let to, let match):
        "move(\(from) -> \(to), ifGenerationMatch: \(match.map(String.init) ?? "nil"))"
      case .compose(let sources, let to, let match):
        "compose(\(sources) -> \(to), ifGenerationMatch: \(match.map(String.init) ?? "nil"))"
      }
    }
  }

  public enum CallKind: Sendable, Hashable, CaseIterable {
    case list, metadata, read, patch, upload, delete, copy, move, compose
  }

  /// The service's published custom metadata limits.
  public static let maxCustomValueBytes = 4096
  public static let maxCustomTotalBytes = 8192

  struct Entry {
    var meta: ObjectMetadata
    var data: [UInt8]
    var updatedMillis: Int64
    /// The service's `componentCount`: set for composite objects only.
    var components: Int? = nil
  }

  struct State {
    var objects: [Key: Entry] = [:]
    /// Sorted lazily: seeding a million names in any order stays cheap.
    var keys: [Key] = []
    var keysSorted = true
    var lastGeneration: Int64 = 0
    var calls: [Call] = []
    /// Prefixes of the list calls made without a delimiter (flat), in order.
    var flatLists: [String] = []
    var faults: [CallKind: [StorageError]] = [:]
    var latency: Duration = .zero
    var tokenLead: Duration?
    var decodeFaults: [StorageError] = []
    var patchHooks: [@Sendable (InMemoryObjectStore) -> Void] = []
    var writeHooks: [CallKind: [@Sendable (InMemoryObjectStore) -> Void]] = [:]
    /// Whether ``move`` is offered (a bucket with the service's move).
    var supportsMove = true

    mutating func sortedKeys() -> [Key] {
      if !keysSorted {
        keys.sort { $0.precedes($1) }
        keysSorted = true
      }
      return keys
    }
  }

  public let bucket: String
  let state = Locked(State())
  private let readsGivenSpares = Atomic<Int>(0)

  public init(bucket: String) {
    self.bucket = bucket
  }

  // MARK: Seeding and inspection

  /// Creates or replaces an object: a new generation with metageneration 1, like an upload.
  /// `contentType` nil leaves the property absent (an upload would default it to
  /// application/octet-stream; pass that if you want it).
  @discardableResult
  public func put(
    _ name: String, data: [UInt8], contentType: String? = nil, cacheControl: String? = nil,
    contentDisposition: String? = nil, contentEncoding: String? = nil, contentLanguage: String? = nil,
    custom: [String: String] = [:]
  ) -> ObjectMetadata {
    var fields: [ObjectMetadata.WritableField: String] = [:]
    fields[.contentType] = contentType
    fields[.cacheControl] = cacheControl
    fields[.contentDisposition] = contentDisposition
    fields[.contentEncoding] = contentEncoding
    fields[.contentLanguage] = contentLanguage
    let attributes = ObjectAttributes(fields: fields, custom: custom)
    return state.withLock { s in storeLocked(&s, name: name, data: data, attributes: attributes) }
  }

  /// Removes an object; returns whether it existed.
  @discardableResult
  public func delete(_ name: String) -> Bool {
    let key = Key(name.utf8)
    return state.withLock { s in
      guard s.objects[key] != nil else { return false }
      Self.removeLocked(&s, key)
      return true
    }
  }

  public func object(_ name: String) -> ObjectMetadata? {
    state.withLock { $0.objects[Key(name.utf8)]?.meta }
  }

  public func data(_ name: String) -> [UInt8]? {
    state.withLock { $0.objects[Key(name.utf8)]?.data }
  }

  /// Every object name, in the service's (byte-wise) order.
  public var names: [String] {
    state.withLock { s in s.sortedKeys().map { String(decoding: $0, as: UTF8.self) } }
  }

  /// The PATCH semantics without logging, faults or latency: for seeding, and for
  /// ``beforeNextPatch(_:)`` actions that play "someone else".
  @discardableResult
  public func applyPatch(
    _ name: String, _ patch: MetadataPatch, ifGenerationMatch: Int64? = nil,
    ifMetagenerationMatch: Int64? = nil
  ) throws(StorageError) -> ObjectMetadata {
    let key = Key(name.utf8)
    return try state.withLock { (s: inout State) throws(StorageError) -> ObjectMetadata in
      guard var entry = s.objects[key] else { throw .notFound }
      if let expected = ifGenerationMatch, expected != entry.meta.generation { throw .preconditionFailed }
      if let expected = ifMetagenerationMatch, expected != entry.meta.metageneration {
        throw .preconditionFailed
      }
      var meta = entry.meta
      patch.apply(to: &meta)
      try Self.checkCustomLimits(meta.custom)
      meta.metageneration += 1
      // `updated` must move forward even when two patches land in the same millisecond.
      let millis = max(Timestamp.nowMillis(), entry.updatedMillis + 1)
      meta.updated = Timestamp.rfc3339(millis: millis)
      meta.etag = Self.etag(generation: meta.generation, metageneration: meta.metageneration)
      entry.meta = meta
      entry.updatedMillis = millis
      s.objects[key] = entry
      return meta
    }
  }

  // MARK: Test hooks

  /// Every protocol call so far, in order, including ones that failed by injection.
  public var calls: [Call] { state.withLock { $0.calls } }

  public func calls(_ kind: CallKind) -> [Call] { calls.filter { $0.kind == kind } }

  public func resetCalls() {
    state.withLock {
      $0.calls.removeAll()
      $0.flatLists.removeAll()
    }
  }

  /// Prefixes of the list calls made without a delimiter, in order (they are
  /// also in ``calls``, which does not tell them apart).
  public var flatLists: [String] { state.withLock { $0.flatLists } }

  /// Queues errors thrown by the next calls of `kind`, one per call, before any real work.
  public func injectFaults(_ faults: [StorageError], for kind: CallKind) {
    state.withLock { $0.faults[kind, default: []].append(contentsOf: faults) }
  }

  public func clearFaults() { state.withLock { $0.faults.removeAll() } }

  /// Faults still queued for `kind`.
  public func pendingFaults(for kind: CallKind) -> Int { state.withLock { $0.faults[kind]?.count ?? 0 } }

  /// Delay added to every protocol call; a cancelled wait throws ``StorageError/cancelled``.
  public var latency: Duration {
    get { state.withLock { $0.latency } }
    set { state.withLock { $0.latency = newValue } }
  }

  /// When set, a list call announces its page's token this long before it
  /// returns the page, as the Cloud Storage client does while it decodes one.
  public var tokenLead: Duration? {
    get { state.withLock { $0.tokenLead } }
    set { state.withLock { $0.tokenLead = newValue } }
  }

  /// Queues errors thrown by the next list calls to start, after their token
  /// has been announced (a page that fails to decode); only with ``tokenLead``.
  public func injectDecodeFaults(_ faults: [StorageError]) {
    state.withLock { $0.decodeFaults.append(contentsOf: faults) }
  }

  /// Runs `action` inside the next `patch`, after its fault check and before the
  /// metageneration precondition is evaluated: a concurrent writer at the worst moment.
  public func beforeNextPatch(_ action: @escaping @Sendable (InMemoryObjectStore) -> Void) {
    state.withLock { $0.patchHooks.append(action) }
  }

  // MARK: ObjectStore

  /// With a token taker, the token comes before the page by ``tokenLead``
  /// (when set), and the page may then fail to decode (``injectDecodeFaults(_:)``).
  public func list(_ request: ListRequest) async throws -> ListPage {
    guard let taker = request.onNextPageToken else { return try await page(request) }
    // Taken in the order calls start: with several under way, which one wakes first is not fixed.
    let (lead, fault) = state.withLock { s in
      (s.tokenLead, s.tokenLead == nil || s.decodeFaults.isEmpty ? nil : s.decodeFaults.removeFirst())
    }
    let page = try await self.page(request)
    if let token = page.nextPageToken { taker(token) }
    guard let lead else { return page }
    do { try await Task.sleep(for: lead) } catch { throw StorageError.cancelled }
    if let fault { throw fault }
    return page
  }

  /// As the service lists: in byte order, `pageSize` entries at most, where
  /// a prefix counts once and so does, with `includeTrailingDelimiter`, the
  /// placeholder item that comes with it (the placeholder is the first name
  /// under its prefix, so the two are one entry of the listing and never on
  /// different pages).
  /// With `endOffset`, as the service: names (and prefixes) from `prefix` up
  /// to, not including, it.
  private func page(_ request: ListRequest) async throws -> ListPage {
    let (prefix, delimiter, pageToken) = (request.prefix, request.delimiter, request.pageToken)
    if delimiter == nil { state.withLock { $0.flatLists.append(prefix) } }
    try await enter(.list(prefix: prefix, pageToken: pageToken))
    let prefixKey = Key(prefix.utf8)
    let delimiterKey = delimiter.flatMap { $0.isEmpty ? nil : Key($0.utf8) }
    let limit = min(max(request.pageSize, 1), 1000)
    var resume: PageToken?
    if let pageToken {
      guard let token = PageToken(pageToken) else { throw StorageError.badRequest("Invalid pageToken") }
      resume = token
    }
    return state.withLock { s in
      let keys = s.sortedKeys()
      var end = prefixKey.isEmpty ? keys.count : Self.endOfKeys(withPrefix: prefixKey, in: keys)
      if let endOffset = request.endOffset { end = min(end, Self.lowerBound(Key(endOffset.utf8), in: keys)) }
      var i = Self.lowerBound(prefixKey, in: keys)
      switch resume {
      case .item(let last)?: i = max(i, Self.upperBound(last, in: keys))
      case .prefix(let last)?: i = max(i, Self.endOfKeys(withPrefix: last, in: keys))
      case nil: break
      }
      var items: [ObjectMetadata] = []
      var prefixes: [String] = []
      var last: PageToken?
      var entries = 0
      while i < end && entries < limit {
        let key = keys[i]
        entries += 1
        if let delimiterKey, let cut = key.endOfFirst(delimiterKey, from: prefixKey.count) {
          let collapsed = Key(key[0..<cut])
          prefixes.append(String(decoding: collapsed, as: UTF8.self))
          // Ends in its only delimiter past the prefix: the placeholder, first under its prefix.
          if request.includeTrailingDelimiter && cut == key.count { items.append(s.objects[key]!.meta) }
          last = .prefix(collapsed)
          i = Self.endOfKeys(withPrefix: collapsed, in: keys)
        } else {
          items.append(s.objects[key]!.meta)
          last = .item(key)
          i += 1
        }
      }
      // A token only when another entry exists: the service may also end on an empty page,
      // but clients must handle both, and exact counts are easier to test.
      let next = i < end ? last?.encoded : nil
      return ListPage(items: items, prefixes: prefixes, nextPageToken: next)
    }
  }

  public func metadata(of name: String) async throws -> ObjectMetadata {
    try await enter(.metadata(name))
    guard let meta = object(name) else { throw StorageError.notFound }
    return meta
  }

  /// Writes into the spare when it is large enough, as the real client does,
  /// so tests of sequential readers run over recycled memory.
  public func read(_ name: String, generation: Int64, range: Range<Int64>, reusing spare: SpareBuffer?)
    async throws -> ByteBuffer
  {
    let fresh = try await bytes(name, generation: generation, range: range)
    guard var recycled = spare?.take(), recycled.capacity >= fresh.readableBytes else { return fresh }
    readsGivenSpares.add(1, ordering: .relaxed)
    recycled.clear()
    recycled.writeImmutableBuffer(fresh)
    return recycled
  }

  /// Reads that were handed a spare buffer large enough for their bytes
  /// (whether its memory was free to refill in place, or still shared with
  /// a reply and so copied, is up to ByteBuffer).
  public var readsIntoSpares: Int { readsGivenSpares.load(ordering: .relaxed) }

  private func bytes(_ name: String, generation: Int64, range: Range<Int64>) async throws -> ByteBuffer {
    try await enter(.read(name, range))
    return try state.withLock { (s: inout State) throws(StorageError) -> ByteBuffer in
      guard let entry = s.objects[Key(name.utf8)], entry.meta.generation == generation else {
        throw .notFound
      }
      guard range.lowerBound >= 0 else { throw .badRequest("negative range start") }
      let size = Int64(entry.data.count)
      if size > 0 && range.lowerBound >= size { throw .badRequest("416 range not satisfiable") }
      let lower = Int(min(range.lowerBound, size))
      let upper = Int(min(range.upperBound, size))
      return ByteBuffer(bytes: entry.data[lower..<upper])
    }
  }

  public func patch(
    _ name: String, _ patch: MetadataPatch, ifGenerationMatch: Int64?, ifMetagenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    try await enter(.patch(name))
    let hooks = state.withLock { s in
      defer { s.patchHooks.removeAll() }
      return s.patchHooks
    }
    for hook in hooks { hook(self) }
    return try applyPatch(
      name, patch, ifGenerationMatch: ifGenerationMatch, ifMetagenerationMatch: ifMetagenerationMatch)
  }

  // MARK: Internals

  /// Logs the call, waits out the latency, then throws the next queued fault if any.
  func enter(_ call: Call) async throws(StorageError) {
    let delay = state.withLock { s in
      s.calls.append(call)
      return s.latency
    }
    if delay > .zero {
      do { try await Task.sleep(for: delay) } catch { throw .cancelled }
    }
    let fault = state.withLock { s -> StorageError? in
      guard var queue = s.faults[call.kind], !queue.isEmpty else { return nil }
      let first = queue.removeFirst()
      s.faults[call.kind] = queue
      return first
    }
    if let fault { throw fault }
  }

  static func checkCustomLimits(_ custom: [String: String]) throws(StorageError) {
    var total = 0
    for (key, value) in custom {
      if value.utf8.count > maxCustomValueBytes {
        throw .tooLarge(
          "Metadata value for key '\(key)' is \(value.utf8.count) bytes; "
            + "the limit is \(maxCustomValueBytes) bytes.")
      }
      total += key.utf8.count + value.utf8.count
    }
    if total > maxCustomTotalBytes {
      throw .tooLarge(
        "Custom metadata is too large: \(total) bytes of keys and values; "
          + "the limit is \(maxCustomTotalBytes) bytes.")
    }
  }

  /// The JSON API's etag: base64 of a protobuf-style record of generation and metageneration
  /// (field 1 and 2 varints), so it changes on every upload and every metadata update.
  static func etag(generation: Int64, metageneration: Int64) -> String {
    func varint(_ value: Int64) -> [UInt8] {
      var v = UInt64(bitPattern: value)
      var out: [UInt8] = []
      repeat {
        let byte = UInt8(v & 0x7f)
        v >>= 7
        out.append(v == 0 ? byte : byte | 0x80)
      } while v != 0
      return out
    }
    return Base64.encode([0x08] + varint(generation) + [0x10] + varint(metageneration))
  }

  /// First index whose key is not before `key`.
  private static func lowerBound(_ key: Key, in keys: [Key]) -> Int {
    var low = 0
    var high = keys.count
    while low < high {
      let mid = (low + high) / 2
      if keys[mid].precedes(key) { low = mid + 1 } else { high = mid }
    }
    return low
  }

  /// First index whose key is after `key`.
  private static func upperBound(_ key: Key, in keys: [Key]) -> Int {
    var low = 0
    var high = keys.count
    while low < high {
      let mid = (low + high) / 2
      if key.precedes(keys[mid]) { high = mid } else { low = mid + 1 }
    }
    return low
  }

  /// First index after every key that starts with `prefix` (keys with a prefix are contiguous).
  private static func endOfKeys(withPrefix prefix: Key, in keys: [Key]) -> Int {
    // The smallest byte string greater than all strings with this prefix.
    var successor = prefix
    while let last = successor.last, last == 0xff { successor.removeLast() }
    guard let last = successor.last else { return keys.count }
    successor[successor.count - 1] = last + 1
    return lowerBound(successor, in: keys)
  }
}

/// Where a listing resumes: after an item, or after every name under a returned prefix.
private enum PageToken {
  case item(Key)
  case prefix(Key)

  init?(_ text: String) {
    guard let bytes = Base64.decode(text), let tag = bytes.first else { return nil }
    let key = Key(bytes.dropFirst())
    switch tag {
    case UInt8(ascii: "i"): self = .item(key)
    case UInt8(ascii: "p"): self = .prefix(key)
    default: return nil
    }
  }

  var encoded: String {
    switch self {
    case .item(let key): Base64.encode([UInt8(ascii: "i")] + key)
    case .prefix(let key): Base64.encode([UInt8(ascii: "p")] + key)
    }
  }
}

extension ByteBuffer {
  /// The readable bytes, for comparing in tests.
  public var array: [UInt8] { Array(readableBytesView) }
}

extension Array where Element == ByteBuffer {
  /// The pieces of a read reply joined, for comparing in tests.
  public var array: [UInt8] { flatMap { $0.readableBytesView } }
}

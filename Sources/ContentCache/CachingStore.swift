import CoreMetrics
import Logging
import NIOCore
import ObjectStore

/// An ``ObjectStore`` that keeps the bytes read through it on local disk
/// (``ReadCache``) and serves later reads of the same object generation
/// from there, sending no request. Everything but reads and uploads is
/// forwarded; the metadata passing through teaches the cache each object's
/// size and CRC-32C. An upload that succeeds leaves its bytes as the entry
/// of the new generation.
public final class CachingStore: ForwardingObjectStore {
  public let inner: any ObjectStore
  let cache: ReadCache
  private let facts = ObjectFacts()
  private let metrics: CacheMetrics

  /// A cache of `limit` bytes for `inner`'s bucket under `cacheDirectory`,
  /// with the entries an earlier mount left there. Without a limit:
  /// ``defaultLimit``, of the free space there now. Nil (after one log line
  /// saying why) when the directory cannot be used or another mount of the
  /// bucket holds it (still after `patience`): the mount then runs without the cache.
  public static func open(
    wrapping inner: any ObjectStore, cacheDirectory: String, limit: Int64?, disk: any CacheDisk = LocalDisk(),
    patience: Duration = .seconds(5), logger: Logger,
    metrics factory: any MetricsFactory = MetricsSystem.factory
  ) -> CachingStore? {
    let directory: CacheDirectory
    do {
      directory = try CacheDirectory(cacheDirectory: cacheDirectory, bucket: inner.bucket, patience: patience)
    } catch {
      logger.warning("read cache off: \(error)")
      return nil
    }
    let limit = limit ?? defaultLimit(freeBytes: directory.freeBytes)
    guard limit > 0 else {
      logger.warning("read cache off: no free space in \(directory.path)")
      return nil
    }
    let metrics = CacheMetrics(factory: factory)
    let cache = ReadCache(directory: directory, limit: limit, disk: disk, logger: logger, metrics: metrics)
    cache.load()
    cache.trimOtherBuckets()
    logger.info(
      "read cache: \(directory.path), \(cache.index.count) entries, \(cache.index.used >> 20) of \(limit >> 20) MiB in use"
    )
    return CachingStore(inner: inner, cache: cache, metrics: metrics)
  }

  /// 1 GiB, but no more than a tenth of the free space: modest enough
  /// never to surprise, large enough for a working set of ordinary files.
  public static func defaultLimit(freeBytes: Int64) -> Int64 {
    min(1 << 30, max(0, freeBytes / 10))
  }

  private init(inner: any ObjectStore, cache: ReadCache, metrics: CacheMetrics) {
    self.inner = inner
    self.cache = cache
    self.metrics = metrics
  }

  /// Disk in use by the entries, in bytes.
  public var bytesInUse: Int64 { cache.index.used }

  // MARK: Reads

  public func read(_ name: String, generation: Int64, range: Range<Int64>) async throws -> ByteBuffer {
    try await read(name, generation: generation, range: range, spare: nil)
  }

  public func read(_ name: String, generation: Int64, range: Range<Int64>, reusing spare: SpareBuffer)
    async throws -> ByteBuffer
  {
    try await read(name, generation: generation, range: range, spare: spare)
  }

  private func read(_ name: String, generation: Int64, range: Range<Int64>, spare: SpareBuffer?)
    async throws -> ByteBuffer
  {
    let key = EntryKey(name: name, generation: generation)
    if let bytes = cache.cached(key, range, spare: spare) {
      metrics.hit()
      return bytes
    }
    metrics.missed()
    let bytes: ByteBuffer
    if let spare {
      bytes = try await inner.read(name, generation: generation, range: range, reusing: spare)
    } else {
      bytes = try await inner.read(name, generation: generation, range: range)
    }
    let fact = facts.fact(name, generation: generation)
    if let complete = cache.keep(key, range, bytes, size: fact?.size, crc: fact?.crc) {
      await check(complete)
    }
    return bytes
  }

  /// The whole-object check of a complete entry, with the object's CRC-32C
  /// from what was seen, else from one metadata request. Without it (the
  /// object has moved on, or the request failed) the entry stays unchecked;
  /// its blocks are still checked one by one.
  private func check(_ entry: CacheEntry) async {
    let key = entry.key
    var crc =
      entry.state.withLock { $0.map.objectCRC } ?? facts.fact(key.name, generation: key.generation)?.crc
    if crc == nil, let object = try? await inner.metadata(of: key.name) {
      facts.learn(object)
      if object.generation == key.generation { crc = object.crc32c.flatMap { CRC32C.value(base64: $0) } }
    }
    if let crc { cache.verify(entry, crc: crc) }
  }

  // MARK: What metadata teaches

  public func metadata(of name: String) async throws -> ObjectMetadata {
    let object = try await inner.metadata(of: name)
    facts.learn(object)
    return object
  }

  public func list(
    prefix: String, delimiter: String?, includeTrailingDelimiter: Bool, pageSize: Int, pageToken: String?
  ) async throws -> ListPage {
    let page = try await inner.list(
      prefix: prefix, delimiter: delimiter, includeTrailingDelimiter: includeTrailingDelimiter,
      pageSize: pageSize, pageToken: pageToken)
    for item in page.items { facts.learn(item) }
    return page
  }

  public func list(
    prefix: String, delimiter: String?, includeTrailingDelimiter: Bool, pageSize: Int, pageToken: String?,
    nextPageToken: @escaping @Sendable (String) -> Void
  ) async throws -> ListPage {
    let page = try await inner.list(
      prefix: prefix, delimiter: delimiter, includeTrailingDelimiter: includeTrailingDelimiter,
      pageSize: pageSize, pageToken: pageToken, nextPageToken: nextPageToken)
    for item in page.items { facts.learn(item) }
    return page
  }

  public func list(prefix: String, delimiter: String?, pageSize: Int, pageToken: String?, endOffset: String)
    async throws -> ListPage
  {
    let page = try await inner.list(
      prefix: prefix, delimiter: delimiter, pageSize: pageSize, pageToken: pageToken, endOffset: endOffset)
    for item in page.items { facts.learn(item) }
    return page
  }

  // MARK: Writes

  public func upload(
    _ name: String, from source: any UploadSource, attributes: ObjectAttributes, ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    let object = try await inner.upload(
      name, from: source, attributes: attributes, ifGenerationMatch: ifGenerationMatch)
    facts.learn(object)
    cache.keep(upload: object, from: source)
    return object
  }

  public func copy(
    _ source: String, sourceGeneration: Int64, to destination: String, attributes: ObjectAttributes?,
    ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    let object = try await inner.copy(
      source, sourceGeneration: sourceGeneration, to: destination, attributes: attributes,
      ifGenerationMatch: ifGenerationMatch)
    facts.learn(object)
    return object
  }

  public func move(
    _ source: String, sourceGeneration: Int64, to destination: String, ifGenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    let object = try await inner.move(
      source, sourceGeneration: sourceGeneration, to: destination, ifGenerationMatch: ifGenerationMatch)
    facts.learn(object)
    return object
  }
}

import CoreMetrics
import IOThreads
import Logging
import NIOCore
import ObjectStore
import Synchronization

/// An ``ObjectStore`` that keeps the bytes read through it on local disk
/// (``ReadCache``) and serves later reads of the same object generation
/// from there, sending no request. Everything but reads and uploads is
/// forwarded; the metadata passing through teaches the cache each object's
/// size and CRC-32C. An upload that succeeds leaves its bytes as the entry
/// of the new generation.
///
/// No disk work runs on the read's path or on the concurrency pool: a read
/// served from disk waits for an ``IOPool`` thread, and bytes read from the
/// bucket are returned at once and written to disk after, on the pool, as
/// background work it may refuse (the read is then a miss next time too).
/// Each read tells the pool it is busy, so that work waits for a pause in
/// the reads (``IOPool/busy()``): a sequential stream or a copy of many
/// small files runs without the cache's disk work beside it. One object's
/// fills wait with at most `objectHoldLimit` bytes while its reader is
/// fast (`fastReader`): such a stream keeps that much of itself for the
/// pause and drops the rest, so that the reader's next segments reuse the
/// memory of the ones it has consumed (a held fill keeps a segment's
/// buffer; each one held makes the reader take fresh pages, measured as a
/// tenth of the read's CPU at 64 MiB held).
public final class CachingStore: ForwardingObjectStore {
  public let inner: any ObjectStore
  let readCache: ReadCache
  private let pool: IOPool
  private let facts = ObjectFacts()
  private let metrics: CacheMetrics
  /// Bytes of one object's fills queued and not yet written, at most,
  /// while its reader is faster than `fastReader`.
  let objectHoldLimit: Int
  /// Bytes a second: a reader this fast is bound by the CPU, not the link,
  /// and fills held for it past `objectHoldLimit` would slow it down. A
  /// slower one (a WAN link) holds up to the pool's limit, so that its
  /// file is kept whole.
  let fastReader: Double
  /// One object's fills queued and not yet written: their bytes, and the
  /// bytes its reader brought since the first of them was queued.
  private struct Waiting {
    var held = 0
    var seen = 0
    let since: UInt64
  }
  private let waiting = Mutex<[EntryKey: Waiting]>([:])
  /// Checks waiting for an object's CRC-32C from the bucket, by number.
  private let lookups = Mutex<(next: Int, tasks: [Int: Task<Void, Never>])>((0, [:]))

  /// A cache of `limit` bytes for `inner`'s bucket under `cacheDirectory`,
  /// with the entries an earlier mount left there, doing its disk work on
  /// `pool`. Without a limit: ``defaultLimit``, of the free space there now.
  /// Nil (after one log line saying why) when the directory cannot be used
  /// or another mount of the bucket holds it (still after `patience`, or at
  /// once when that mount, at its `mountpoint`, `isMounted`): the mount then
  /// runs without the cache.
  public static func open(
    wrapping inner: any ObjectStore, cacheDirectory: String, limit: Int64?, pool: IOPool,
    objectHoldLimit: Int = defaultObjectHoldLimit, fastReader: Double = defaultFastReader,
    disk: any CacheDisk = LocalDisk(),
    patience: Duration = .seconds(5), mountpoint: String? = nil, isMounted: ((String) -> Bool)? = nil,
    logger: Logger,
    metrics factory: any MetricsFactory = MetricsSystem.factory
  ) -> CachingStore? {
    let directory: CacheDirectory
    do {
      directory = try CacheDirectory(
        cacheDirectory: cacheDirectory, bucket: inner.bucket, patience: patience, mountpoint: mountpoint,
        isMounted: isMounted)
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
    let readCache = ReadCache(
      directory: directory, limit: limit, disk: disk, logger: logger, metrics: metrics)
    readCache.load()
    readCache.trimOtherBuckets()
    logger.info(
      "read cache: \(directory.path), \(readCache.index.count) entries, \(readCache.index.used >> 20) of \(limit >> 20) MiB in use"
    )
    return CachingStore(
      inner: inner, readCache: readCache, pool: pool, objectHoldLimit: objectHoldLimit,
      fastReader: fastReader,
      metrics: metrics)
  }

  /// 16 MiB: with 64 MiB a 256 MiB cold read on loopback cost 13,000 more
  /// page faults and about a tenth more CPU than with the cache off; with
  /// 16 MiB, the CPU of the cache off (BENCHMARKS.md, "Fills hold less").
  public static let defaultObjectHoldLimit = 16 << 20

  /// 512 MiB a second: faster than a 4 Gbit/s link, or 16 streams of the
  /// bench's WAN model (25 MB/s each); a read on loopback, which the CPU
  /// bounds, runs faster (800–950 MB/s on the bench's 2 cores).
  public static let defaultFastReader: Double = 512 * 1_048_576

  /// 1 GiB, but no more than a tenth of the free space: modest enough
  /// never to surprise, large enough for a working set of ordinary files.
  public static func defaultLimit(freeBytes: Int64) -> Int64 {
    min(1 << 30, max(0, freeBytes / 10))
  }

  private init(
    inner: any ObjectStore, readCache: ReadCache, pool: IOPool, objectHoldLimit: Int, fastReader: Double,
    metrics: CacheMetrics
  ) {
    self.inner = inner
    self.readCache = readCache
    self.pool = pool
    self.objectHoldLimit = max(objectHoldLimit, 0)
    self.fastReader = fastReader
    self.metrics = metrics
  }

  /// Disk in use by the entries, in bytes.
  public var bytesInUse: Int64 { readCache.index.used }

  // MARK: Reads

  public func read(_ name: String, generation: Int64, range: Range<Int64>, reusing spare: SpareBuffer?)
    async throws -> ByteBuffer
  {
    // Fills wait while reads keep coming: a stream of reads runs alone.
    pool.busy()
    defer { pool.busy() }
    let key = EntryKey(name: name, generation: generation)
    if readCache.lists(key, range) {
      let readCache = self.readCache
      do {
        if let bytes = try await pool.run({ readCache.cached(key, range, spare: spare) }) {
          metrics.hit()
          return bytes
        }
      } catch is IOPool.Stopped {}
    }
    metrics.missed()
    let bytes = try await inner.read(name, generation: generation, range: range, reusing: spare)
    fill(key, range, bytes)
    return bytes
  }

  /// Queues the writing of bytes just read, and the whole-object check of
  /// an entry they complete, as background work on the pool; past the
  /// object's hold limit, or refused by the pool (it holds its limit),
  /// they are dropped and counted.
  private func fill(_ key: EntryKey, _ range: Range<Int64>, _ bytes: ByteBuffer) {
    let count = bytes.readableBytes
    guard hold(key, count) else { return metrics.dropped() }
    let fact = facts.fact(key.name, generation: key.generation)
    let accepted = pool.submit(holding: count) { [self] in
      defer { release(key, count) }
      if let complete = readCache.keep(key, range, bytes, size: fact?.size, crc: fact?.crc) {
        check(complete)
      }
    }
    if !accepted {
      release(key, count)
      metrics.dropped()
    }
  }

  /// Counts `count` more bytes waiting for the key; false when that would
  /// pass the object's hold limit while its reader is fast.
  private func hold(_ key: EntryKey, _ count: Int) -> Bool {
    let now = IOPool.now()
    return waiting.withLock { waiting in
      var entry = waiting[key] ?? Waiting(since: now)
      entry.seen += count
      let fast = Double(entry.seen) / max(Double(now &- entry.since) / 1e9, 0.001) > fastReader
      let held = entry.held + count <= objectHoldLimit || !fast
      if held { entry.held += count }
      if entry.held > 0 { waiting[key] = entry }
      return held
    }
  }

  private func release(_ key: EntryKey, _ count: Int) {
    waiting.withLock { waiting in
      guard var entry = waiting[key] else { return }
      entry.held -= count
      waiting[key] = entry.held > 0 ? entry : nil
    }
  }

  /// The whole-object check of a complete entry (on a pool thread), with
  /// the object's CRC-32C from what was seen, else from one metadata
  /// request (in a task, the check then queued again). Without it (the
  /// object has moved on, the request failed, the queue is full) the entry
  /// stays unchecked; its blocks are still checked one by one.
  private func check(_ entry: CacheEntry) {
    let key = entry.key
    if let crc = entry.objectCRC
      ?? facts.fact(key.name, generation: key.generation)?.crc
    {
      readCache.verify(entry, crc: crc)
      return
    }
    lookups.withLock { state in
      let number = state.next
      state.next += 1
      state.tasks[number] = Task { [self] in
        defer { _ = lookups.withLock { $0.tasks.removeValue(forKey: number) } }
        guard let object = try? await inner.metadata(of: key.name) else { return }
        facts.learn(object)
        guard object.generation == key.generation,
          let crc = object.crc32c.flatMap({ CRC32C.value(base64: $0) })
        else { return }
        // Ended only once the check has run (or was refused), so `settled()` covers it.
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
          let queued = pool.submit(holding: 0) { [readCache] in
            readCache.verify(entry, crc: crc)
            done.resume()
          }
          if !queued { done.resume() }
        }
      }
    }
  }

  /// Waits until the disk work queued so far (fills, checks, uploads'
  /// entries, and the checks they lead to) is done.
  public func settled() async {
    while true {
      await pool.idle()
      let waiting = lookups.withLock { Array($0.tasks.values) }
      guard !waiting.isEmpty else { return }
      for task in waiting { await task.value }
    }
  }

  /// A read of the object did not match its CRC-32C: its entry is served no
  /// more from now on, and its files go on the pool (or here, if the pool
  /// refuses: two unlinks).
  public func forgetCopies(of name: String, generation: Int64) {
    inner.forgetCopies(of: name, generation: generation)
    guard let entry = readCache.index.peek(EntryKey(name: name, generation: generation)) else { return }
    entry.markRemoved()
    let readCache = self.readCache
    let reason = "a read of it did not match the object's crc32c"
    if !pool.submit(holding: 0, { readCache.discard(entry, because: reason) }) {
      readCache.discard(entry, because: reason)
    }
  }

  // MARK: What metadata teaches

  public func metadata(of name: String) async throws -> ObjectMetadata {
    let object = try await inner.metadata(of: name)
    facts.learn(object)
    return object
  }

  public func list(_ request: ListRequest) async throws -> ListPage {
    let page = try await inner.list(request)
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
    keep(upload: object, from: source)
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

  /// Makes the bytes just stored the entry of the new generation: the
  /// source's file becomes its data file (a hard link, made now, while the
  /// bytes are still those stored), its blocks summed after, on the pool;
  /// where no link can be made, the bytes are copied there instead. Either
  /// way the caller (a close) does not wait for the disk.
  private func keep(upload object: ObjectMetadata, from source: any UploadSource) {
    guard let adopted = readCache.adopt(upload: object, from: source) else { return }
    let accepted = pool.submit(holding: ReadCache.copyChunk) { [readCache] in
      readCache.finish(upload: adopted.entry, from: source, linked: adopted.linked, crc: adopted.crc)
    }
    if !accepted {
      readCache.forget(adopted.entry)
      metrics.dropped()
    }
  }
}

import IOThreads
import MetricsTestKit
import NIOCore
import ObjectStore
import StorageFake
import Synchronization
import XCTest

@testable import ContentCache

#if canImport(Glibc)
  import Glibc
#endif

/// The read cache against the in-memory bucket: what it serves, what it
/// never serves, and that the bucket's reads stop once bytes are on disk.
final class CachingStoreTests: XCTestCase {
  private var bucket = InMemoryObjectStore(bucket: "b")
  private var directory = ""
  private var pool: IOPool!

  override func setUp() {
    bucket = InMemoryObjectStore(bucket: "b")
    directory = temporaryDirectory(self)
    pool = IOPool(threadCount: 2, byteLimit: 64 << 20)
  }

  override func tearDown() async throws {
    let stopped = await pool.shutdown(patience: .seconds(10))
    XCTAssertTrue(stopped)
  }

  private func open(
    limit: Int64 = 64 << 20, disk: any CacheDisk = LocalDisk(), store: (any ObjectStore)? = nil
  )
    throws -> CachingStore
  {
    try XCTUnwrap(
      CachingStore.open(
        wrapping: store ?? bucket, cacheDirectory: directory, limit: limit, pool: pool, disk: disk,
        logger: quiet))
  }

  private var bucketReads: Int { bucket.calls(.read).count }
  /// What an entry counts beyond its blocks.
  private let overhead = CacheIndex.entryOverhead

  /// Opens the file as the filesystem does (metadata first), then reads it all.
  private func readAll(_ store: CachingStore, _ name: String) async throws -> [UInt8] {
    let object = try await store.metadata(of: name)
    return try await store.readSettled(name, generation: object.generation, range: 0..<object.size).bytes
  }

  func testASecondReadSendsNoRequest() async throws {
    let data = pattern(300_000)
    let object = bucket.put("f", data: data)
    let store = try open()
    let first = try await readAll(store, "f")
    XCTAssertEqual(first, data)
    XCTAssertEqual(bucketReads, 1)
    let again = try await store.readSettled("f", generation: object.generation, range: 0..<object.size)
    XCTAssertEqual(again.bytes, data)
    let middle = try await store.readSettled("f", generation: object.generation, range: 70_000..<250_001)
    XCTAssertEqual(middle.bytes, Array(data[70_000..<250_001]))
    let pastEnd = try await store.readSettled("f", generation: object.generation, range: 299_000..<400_000)
    XCTAssertEqual(pastEnd.bytes, Array(data[299_000...]))
    XCTAssertEqual(bucketReads, 1, "served from disk")
    XCTAssertEqual(store.bytesInUse, 300_000 + overhead)
    // Whole in one read, with the checksum the metadata gave: checked with no other request.
    let entry = try XCTUnwrap(store.readCache.index.use(EntryKey(name: "f", generation: object.generation)))
    XCTAssertEqual(entry.entry.map?.verified, true)
    XCTAssertEqual(bucket.calls(.metadata).count, 1)
  }

  func testAReadIntoASpareIsServedFromDisk() async throws {
    let data = pattern(200_000)
    let object = bucket.put("f", data: data)
    let store = try open()
    _ = try await readAll(store, "f")
    let spare = SpareBuffer(ByteBufferAllocator().buffer(capacity: 1 << 20))
    let bytes = try await store.readSettled(
      "f", generation: object.generation, range: 0..<65536, reusing: spare)
    XCTAssertEqual(bytes.bytes, Array(data[0..<65536]))
    XCTAssertEqual(bucketReads, 1)
  }

  func testARemountServesWhatTheLastMountKept() async throws {
    let data = pattern(1 << 20)
    let object = bucket.put("dir/f", data: data)
    var first: CachingStore? = try open()
    _ = try await readAll(try XCTUnwrap(first), "dir/f")
    first = nil  // unmounted: its lock goes with it
    let second = try open()
    XCTAssertEqual(second.bytesInUse, 1 << 20 + overhead)
    let bytes = try await second.readSettled("dir/f", generation: object.generation, range: 0..<object.size)
    XCTAssertEqual(bytes.bytes, data)
    XCTAssertEqual(bucketReads, 1)
  }

  func testSegmentsFilledAtOnceAreAllOnDiskForTheNextMount() async throws {
    let segment = 256 << 10
    let data = pattern(32 * segment + 1000)
    let object = bucket.put("f", data: data)
    do {
      let store = try open()
      _ = try await store.metadata(of: "f")
      try await withThrowingTaskGroup(of: Void.self) { group in
        for n in 0..<33 {
          let range = Int64(n * segment)..<Int64(min((n + 1) * segment, data.count))
          group.addTask { _ = try await store.readSettled("f", generation: object.generation, range: range) }
        }
        try await group.waitForAll()
      }
      await store.settled()
    }
    let second = try open()
    XCTAssertEqual(
      second.bytesInUse, Int64(data.count) + overhead, "every map write landed, the last one last")
    let bytes = try await second.readSettled("f", generation: object.generation, range: 0..<object.size)
    XCTAssertEqual(bytes.bytes, data)
    XCTAssertEqual(bucketReads, 33)
  }

  func testAnotherGenerationIsNeverServed() async throws {
    let old = bucket.put("f", data: pattern(100_000, seed: 1))
    let store = try open()
    _ = try await readAll(store, "f")
    let newData = pattern(100_000, seed: 2)
    let new = bucket.put("f", data: newData)
    XCTAssertNotEqual(old.generation, new.generation)
    let bytes = try await store.readSettled("f", generation: new.generation, range: 0..<new.size)
    XCTAssertEqual(bytes.bytes, newData)
    XCTAssertEqual(bucketReads, 2)
    // A handle that pinned the old generation still reads its own bytes, never the new ones.
    let pinned = try await store.readSettled("f", generation: old.generation, range: 0..<old.size)
    XCTAssertEqual(pinned.bytes, pattern(100_000, seed: 1))
  }

  func testOnlyWholeBlocksOfARangeAreKept() async throws {
    let data = pattern(400_000)
    let object = bucket.put("f", data: data)
    let store = try open()
    // Blocks 2 and 3 (131072..<262144) lie wholly inside.
    let part = try await store.readSettled("f", generation: object.generation, range: 100_000..<300_000)
    XCTAssertEqual(part.bytes, Array(data[100_000..<300_000]))
    XCTAssertEqual(store.bytesInUse, 2 * 65536 + overhead)
    let inside = try await store.readSettled("f", generation: object.generation, range: 131_072..<262_144)
    XCTAssertEqual(inside.bytes, Array(data[131_072..<262_144]))
    XCTAssertEqual(bucketReads, 2, "kept, but served only once the whole object matched its crc32c")
    // The rest makes the entry whole (its size known); it matches, and is served from then on.
    _ = try await readAll(store, "f")
    let across = try await store.readSettled("f", generation: object.generation, range: 120_000..<140_000)
    XCTAssertEqual(across.bytes, Array(data[120_000..<140_000]))
    XCTAssertEqual(bucketReads, 3)
  }

  /// An entry whose blocks do not all match the object's crc32c (a byte
  /// changed on the way) is never served, and goes once it is whole.
  func testAnEntryIsServedOnlyOnceItsWholeObjectMatched() async throws {
    let data = pattern(200_000)
    let object = bucket.put("f", data: data)
    let flipping = FlippingStore(inner: bucket, reads: 1)
    let store = try open(store: flipping)
    _ = try await store.metadata(of: "f")
    _ = try await store.readSettled("f", generation: object.generation, range: 0..<object.size)
    XCTAssertEqual(store.bytesInUse, 0, "the whole entry did not match: discarded")
    let again = try await store.readSettled("f", generation: object.generation, range: 0..<object.size)
    XCTAssertEqual(again.bytes, data)
    XCTAssertEqual(bucketReads, 2)
    let third = try await store.readSettled("f", generation: object.generation, range: 0..<object.size)
    XCTAssertEqual(third.bytes, data)
    XCTAssertEqual(bucketReads, 2, "the right bytes, matched, are served from disk")
  }

  func testForgettingCopiesDropsTheEntry() async throws {
    let data = pattern(100_000)
    let object = bucket.put("f", data: data)
    let store = try open()
    _ = try await store.metadata(of: "f")
    _ = try await store.readSettled("f", generation: object.generation, range: 0..<object.size)
    XCTAssertGreaterThan(store.bytesInUse, 0)
    store.forgetCopies(of: "f", generation: object.generation)
    await store.settled()
    XCTAssertEqual(store.bytesInUse, 0)
    _ = try await store.readSettled("f", generation: object.generation, range: 0..<object.size)
    XCTAssertEqual(bucketReads, 2, "fetched again")
  }

  func testTheShortLastBlockIsKeptOnlyWithTheSizeKnown() async throws {
    let data = pattern(70_000)
    let object = bucket.put("f", data: data)
    let store = try open()
    // No metadata seen and the answer as long as asked: block 1's end is unknown.
    _ = try await store.readSettled("f", generation: object.generation, range: 0..<70_000)
    XCTAssertEqual(store.bytesInUse, 65536 + overhead)
    // Asking past the end learns the size: the short block is kept.
    _ = try await store.readSettled("f", generation: object.generation, range: 65536..<200_000)
    XCTAssertEqual(store.bytesInUse, 70_000 + overhead)
    let bytes = try await store.readSettled("f", generation: object.generation, range: 0..<70_000)
    XCTAssertEqual(bytes.bytes, data)
    XCTAssertEqual(bucketReads, 2)
  }

  func testADamagedBlockIsNeverServed() async throws {
    let data = pattern(300_000)
    let object = bucket.put("f", data: data)
    let log = CapturedLog()
    let store = try XCTUnwrap(
      CachingStore.open(
        wrapping: bucket, cacheDirectory: directory, limit: 64 << 20, pool: pool, logger: log.logger))
    _ = try await readAll(store, "f")
    let entry = store.readCache.directory.entryPath(name: "f", generation: object.generation)
    corrupt(entry + ".data", at: 200_000)
    let bytes = try await store.readSettled("f", generation: object.generation, range: 0..<object.size)
    XCTAssertEqual(bytes.bytes, data)
    XCTAssertEqual(bucketReads, 2, "read again from the bucket")
    XCTAssertEqual(log.all.filter { $0.contains("does not match its crc32c") }.count, 1, "\(log.all)")
    // That read filled a fresh entry, which serves again.
    let again = try await store.readSettled("f", generation: object.generation, range: 0..<object.size)
    XCTAssertEqual(again.bytes, data)
    XCTAssertEqual(bucketReads, 2)
  }

  func testADataFileCutShortIsNeverServed() async throws {
    let data = pattern(300_000)
    let object = bucket.put("f", data: data)
    var first: CachingStore? = try open()
    _ = try await readAll(try XCTUnwrap(first), "f")
    let entry = try XCTUnwrap(first).readCache.directory.entryPath(name: "f", generation: object.generation)
    first = nil
    // What a power loss may leave: the map renamed into place, the data not all written.
    XCTAssertEqual(truncate(entry + ".data", 100_000), 0)
    let second = try open()
    let bytes = try await second.readSettled("f", generation: object.generation, range: 0..<object.size)
    XCTAssertEqual(bytes.bytes, data)
    XCTAssertEqual(bucketReads, 2)
  }

  func testALoadDropsWhatAnInterruptedFillLeft() async throws {
    var first: CachingStore? = try open()
    let path = try XCTUnwrap(first).readCache.directory.path
    first = nil
    // Bytes written but never listed, and a map never renamed into place.
    XCTAssertEqual(creat(path + "/0123456789abcdef-7.data", 0o600) >= 0, true)
    XCTAssertEqual(creat(path + "/0123456789abcdef-8.map.tmp", 0o600) >= 0, true)
    XCTAssertEqual(creat(path + "/0123456789abcdef-9.map", 0o600) >= 0, true)  // not a map
    let second = try open()
    XCTAssertEqual(second.bytesInUse, 0)
    XCTAssertEqual(fileNames(in: path), ["lock"])
  }

  func testAWholeObjectThatDoesNotMatchItsChecksumIsDiscarded() async throws {
    let data = pattern(200_000)
    let object = bucket.put("f", data: data)
    let log = CapturedLog()
    let store = try XCTUnwrap(
      CachingStore.open(
        wrapping: WrongChecksumStore(bucket), cacheDirectory: directory, limit: 64 << 20, pool: pool,
        logger: log.logger))
    let bytes = try await readAll(store, "f")
    XCTAssertEqual(bytes, data)
    XCTAssertEqual(store.bytesInUse, 0, "discarded")
    XCTAssertEqual(log.all.filter { $0.contains("do not match the object's crc32c") }.count, 1, "\(log.all)")
    _ = try await store.readSettled("f", generation: object.generation, range: 0..<object.size)
    XCTAssertEqual(bucketReads, 2)
  }

  func testACompleteEntryIsCheckedOnceAgainstTheObject() async throws {
    let object = bucket.put("f", data: pattern(200_000))
    let store = try open()
    // The size comes from a short answer, the checksum from one metadata request.
    _ = try await store.readSettled("f", generation: object.generation, range: 0..<300_000)
    XCTAssertEqual(bucket.calls(.metadata).count, 1)
    let entry = try XCTUnwrap(store.readCache.index.use(EntryKey(name: "f", generation: object.generation)))
    XCTAssertEqual(entry.entry.map?.verified, true)
  }

  func testEvictionKeepsTheDiskWithinTheLimit() async throws {
    let names = (0..<6).map { "f\($0)" }
    for (n, name) in names.enumerated() { bucket.put(name, data: pattern(200_000, seed: UInt8(n))) }
    let limit: Int64 = 512 << 10
    let store = try open(limit: limit)
    for name in names {
      _ = try await readAll(store, name)
      XCTAssertLessThanOrEqual(store.bytesInUse, limit)
    }
    XCTAssertEqual(store.bytesInUse, 2 * (200_000 + overhead), "the two most recent fit")
    bucket.resetCalls()
    _ = try await readAll(store, "f5")
    XCTAssertEqual(bucketReads, 0)
    _ = try await readAll(store, "f0")
    XCTAssertEqual(bucketReads, 1, "the least recently used went first")
    XCTAssertEqual(fileNames(in: store.readCache.directory.path).filter { $0.hasSuffix(".data") }.count, 2)
  }

  func testAnObjectLargerThanTheLimitIsNotKept() async throws {
    let data = pattern(300_000)
    bucket.put("big", data: data)
    let store = try open(limit: 200_000)
    let first = try await readAll(store, "big")
    XCTAssertEqual(first, data)
    XCTAssertEqual(store.bytesInUse, 0)
    XCTAssertEqual(fileNames(in: store.readCache.directory.path).filter { $0.hasSuffix(".data") }, [])
    // Not kept: the next read asks the bucket again.
    bucket.resetCalls()
    let second = try await readAll(store, "big")
    XCTAssertEqual(second, data)
    XCTAssertEqual(bucketReads, 1)
  }

  func testAFullDiskDropsTheEntryAndTheReadSucceeds() async throws {
    let data = pattern(300_000)
    let object = bucket.put("f", data: data)
    let disk = FailingDisk()
    let log = CapturedLog()
    let store = try XCTUnwrap(
      CachingStore.open(
        wrapping: bucket, cacheDirectory: directory, limit: 64 << 20, pool: pool, disk: disk,
        logger: log.logger))
    disk.failing.store(true, ordering: .relaxed)
    for _ in 0..<3 {
      let bytes = try await readAll(store, "f")
      XCTAssertEqual(bytes, data)
    }
    XCTAssertEqual(store.bytesInUse, 0)
    XCTAssertEqual(bucketReads, 3)
    XCTAssertEqual(log.all.filter { $0.contains("cannot write") }.count, 1, "logged once: \(log.all)")
    XCTAssertEqual(fileNames(in: store.readCache.directory.path), ["lock"])
    disk.failing.store(false, ordering: .relaxed)
    _ = try await readAll(store, "f")
    _ = try await store.readSettled("f", generation: object.generation, range: 0..<object.size)
    XCTAssertEqual(bucketReads, 4, "kept again once the disk has room")
  }

  func testASecondMountOfTheBucketRunsWithoutTheCache() throws {
    let log = CapturedLog()
    let first = try open()
    let second = CachingStore.open(
      wrapping: bucket, cacheDirectory: directory, limit: 1 << 20, pool: pool, patience: .milliseconds(200),
      logger: log.logger)
    XCTAssertNil(second)
    XCTAssertEqual(log.all.count, 1)
    XCTAssertTrue(log.all.first?.contains("in use by another mount") ?? false, "\(log.all)")
    let otherBucket = CachingStore.open(
      wrapping: InMemoryObjectStore(bucket: "other"), cacheDirectory: directory, limit: 1 << 20, pool: pool,
      logger: quiet
    )
    XCTAssertNotNil(otherBucket)
    withExtendedLifetime(first) {}
  }

  func testBucketsNoMountHoldsCountTowardTheLimit() async throws {
    for n in 0..<4 { bucket.put("f\(n)", data: pattern(200_000, seed: UInt8(n))) }
    var first: CachingStore? = try open()
    for n in 0..<4 { _ = try await readAll(try XCTUnwrap(first), "f\(n)") }
    let path = try XCTUnwrap(first).readCache.directory.path
    first = nil
    let other = InMemoryObjectStore(bucket: "other")
    var held = CachingStore.open(
      wrapping: other, cacheDirectory: directory, limit: 500_000, pool: pool, logger: quiet)
    XCTAssertNotNil(held)
    XCTAssertLessThanOrEqual(fileNames(in: path).filter { $0.hasSuffix(".data") }.count, 2)
    // A bucket a live mount holds is left alone.
    let live = try open()
    let kept = fileNames(in: path)
    held = nil
    held = CachingStore.open(
      wrapping: other, cacheDirectory: directory, limit: 1, pool: pool, logger: quiet)
    XCTAssertEqual(fileNames(in: path), kept)
    withExtendedLifetime((live, held)) {}
  }

  func testAnUploadLeavesItsBytesForTheNewGeneration() async throws {
    let data = pattern(500_000)
    let store = try open()
    let object = try await store.upload(
      "new", from: BytesSource(data), attributes: ObjectAttributes(), ifGenerationMatch: 0)
    await store.settled()
    XCTAssertEqual(store.bytesInUse, 500_000 + overhead)
    let bytes = try await store.readSettled("new", generation: object.generation, range: 0..<object.size)
    XCTAssertEqual(bytes.bytes, data)
    XCTAssertEqual(bucketReads, 0)
  }

  func testTheSeriesCountHitsMissesAndBytes() async throws {
    let metrics = TestMetrics()
    let object = bucket.put("f", data: pattern(100_000))
    let store = try XCTUnwrap(
      CachingStore.open(
        wrapping: bucket, cacheDirectory: directory, limit: 1 << 20, pool: pool, logger: quiet,
        metrics: metrics))
    _ = try await readAll(store, "f")
    _ = try await store.readSettled("f", generation: object.generation, range: 0..<10)
    _ = try await store.readSettled("f", generation: object.generation, range: 10..<20)
    XCTAssertEqual(try metrics.expectCounter("bucketfs_read_cache_misses_total").totalValue, 1)
    XCTAssertEqual(try metrics.expectCounter("bucketfs_read_cache_hits_total").totalValue, 2)
    XCTAssertEqual(try metrics.expectMeter("bucketfs_read_cache_bytes").lastValue, Double(100_000 + overhead))
  }

  func testAReadReturnsBeforeItsBytesAreWritten() async throws {
    let data = pattern(300_000)
    let object = bucket.put("f", data: data)
    let disk = HeldDisk()
    let store = try open(disk: disk)
    _ = try await store.metadata(of: "f")
    disk.holdingWrites.store(true, ordering: .releasing)
    let bytes = try await store.read("f", generation: object.generation, range: 0..<object.size, reusing: nil)
    XCTAssertEqual(bytes.bytes, data, "answered while the disk still holds the write")
    let writing = await eventually { disk.writesStarted.load(ordering: .relaxed) > 0 }
    XCTAssertTrue(writing)
    // Nothing is listed before it is written: a read meanwhile goes to the bucket.
    _ = try await store.read("f", generation: object.generation, range: 0..<65536, reusing: nil)
    XCTAssertEqual(bucketReads, 2)
    disk.holdingWrites.store(false, ordering: .releasing)
    await store.settled()
    let again = try await store.readSettled("f", generation: object.generation, range: 0..<object.size)
    XCTAssertEqual(again.bytes, data)
    XCTAssertEqual(bucketReads, 2, "served from disk once written")
  }

  func testAFillTheQueueCannotHoldIsDroppedAndALaterMiss() async throws {
    let metrics = TestMetrics()
    let data = pattern(300_000)
    let object = bucket.put("f", data: data)
    let small = IOPool(threadCount: 2, byteLimit: 200_000)
    let store = try XCTUnwrap(
      CachingStore.open(
        wrapping: bucket, cacheDirectory: directory, limit: 64 << 20, pool: small, logger: quiet,
        metrics: metrics))
    _ = try await readAll(store, "f")
    XCTAssertEqual(try metrics.expectCounter("bucketfs_read_cache_fills_dropped_total").totalValue, 1)
    XCTAssertEqual(store.bytesInUse, 0)
    let again = try await store.readSettled("f", generation: object.generation, range: 0..<131_072)
    XCTAssertEqual(again.bytes, Array(data[0..<131_072]))
    XCTAssertEqual(bucketReads, 2, "a miss again")
    // Within the limit, the same read is kept (served once the object is whole).
    XCTAssertEqual(store.bytesInUse, 131_072 + overhead)
    let stopped = await small.shutdown(patience: .seconds(10))
    XCTAssertTrue(stopped)
  }

  func testFillsWaitWhileReadsKeepComingAndLandAfterAPause() async throws {
    let data = pattern(300_000)
    let object = bucket.put("f", data: data)
    let paced = IOPool(threadCount: 2, byteLimit: 64 << 20, quiet: .seconds(1), maxDeferral: .seconds(30))
    let store = try XCTUnwrap(
      CachingStore.open(
        wrapping: bucket, cacheDirectory: directory, limit: 64 << 20, pool: paced, logger: quiet))
    _ = try await store.metadata(of: "f")
    // Reads of the file's four 64 KiB pieces, one after another, then of all of it.
    for piece in 0..<4 {
      let range = Int64(piece * 65536)..<Int64((piece + 1) * 65536)
      _ = try await store.read("f", generation: object.generation, range: range, reusing: nil)
    }
    _ = try await store.read("f", generation: object.generation, range: 0..<object.size, reusing: nil)
    XCTAssertEqual(store.bytesInUse, 0, "nothing written while the reads came")
    XCTAssertGreaterThan(paced.heldBytes, 0, "the fills wait in memory")
    await store.settled()
    XCTAssertEqual(store.bytesInUse, object.size + overhead, "written after the pause")
    let again = try await store.readSettled("f", generation: object.generation, range: 0..<object.size)
    XCTAssertEqual(again.bytes, data)
    XCTAssertEqual(bucketReads, 5, "served from disk")
    let stopped = await paced.shutdown(patience: .seconds(10))
    XCTAssertTrue(stopped)
  }

  func testAFillHeldTooLongRunsWhileReadsStillCome() async throws {
    let object = bucket.put("f", data: pattern(65536))
    let paced = IOPool(
      threadCount: 2, byteLimit: 64 << 20, quiet: .seconds(60), maxDeferral: .milliseconds(100))
    let store = try XCTUnwrap(
      CachingStore.open(
        wrapping: bucket, cacheDirectory: directory, limit: 64 << 20, pool: paced, logger: quiet))
    _ = try await store.metadata(of: "f")
    _ = try await store.read("f", generation: object.generation, range: 0..<object.size, reusing: nil)
    let landed = await eventually { store.bytesInUse == object.size + self.overhead }
    XCTAssertTrue(landed, "written after its longest wait, with no pause in the reads")
    let stopped = await paced.shutdown(patience: .seconds(10))
    XCTAssertTrue(stopped)
  }

  /// `f`, 4 pieces of 64 KiB, read one by one through a store whose fills
  /// wait for a 300 ms pause in the reads (and no longer than a minute).
  private func readInPieces(objectHoldLimit: Int, fastReader: Double, metrics: TestMetrics) async throws
    -> (store: CachingStore, pool: IOPool, object: ObjectMetadata, data: [UInt8])
  {
    let data = pattern(4 * 65536)
    let object = bucket.put("f", data: data)
    let paced = IOPool(
      threadCount: 2, byteLimit: 64 << 20, quiet: .milliseconds(300), maxDeferral: .seconds(60))
    let store = try XCTUnwrap(
      CachingStore.open(
        wrapping: bucket, cacheDirectory: directory, limit: 64 << 20, pool: paced,
        objectHoldLimit: objectHoldLimit, fastReader: fastReader, logger: quiet, metrics: metrics))
    _ = try await store.metadata(of: "f")
    for piece in 0..<4 {
      let range = Int64(piece * 65536)..<Int64((piece + 1) * 65536)
      _ = try await store.read("f", generation: object.generation, range: range, reusing: nil)
    }
    return (store, paced, object, data)
  }

  func testOneObjectHoldsAtMostItsLimitWhileWaitingAndTheRestIsALaterMiss() async throws {
    let metrics = TestMetrics()
    let (store, paced, object, data) = try await readInPieces(
      objectHoldLimit: 200_000, fastReader: 0, metrics: metrics)
    let other = bucket.put("g", data: pattern(65536))
    _ = try await store.metadata(of: "g")
    _ = try await store.read("g", generation: other.generation, range: 0..<other.size, reusing: nil)
    XCTAssertEqual(paced.heldBytes, 4 * 65536, "three pieces of f within its limit, and g's")
    XCTAssertEqual(try metrics.expectCounter("bucketfs_read_cache_fills_dropped_total").totalValue, 1)
    await store.settled()
    XCTAssertEqual(paced.heldBytes, 0)
    let reads = bucketReads
    XCTAssertEqual(store.bytesInUse, 4 * 65536 + 2 * overhead, "three pieces of f kept, and g")
    _ = try await store.readSettled("g", generation: other.generation, range: 0..<other.size)
    XCTAssertEqual(bucketReads, reads, "served from disk")
    let dropped = try await store.readSettled(
      "f", generation: object.generation, range: 3 * 65536..<4 * 65536)
    XCTAssertEqual(dropped.bytes, Array(data[3 * 65536..<4 * 65536]))
    XCTAssertEqual(bucketReads, reads + 1, "the dropped piece is a miss")
    // It made f whole: matched, f is served from disk.
    let kept = try await store.readSettled("f", generation: object.generation, range: 0..<object.size)
    XCTAssertEqual(kept.bytes, data)
    XCTAssertEqual(bucketReads, reads + 1)
    let stopped = await paced.shutdown(patience: .seconds(10))
    XCTAssertTrue(stopped)
  }

  func testASlowReaderHoldsPastTheObjectLimitSoItsFileIsKeptWhole() async throws {
    let metrics = TestMetrics()
    let (store, paced, object, data) = try await readInPieces(
      objectHoldLimit: 100_000, fastReader: .infinity, metrics: metrics)
    XCTAssertEqual(paced.heldBytes, 4 * 65536, "every piece held, past the object's limit")
    XCTAssertEqual(try metrics.expectCounter("bucketfs_read_cache_fills_dropped_total").totalValue, 0)
    await store.settled()
    let reads = bucketReads
    let kept = try await store.readSettled("f", generation: object.generation, range: 0..<object.size)
    XCTAssertEqual(kept.bytes, data)
    XCTAssertEqual(bucketReads, reads, "served from disk")
    let stopped = await paced.shutdown(patience: .seconds(10))
    XCTAssertTrue(stopped)
  }

  func testAnUnmountWritesTheFillsStillWaitingForAPause() async throws {
    let data = pattern(200_000)
    let object = bucket.put("f", data: data)
    let paced = IOPool(threadCount: 2, byteLimit: 64 << 20, quiet: .seconds(60), maxDeferral: .seconds(60))
    let store = try XCTUnwrap(
      CachingStore.open(
        wrapping: bucket, cacheDirectory: directory, limit: 64 << 20, pool: paced, logger: quiet))
    _ = try await store.metadata(of: "f")
    _ = try await store.read("f", generation: object.generation, range: 0..<object.size, reusing: nil)
    XCTAssertEqual(store.bytesInUse, 0, "waiting for a pause")
    let start = ContinuousClock.now
    let stopped = await paced.shutdown(patience: .seconds(10))
    XCTAssertTrue(stopped)
    XCTAssertLessThan(ContinuousClock.now - start, .seconds(5), "no wait for the pause once stopping")
    XCTAssertEqual(store.bytesInUse, object.size + overhead, "written before the pool stopped")
  }

  func testAnUploadFromAFileBecomesTheEntryWithoutACopy() async throws {
    let data = pattern(700_000)
    let disk = HeldDisk()
    let store = try open(disk: disk)
    let source = FileSource(path: directory + "/staged", bytes: data)
    let object = try await store.upload(
      "new", from: source, attributes: ObjectAttributes(), ifGenerationMatch: 0)
    await store.settled()
    let entry = store.readCache.directory.entryPath(name: "new", generation: object.generation)
    XCTAssertEqual(inode(entry + ".data"), inode(source.path), "the uploaded file itself")
    XCTAssertEqual(disk.writesStarted.load(ordering: .relaxed), 0, "no byte copied")
    XCTAssertEqual(store.bytesInUse, 700_000 + overhead)
    unlink(source.path)  // the stage goes when the file is closed
    let bytes = try await store.readSettled("new", generation: object.generation, range: 0..<object.size)
    XCTAssertEqual(bytes.bytes, data)
    XCTAssertEqual(bucketReads, 0)
  }

  func testAnUploadWhoseFileChangesBeforeItIsSummedIsNotKept() async throws {
    let data = pattern(300_000)
    let disk = HeldDisk()
    let store = try open(disk: disk)
    let source = FileSource(path: directory + "/staged", bytes: data)
    disk.holdingReads.store(true, ordering: .releasing)
    let object = try await store.upload(
      "new", from: source, attributes: ObjectAttributes(), ifGenerationMatch: 0)
    let summing = await eventually { disk.readsStarted.load(ordering: .relaxed) > 0 }
    XCTAssertTrue(summing)
    corrupt(source.path, at: 1000)  // a write to the file the stage would never let through linked
    disk.holdingReads.store(false, ordering: .releasing)
    await store.settled()
    XCTAssertEqual(store.bytesInUse, 0, "not what was stored: dropped")
    let bytes = try await store.readSettled("new", generation: object.generation, range: 0..<object.size)
    XCTAssertEqual(bytes.bytes, data)
    XCTAssertEqual(bucketReads, 1)
  }
}

/// Flips the middle byte of the next `reads` answers, as a faulty network would.
private final class FlippingStore: ForwardingObjectStore {
  let inner: any ObjectStore
  private let left: Mutex<Int>

  init(inner: any ObjectStore, reads: Int) {
    self.inner = inner
    self.left = Mutex(reads)
  }

  func read(_ name: String, generation: Int64, range: Range<Int64>, reusing spare: SpareBuffer?)
    async throws -> ByteBuffer
  {
    var bytes = try await inner.read(name, generation: generation, range: range, reusing: spare)
    let flip = left.withLock { left in
      defer { left = max(left - 1, 0) }
      return left > 0
    }
    if flip, bytes.readableBytes > 0 {
      let at = bytes.readerIndex + bytes.readableBytes / 2
      bytes.setInteger(bytes.getInteger(at: at, as: UInt8.self)! ^ 0x5a, at: at)
    }
    return bytes
  }
}

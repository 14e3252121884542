import FUSE
import NIOCore
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// docs/SEMANTICS.md#reads: generation pinned at open, ranged reads, read-ahead.
final class ReadTests: XCTestCase {
  func randomBytes(_ count: Int) -> [UInt8] {
    var generator = SplitMix64(seed: UInt64(count))
    return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
  }

  func testSequentialReadIsIdenticalAndUsesGrowingRequests() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    let data = randomBytes(5 << 20 + 12345)
    store.put("big", data: data)
    let fs = makeFileSystem(store)
    let inode = try await fs.inode(at: "big")
    let opened = try await fs.open(inode: inode, flags: O_RDONLY)
    store.resetCalls()
    var read: [UInt8] = []
    var offset: UInt64 = 0
    while true {
      let chunk = try await fs.read(inode: inode, handle: opened.handle, offset: offset, size: 128 << 10)
        .array
      if chunk.isEmpty { break }
      read += chunk
      offset += UInt64(chunk.count)
    }
    fs.release(inode: inode, handle: opened.handle)
    XCTAssertEqual(read.count, data.count)
    XCTAssertTrue(read == data)
    let reads = store.calls(.read)
    XCTAssertLessThan(reads.count, 12, "read-ahead, not one request per 128 KiB: \(reads.count)")
    XCTAssertGreaterThan(reads.count, 1)
  }

  /// Segments reuse the memory of consumed ones; the bytes stay exact. With
  /// segments of one size (the largest is the first) and an ample budget,
  /// every segment the reader consumes is kept as a spare and handed to the
  /// next fetch: which fetches get one depends on the order of reads, not on
  /// timing.
  func testSequentialReadRecyclesSegmentMemory() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    let data = randomBytes(12 << 20 + 777)
    store.put("big", data: data)
    let segment = 256 << 10
    let fs = makeFileSystem(store, readAheadMaxChunk: segment)
    let inode = try await fs.inode(at: "big")
    let opened = try await fs.open(inode: inode, flags: O_RDONLY)
    store.resetCalls()
    var read: [UInt8] = []
    var offset: UInt64 = 0
    while true {
      // Waits for the bytes each time, so every segment is whole when consumed.
      let chunk = try await fs.read(inode: inode, handle: opened.handle, offset: offset, size: segment).array
      if chunk.isEmpty { break }
      read += chunk
      offset += UInt64(chunk.count)
    }
    fs.release(inode: inode, handle: opened.handle)
    XCTAssertTrue(read == data, "identical bytes over recycled buffers")
    let fetches = store.calls(.read).count
    XCTAssertEqual(fetches, (data.count + segment - 1) / segment, "one fetch per segment")
    // The first few segments are fetched before any is consumed; from then on
    // each fetch follows a consumed segment and takes its memory.
    XCTAssertGreaterThan(store.readsIntoSpares, fetches / 2, "\(store.readsIntoSpares) of \(fetches)")
  }

  func testBytesAlreadyReadAheadAreAnsweredWithoutWaiting() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    let data = randomBytes(4 << 20)
    store.put("big", data: data)
    let fs = makeFileSystem(store)
    let inode = try await fs.inode(at: "big")
    let opened = try await fs.open(inode: inode, flags: O_RDONLY)
    XCTAssertNil(
      fs.readInline(inode: inode, handle: opened.handle, offset: 0, size: 10), "nothing fetched yet")
    XCTAssertEqual(store.calls(.read).count, 0, "asking what is at hand fetches nothing")

    var read = try await fs.read(inode: inode, handle: opened.handle, offset: 0, size: 100_000).array
    // The first segment is 256 KiB: this read spans it and the next one.
    let spanning = 200_000..<(200_000 + (128 << 10))
    // Polls until the bytes have arrived (a loaded machine may take a while).
    func buffered(_ offset: Int, _ size: Int) async throws -> [ByteBuffer]? {
      for _ in 0..<1000 {
        if let pieces = fs.readInline(inode: inode, handle: opened.handle, offset: UInt64(offset), size: size)
        {
          return pieces
        }
        try await Task.sleep(for: .milliseconds(10))
      }
      return nil
    }
    let rest = try await buffered(100_000, 100_000)
    read += try XCTUnwrap(rest, "read-ahead never arrived").array
    let next = try await buffered(spanning.lowerBound, spanning.count)
    let across = try XCTUnwrap(next, "the next segment never arrived")
    XCTAssertEqual(across.count, 2, "one piece per segment, not a copy")
    XCTAssertTrue(across.array == Array(data[spanning]))

    // Go on the way the FUSE layer does: at hand if possible, else wait.
    var offset = spanning.upperBound
    read = Array(data[0..<offset])
    var inline = 0
    while offset < data.count {
      let size = 128 << 10
      let chunk: [UInt8]
      if let hit = fs.readInline(inode: inode, handle: opened.handle, offset: UInt64(offset), size: size) {
        inline += 1
        chunk = hit.array
      } else {
        chunk = try await fs.read(inode: inode, handle: opened.handle, offset: UInt64(offset), size: size)
          .array
      }
      read += chunk
      offset += chunk.count
    }
    XCTAssertTrue(read == data)
    XCTAssertGreaterThan(inline, 0)
    XCTAssertEqual(
      fs.readInline(inode: inode, handle: opened.handle, offset: UInt64(data.count), size: 10)?.count, 0)
    fs.release(inode: inode, handle: opened.handle)
  }

  func testRandomReadsReturnExactlyTheRange() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    let data = randomBytes(3 << 20)
    store.put("big", data: data)
    let fs = makeFileSystem(store)
    let inode = try await fs.inode(at: "big")
    let opened = try await fs.open(inode: inode, flags: O_RDONLY)
    var generator = SplitMix64.forTest(seed: 40)
    for _ in 0..<40 {
      let offset = Int.random(in: 0..<(data.count + 1000), using: &generator)
      let size = Int.random(in: 1...200_000, using: &generator)
      let chunk = try await fs.read(inode: inode, handle: opened.handle, offset: UInt64(offset), size: size)
        .array
      let end = min(offset + size, data.count)
      XCTAssertTrue(
        chunk == (offset < data.count ? Array(data[offset..<end]) : []), "at \(offset) size \(size)")
    }
  }

  /// Offsets up to UInt64.max and sizes of 0 (or less) read nothing: no
  /// arithmetic on them may trap, in the synchronous path or the other.
  func testReadsAtAnyOffsetOrSizeGiveBytesOrNothing() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    let data = randomBytes(1000)
    store.put("f", data: data)
    let fs = makeFileSystem(store)
    let inode = try await fs.inode(at: "f")
    let opened = try await fs.open(inode: inode, flags: O_RDONLY)
    let offsets: [UInt64] = [.max, .max - 10, UInt64(Int64.max), UInt64(Int64.max) + 1, 1000, 999]
    for offset in offsets {
      for size in [4096, Int.max, 0, -1] {
        let expected: [UInt8] = offset == 999 && size > 0 ? [data[999]] : []
        let inline = fs.readInline(inode: inode, handle: opened.handle, offset: offset, size: size)
        if let inline { XCTAssertEqual(inline.array, expected, "inline, \(offset) size \(size)") }
        await XCTAssertEqualAsync(
          try await fs.read(inode: inode, handle: opened.handle, offset: offset, size: size).array, expected,
          "\(offset) size \(size)")
      }
    }
    await XCTAssertEqualAsync(
      try await fs.read(inode: inode, handle: opened.handle, offset: 0, size: 2000).array, data)
  }

  func testReplacedWhileOpenFailsWithESTALEInsteadOfMixingVersions() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("f", data: Array(repeating: 1, count: 8 << 20))
    let fs = makeFileSystem(store)
    let inode = try await fs.inode(at: "f")
    let opened = try await fs.open(inode: inode, flags: O_RDONLY)
    await XCTAssertEqualAsync(
      try await fs.read(inode: inode, handle: opened.handle, offset: 0, size: 10).array,
      Array(repeating: 1, count: 10))
    store.put("f", data: Array(repeating: 2, count: 8 << 20))
    // Bytes already read ahead belong to the pinned generation; new ones can't be had.
    await XCTAssertErrno(.stale) {
      _ = try await fs.read(inode: inode, handle: opened.handle, offset: 7 << 20, size: 10)
    }
  }

  func testPageCacheKeptWhileGenerationUnchanged() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("f", data: [1])
    let clock = ManualClock()
    let fs = makeFileSystem(store, clock: clock)
    let inode = try await fs.inode(at: "f")
    let first = try await fs.open(inode: inode, flags: O_RDONLY)
    XCTAssertFalse(first.keepCache)
    let second = try await fs.open(inode: inode, flags: O_RDONLY)
    XCTAssertTrue(second.keepCache)
    store.put("f", data: [2])
    clock.advance(120)
    let third = try await fs.open(inode: inode, flags: O_RDONLY)
    XCTAssertFalse(third.keepCache, "new generation: drop the cached pages")
  }

  func testOpenForWritingIsRefusedOnAReadOnlyMount() async throws {
    let store = InMemoryObjectStore(bucket: "demo")
    store.put("f", data: [1])
    let fs = makeFileSystem(store, readOnly: true)
    let inode = try await fs.inode(at: "f")
    await XCTAssertErrno(.readOnly) { _ = try await fs.open(inode: inode, flags: O_WRONLY) }
    await XCTAssertErrno(.readOnly) { _ = try await fs.open(inode: inode, flags: O_RDWR) }
    await XCTAssertErrno(.isDirectory) { _ = try await fs.open(inode: 1, flags: O_RDONLY) }
  }
}

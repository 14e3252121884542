import NIOCore
import ObjectStore
import StorageFake
import Synchronization
import XCTest

@testable import BucketFS

/// docs/SEMANTICS.md#reads-readahead: a sequential reader's segments are
/// parallel ranged GETs, more of them while it waits; a random reader gets
/// exactly what it asks; a failed or short part is fetched again, alone.
/// Concurrency is counted at a store double that holds every read until the
/// test lets it go, never by timing.
final class ParallelReadTests: XCTestCase {
  static let segment = 256 << 10

  /// What a test sees of a reader at work in another task.
  final class Progress: Sendable {
    /// Reads under way that wait for bytes (not answered from what is at hand).
    let waits = Atomic(0)
    let done = Atomic(false)
  }

  func pattern(_ count: Int) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 11) }
  }

  /// A store holding a file of `size` bytes, behind a HeldReadStore.
  func fixture(_ size: Int, holding: Bool = false) -> (InMemoryObjectStore, HeldReadStore, [UInt8]) {
    let base = InMemoryObjectStore(bucket: "demo")
    return (base, HeldReadStore(base, holding: holding), pattern(size))
  }

  /// A reader of `data` through `store`: segments of at most 256 KiB, 16 in
  /// flight at most (4 MiB ahead).
  /// (`streamBytes`: the file's bytes that warrant one stream from the
  /// reader's second sequential read; by default 8 MiB, as mounts have.)
  func makeReader(
    _ base: InMemoryObjectStore, _ store: any ObjectStore, _ data: [UInt8], budget: ReadAheadBudget? = nil,
    streamBytes: Int = 8 << 20
  ) -> FileReader {
    let meta = base.put("f", data: data)
    return FileReader(
      key: "f", generation: meta.generation, size: UInt64(data.count), store: store,
      maxSegment: Self.segment, maxAhead: 16 * Self.segment, maxStreams: 16, streamBytes: streamBytes,
      budget: budget ?? ReadAheadBudget(capacity: 64 << 20), tasks: BackgroundTasks())
  }

  /// Reads everything from `offset` on as the session does: at hand first,
  /// else waiting (counted in `waits` meanwhile).
  static func readAll(
    _ reader: FileReader, from offset: UInt64 = 0, chunk: Int = 128 << 10, progress: Progress? = nil
  ) async throws -> [UInt8] {
    var read: [UInt8] = []
    while true {
      let at = offset + UInt64(read.count)
      let pieces: [ByteBuffer]
      if let hit = reader.buffered(offset: at, count: chunk) {
        pieces = hit
      } else {
        progress?.waits.add(1, ordering: .relaxed)
        defer { progress?.waits.subtract(1, ordering: .relaxed) }
        pieces = try await reader.read(offset: at, count: chunk)
      }
      let bytes = pieces.array
      if bytes.isEmpty { return read }
      read += bytes
    }
  }

  /// Reads all of `reader` while `store` holds every fetch: each time the
  /// reader waits and every segment it has asked for is held, notes how many
  /// reads are (a read the budget sends direct included) and lets them all go. Returns the bytes and those counts.
  static func readHeld(_ reader: FileReader, _ store: HeldReadStore, budget: ReadAheadBudget) async throws
    -> (bytes: [UInt8], rounds: [Int])
  {
    let progress = Progress()
    let reading = Task {
      defer { progress.done.store(true, ordering: .relaxed) }
      return try await readAll(reader, progress: progress)
    }
    var rounds: [Int] = []
    while !progress.done.load(ordering: .relaxed) {
      let settled = await eventually(30) {
        progress.done.load(ordering: .relaxed)
          || (progress.waits.load(ordering: .relaxed) > 0 && store.waiting > 0
            && store.waiting >= reader.inFlight.segments)
      }
      XCTAssertTrue(settled, "the reader neither finished nor waited on its own segments")
      XCTAssertLessThanOrEqual(budget.inUse, budget.capacity)
      if !progress.done.load(ordering: .relaxed) { rounds.append(store.waiting) }
      store.releaseAll()
    }
    return (try await reading.value, rounds)
  }

  func testSequentialReaderGrowsItsParallelRequestsUpToTheLimit() async throws {
    let budget = ReadAheadBudget(capacity: 64 << 20)
    let (base, store, data) = fixture(24 << 20, holding: true)
    let reader = makeReader(base, store, data, budget: budget)
    let (read, rounds) = try await Self.readHeld(reader, store, budget: budget)
    XCTAssertTrue(read == data)
    XCTAssertEqual(rounds.first, 4, "four segments at first: \(rounds)")
    XCTAssertEqual(rounds.max(), 16, "grows to the limit while the reader waits: \(rounds)")
    XCTAssertLessThanOrEqual(store.peak, 16, "never more than the limit at once")
    XCTAssertEqual(reader.inFlight.streams, 16)
    let ranges = store.ranges
    XCTAssertEqual(ranges.map(\.count).reduce(0, +), data.count, "each byte fetched once")
    XCTAssertLessThanOrEqual(ranges.map(\.count).max() ?? 0, Self.segment)
  }

  func testSequentialReaderOfALargeFileStartsWide() async throws {
    let (base, store, data) = fixture(12 << 20, holding: true)
    // 12 MiB at one stream per 1 MiB: twelve streams, from the second read on.
    let reader = makeReader(base, store, data, streamBytes: 1 << 20)
    let first = Task { try await reader.read(offset: 0, count: 128 << 10).array }
    let four = await eventually(30) { store.waiting == 4 }
    XCTAssertTrue(four, "a first read may be a random reader's: four segments (\(store.waiting))")
    store.releaseAll()
    let head = try await first.value
    // The second sequential read has its bytes at hand; behind it the window
    // is twelve segments at once: the three the reader has (to 1 MiB), and
    // nine more (to 3.25 MiB) requested together.
    var read = head + (try XCTUnwrap(reader.buffered(offset: 128 << 10, count: 128 << 10))).array
    XCTAssertEqual(reader.inFlight.streams, 12)
    let nine = await eventually(30) { store.waiting == 9 }
    XCTAssertTrue(nine, "nine segments requested at once (\(store.waiting))")
    XCTAssertEqual(reader.inFlight.segments, 9)
    store.stopHolding()
    read += try await Self.readAll(reader, from: UInt64(read.count))
    XCTAssertTrue(read == data)
    XCTAssertEqual(store.ranges.map(\.count).reduce(0, +), data.count, "each byte fetched once")
  }

  /// A reader that waits only for its first bytes keeps the first window.
  func testReaderThatNeverWaitsAfterTheStartKeepsFourStreams() async throws {
    let (base, store, data) = fixture(8 << 20)
    let reader = makeReader(base, store, data)
    var read = try await reader.read(offset: 0, count: 128 << 10).array
    while read.count < data.count {
      let at = UInt64(read.count)
      // Waits for the bytes to arrive instead of asking for them before they have.
      var hit: [ByteBuffer]?
      _ = await eventually(30) {
        hit = reader.buffered(offset: at, count: 128 << 10)
        return hit != nil
      }
      read += try XCTUnwrap(hit, "at \(at)").array
    }
    XCTAssertTrue(read == data)
    XCTAssertEqual(reader.inFlight.streams, 4)
    XCTAssertLessThanOrEqual(store.peak, 4)
  }

  func testRandomReadsFetchExactlyTheBytesAsked() async throws {
    let (base, store, data) = fixture(16 << 20)
    // However large the file: wide streams are for sequential readers.
    let reader = makeReader(base, store, data, streamBytes: 1 << 20)
    var generator = SplitMix64.forTest(seed: 21)
    var asked: [Range<Int64>] = []
    for _ in 0..<30 {
      // More than 1 MiB from anywhere read before, and never at 0: never sequential.
      let offset =
        Int.random(in: 4..<15, using: &generator) << 20 + Int.random(in: 1..<4096, using: &generator)
      let count = Int.random(in: 1...(300 << 10), using: &generator)
      let read = try await reader.read(offset: UInt64(offset), count: count).array
      let end = min(offset + count, data.count)
      XCTAssertTrue(read == Array(data[offset..<end]), "at \(offset)")
      asked.append(Int64(offset)..<Int64(end))
      _ = try await reader.read(offset: 1 << 20, count: 3)  // over 1 MiB from the reads around it
      asked.append(Int64(1 << 20)..<Int64(1 << 20 + 3))
    }
    XCTAssertEqual(store.ranges, asked, "no byte more than asked, one request a read")
  }

  func testBudgetBoundsWhatParallelSegmentsHold() async throws {
    let budget = ReadAheadBudget(capacity: 1 << 20)
    let (base, store, data) = fixture(12 << 20, holding: true)
    var reader: FileReader? = makeReader(base, store, data, budget: budget)
    let (read, rounds) = try await Self.readHeld(try XCTUnwrap(reader), store, budget: budget)
    XCTAssertTrue(read == data)
    // 1 MiB holds four segments of 256 KiB; a read past them goes direct.
    XCTAssertLessThanOrEqual(rounds.max() ?? 0, 5, "\(rounds)")
    XCTAssertLessThanOrEqual(store.peak, 5)
    reader = nil
    let givenBack = await eventually { budget.inUse == 0 }
    XCTAssertTrue(givenBack, "every grant given back: \(budget.inUse)")
  }

  func testFailedPartIsFetchedAgainAlone() async throws {
    let (base, store, data) = fixture(6 << 20)
    let reader = makeReader(base, store, data)
    let failed = Int64(2 * Self.segment)
    store.fail(at: failed)
    let read = try await Self.readAll(reader)
    XCTAssertTrue(read == data)
    let ranges = store.ranges
    XCTAssertEqual(ranges.filter { $0.lowerBound == failed }.count, 2, "the failed part, fetched again")
    XCTAssertEqual(Set(ranges).count, ranges.count - 1, "nothing else fetched twice")
    XCTAssertEqual(ranges.map(\.count).reduce(0, +), data.count + Self.segment)
  }

  /// Reads the first segment, then the part at `offset`: what that read fails with (nil: nothing).
  static func failure(reading reader: FileReader, at offset: Int64) async throws -> (any Error)? {
    _ = try await reader.read(offset: 0, count: segment)
    do {
      _ = try await reader.read(offset: UInt64(offset), count: 128 << 10)
      return nil
    } catch {
      return error
    }
  }

  func testPartFailingTwiceFailsTheReadAndTheNextReadAsksAgain() async throws {
    let (base, store, data) = fixture(4 << 20)
    let reader = makeReader(base, store, data)
    let failed = Int64(Self.segment)
    store.fail(at: failed, times: 2)
    let error = try await Self.failure(reading: reader, at: failed)
    guard case StorageError.unavailable? = error else {
      return XCTFail("the part failed twice: \(String(describing: error))")
    }
    XCTAssertEqual(store.ranges.filter { $0.lowerBound == failed }.count, 2, "one retry, not more")
    let rest = try await Self.readAll(reader, from: UInt64(failed))
    XCTAssertTrue(rest == Array(data[Int(failed)...]))
  }

  /// Within a read whose deadline allows no retry, a failed part is not fetched again.
  func testNoSecondFetchWhenTheDeadlineAllowsNoRetry() async throws {
    let (base, store, data) = fixture(2 << 20)
    let reader = makeReader(base, store, data)
    store.fail(at: 0)
    do {
      _ = try await OperationDeadline.$current.withValue(OperationDeadline(deadline: nil, retries: false)) {
        try await reader.read(offset: 0, count: 4096)
      }
      XCTFail("one attempt, and it failed")
    } catch StorageError.unavailable {}
    XCTAssertEqual(store.ranges.filter { $0.lowerBound == 0 }.count, 1)
  }

  func testShortPartIsFetchedAgainAndNeverGivesAShortRead() async throws {
    let (base, store, data) = fixture(3 << 20)
    let reader = makeReader(base, store, data)
    let short = Int64(Self.segment)
    store.answerShort(at: short)
    let read = try await Self.readAll(reader)
    XCTAssertTrue(read == data)
    XCTAssertEqual(store.ranges.filter { $0.lowerBound == short }.count, 2)

    // Short every time: an error, not a short reply (the kernel would take it as the end).
    let again = makeReader(base, store, data)
    store.answerShort(at: short, times: 2)
    let error = try await Self.failure(reading: again, at: short)
    guard case StorageError.invalidResponse? = error else {
      return XCTFail("short twice: \(String(describing: error))")
    }
  }

  func testInterruptedReaderGivesUpItsPartAndALaterReadGetsIt() async throws {
    let (base, store, data) = fixture(2 << 20, holding: true)
    let reader = makeReader(base, store, data)
    let waiting = Task { try await reader.read(offset: 0, count: 4096) }
    let held = await eventually { store.waiting > 0 }
    XCTAssertTrue(held)
    waiting.cancel()
    do {
      _ = try await waiting.value
      XCTFail("an interrupted read answers nothing")
    } catch {}
    store.stopHolding()
    let read = try await Self.readAll(reader)
    XCTAssertTrue(read == data)
  }
}

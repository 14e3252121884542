import NIOCore
import ObjectStore
import Synchronization

/// Reads one open file: ranged GETs of the generation pinned at open, with
/// read-ahead for sequential access (docs/SEMANTICS.md#reads).
///
/// A sequential reader gets a stream of segments fetched ahead of it, larger
/// the longer it stays sequential, several in flight at once (parallel ranged
/// GETs; ``ReadAheadWindow`` says how many and how large); a random reader
/// gets exactly the bytes it asks for. A failed or short segment is fetched
/// again alone. Reads of bytes that have already
/// arrived are answered synchronously (``buffered(offset:count:)``): the session
/// thread replies at once, which is what keeps a sequential read at the speed
/// of the network rather than of task switches.
final class FileReader: Sendable {
  /// The object read; a rename by this mount moves it (``retarget(key:generation:)``).
  private let target: Mutex<(key: String, generation: Int64)>
  var key: String { target.withLock { $0.key } }
  var generation: Int64 { target.withLock { $0.generation } }
  let size: UInt64
  private let store: any ObjectStore
  /// Owns the tasks this starts (BackgroundTasks.swift).
  let tasks: BackgroundTasks
  /// Shared by all readers: every segment and kept spare holds a grant.
  private let budget: ReadAheadBudget
  /// The smallest segment worth fetching ahead when the budget is short.
  private static let minimumGrant = 64 << 10
  /// The check of a whole sequential read; nil when the object's CRC-32C is not known.
  private let check: ReadCheck?

  private struct Segment {
    let id: Int
    let start: UInt64
    let end: UInt64
    var task: Task<ByteBuffer, any Error>
    /// Budget held for it, at least its length.
    let grant: Int
    /// Set once the bytes have arrived.
    var bytes: ByteBuffer?
    /// 1 once a failed or short fetch of it has been started again.
    var attempt = 0
  }
  private struct Spare {
    let bytes: ByteBuffer
    let grant: Int
  }
  private struct State {
    /// Contiguous segments, in order.
    var segments: [Segment] = []
    var window: ReadAheadWindow
    var lastEnd: UInt64 = 0
    var nextID = 0
    /// Buffers of consumed segments, for the next segments to fill.
    var spares: [Spare] = []
  }
  /// Enough to cycle while a sequential reader consumes one segment at a time.
  private static let maxSpares = 2
  private let state: Mutex<State>

  init(
    key: String, generation: Int64, size: UInt64, crc32c: UInt32? = nil, store: any ObjectStore,
    maxSegment: Int, maxAhead: Int,
    maxStreams: Int = 16, streamBytes: Int = 8 << 20, budget: ReadAheadBudget,
    prefetched: (task: Task<ByteBuffer, any Error>, grant: Int)? = nil, tasks: BackgroundTasks
  ) {
    self.tasks = tasks
    self.target = Mutex((key, generation))
    self.size = size
    self.store = store
    let window = ReadAheadWindow(
      size: size, maxSegment: maxSegment, maxAhead: maxAhead, maxStreams: maxStreams,
      streamBytes: streamBytes)
    self.state = Mutex(State(window: window))
    self.budget = budget
    let check = crc32c.map { ReadCheck(size: size, expected: $0) }
    self.check = check
    // The whole file, fetched ahead (SiblingPrefetch): the first segment, holding its grant.
    if let prefetched {
      let task = tasks.start(.cancel) { [weak self] in
        let bytes = try Self.whole(try await prefetched.task.value, 0, size)
        check?.add(bytes, 0..<size)
        self?.arrived(0, bytes)
        return bytes
      }
      state.withLock { state in
        state.segments = [Segment(id: 0, start: 0, end: size, task: task, grant: prefetched.grant)]
        state.nextID = 1
      }
    }
  }

  deinit {
    state.withLock { state in
      drop(&state)
      for spare in state.spares { budget.release(spare.grant) }
      state.spares = []
    }
  }

  /// Segments requested and not arrived yet, and the most this reader may
  /// have (its streams now).
  var inFlight: (segments: Int, streams: Int) {
    state.withLock { state in (state.segments.count(where: { $0.bytes == nil }), state.window.streams) }
  }

  /// The bytes if every one of them has arrived already; never waits.
  func buffered(offset: UInt64, count: Int) -> [ByteBuffer]? {
    guard offset < size, count > 0 else { return [] }
    let end = min(offset + UInt64(count), size)
    // The end of the file waits for the verdict (``read(offset:count:)``); a failed handle fails.
    if let check, check.failed || (end == size && !check.matched) { return nil }
    return state.withLock { state -> [ByteBuffer]? in
      guard let first = state.segments.firstIndex(where: { $0.start <= offset && offset < $0.end }) else {
        return nil
      }
      var pieces: [ByteBuffer] = []
      var at = offset
      for segment in state.segments[first...] where at < end {
        guard segment.start <= at, let bytes = segment.bytes else { return nil }
        guard let piece = slice(bytes, of: segment, from: at, to: end) else { return nil }
        pieces.append(piece)
        at += UInt64(piece.readableBytes)
      }
      guard at == end else { return nil }
      state.window.continued()
      state.lastEnd = end
      state.window.widen()
      topUp(&state, from: offset)
      retire(&state, upTo: end)
      return pieces
    }
  }

  func read(offset: UInt64, count: Int) async throws -> [ByteBuffer] {
    // The bytes read were not the object's: every read of the handle fails
    // (the kernel reads a failed read-ahead page again by itself); a new open reads anew.
    if let failure = check?.failure { throw failure }
    let pieces = try await gather(offset: offset, count: count)
    if offset < size, count > 0, UInt64(count) >= size - offset {
      try await checkWhole()
    } else if let failure = takeMismatch() {
      // Bytes fetched again differed from the first fetch's: one of them was wrong.
      throw failure
    }
    return pieces
  }

  private func gather(offset: UInt64, count: Int) async throws -> [ByteBuffer] {
    if let pieces = buffered(offset: offset, count: count) { return pieces }
    let end = min(offset + UInt64(count), size)
    let planned = state.withLock { state -> [Segment]? in
      let covered =
        state.segments.first.map { $0.start <= offset && offset < state.segments.last!.end } ?? false
      defer { state.lastEnd = end }
      if covered {
        state.window.continued()
        if let needed = state.segments.first(where: { $0.end > offset }), needed.bytes == nil {
          state.window.waited(for: needed.id, nextID: state.nextID)
        }
      } else {
        drop(&state)
        // The kernel's own read-ahead may reorder neighbouring reads a little.
        let nearLast = offset >= state.lastEnd ? offset - state.lastEnd : state.lastEnd - offset
        state.window.restarted()
        // Without a grant the reader gets only what it asks for.
        guard offset == 0 || nearLast <= (1 << 20), append(&state, from: offset) else { return nil }
      }
      state.window.widen()
      topUp(&state, from: offset)
      return state.segments.filter { $0.start < end && $0.end > offset }
    }
    guard let planned, let first = planned.first, first.start <= offset else {
      return [try await direct(offset, end)]
    }

    var pieces: [ByteBuffer] = []
    var at = offset
    for segment in planned {
      let bytes: ByteBuffer
      do {
        bytes = try await arrival(of: segment)
      } catch is CancellationError where !Task.isCancelled {
        // Another read dropped this segment (a jump elsewhere): fetch directly.
        return [try await direct(offset, end)]
      } catch StorageError.cancelled where !Task.isCancelled {
        return [try await direct(offset, end)]
      } catch {
        // Forget the failed segment and everything after it so the next read retries.
        state.withLock { state in
          if let index = state.segments.firstIndex(where: { $0.id == segment.id }) {
            for dropped in state.segments[index...] {
              dropped.task.cancel()
              budget.release(dropped.grant)
            }
            state.segments.removeSubrange(index...)
          }
        }
        throw error
      }
      if let piece = slice(bytes, of: segment, from: max(offset, segment.start), to: end) {
        pieces.append(piece)
        at += UInt64(piece.readableBytes)
      }
    }
    state.withLock { state in retire(&state, upTo: end) }
    // Segments stopped short of the request (the budget ran out): the rest directly.
    if at < end, let last = planned.last, last.end < end, at == last.end {
      pieces.append(try await direct(at, end))
    }
    return pieces
  }

  /// Before the read that ends the file is answered: once the segments
  /// before it are in (a reader's reads may overlap), the bytes read from
  /// the start must sum to the object's CRC-32C. A mismatch fails this read
  /// and every later one of the handle.
  private func checkWhole() async throws {
    guard let check else { return }
    if check.isOpen {
      let earlier = state.withLock { $0.segments.filter { $0.bytes == nil }.map(\.task) }
      for task in earlier { _ = try? await task.value }
    }
    if let failure = takeMismatch() { throw failure }
  }

  /// Its bytes did not match: every read and the close of the handle fail.
  var mismatched: Bool { check?.failure != nil }

  /// The mismatch found, if any (`first` when this call found it: the
  /// handle fails from now on and its segments are dropped). The read that
  /// ends the file asks, and the close.
  func takeMismatch() -> IntegrityFailure? {
    let (key, generation) = target.withLock { $0 }
    guard let failure = check?.takeMismatch(key: key, generation: generation) else { return nil }
    if failure.first { state.withLock { drop(&$0) } }
    return failure
  }

  /// A segment's bytes once they arrive. A failed or short fetch is started
  /// again once, alone (the segments around it keep going), if the error is
  /// one a retry may cure and the read's deadline (``OperationDeadline``) has
  /// time left; the store's own retries stay inside that deadline too.
  private func arrival(of segment: Segment) async throws -> ByteBuffer {
    var task = segment.task
    var attempt = segment.attempt
    while true {
      do {
        // An interrupted reader gives up its segment; a later read fetches it again.
        let awaited = task
        return try await withTaskCancellationHandler {
          try await awaited.value
        } onCancel: {
          awaited.cancel()
        }
      } catch let error as StorageError where !Task.isCancelled && Self.mayRetry(error) {
        let again = state.withLock { state -> (Task<ByteBuffer, any Error>, Int)? in
          guard let index = state.segments.firstIndex(where: { $0.id == segment.id }) else { return nil }
          let current = state.segments[index]
          // Another read already started it again: wait for that.
          if current.attempt > attempt { return (current.task, current.attempt) }
          guard current.attempt == 0, Self.deadlineLeft() else { return nil }
          let retry = fetch(segment.id, segment.start, segment.end, reusing: nil)
          state.segments[index].task = retry
          state.segments[index].attempt = 1
          return (retry, 1)
        }
        guard let again else { throw error }
        (task, attempt) = again
      }
    }
  }

  /// Bytes [from, to) of a segment's buffer, as far as it reaches; nil if none.
  private func slice(_ bytes: ByteBuffer, of segment: Segment, from: UInt64, to: UInt64) -> ByteBuffer? {
    let lower = Int(from - segment.start)
    let upper = min(Int(min(to, segment.end) - segment.start), bytes.readableBytes)
    guard lower < upper else { return nil }
    return bytes.getSlice(at: bytes.readerIndex + lower, length: upper - lower)
  }

  private func direct(_ offset: UInt64, _ end: UInt64) async throws -> ByteBuffer {
    let (key, generation) = target.withLock { $0 }
    let bytes = try await store.read(
      key, generation: generation, range: Int64(offset)..<Int64(end), reusing: nil)
    // These count too (a reader the budget left without segments, a segment dropped by a jump).
    check?.add(bytes, offset..<min(end, offset + UInt64(bytes.readableBytes)))
    return bytes
  }

  /// Keeps the window's streams in flight ahead of the reader, as far as
  /// its reach and the budget allow.
  private func topUp(_ state: inout State, from offset: UInt64) {
    while let last = state.segments.last, last.end < size, last.end - offset < state.window.reach,
      state.segments.count(where: { $0.bytes == nil }) < state.window.streams,
      append(&state, from: last.end)
    {}
  }

  /// Starts fetching a segment from `start`, as large as the streak and the
  /// budget allow; false when the budget has too little left.
  private func append(_ state: inout State, from start: UInt64) -> Bool {
    let wanted = Int(min(start + state.window.segmentSize, size) - start)
    var grant = 0
    var reused: ByteBuffer?
    if let spare = state.spares.popLast() {
      if spare.grant >= wanted {
        (grant, reused) = (spare.grant, spare.bytes)
      } else {
        budget.release(spare.grant)
      }
    }
    if grant == 0 {
      grant = budget.acquire(upTo: wanted, atLeast: min(wanted, Self.minimumGrant))
      guard grant > 0 else { return false }
    }
    let end = start + UInt64(min(grant, wanted))
    let id = state.nextID
    state.nextID += 1
    let task = fetch(id, start, end, reusing: reused)
    state.segments.append(Segment(id: id, start: start, end: end, task: task, grant: grant))
    return true
  }

  /// One ranged GET of segment `id`; a short answer fails it (``arrival(of:)``).
  private func fetch(_ id: Int, _ start: UInt64, _ end: UInt64, reusing reused: consuming ByteBuffer?)
    -> Task<ByteBuffer, any Error>
  {
    let store = self.store
    let check = self.check
    let (key, generation) = target.withLock { $0 }
    // The store sums the check's pieces as they arrive, if it can.
    let sums = check?.arrivalSums(start..<end)
    let spare = SpareBuffer(reused, sums: sums)
    return tasks.start(.cancel) { [weak self] in
      let read = try await store.read(
        key, generation: generation, range: Int64(start)..<Int64(end), reusing: spare)
      let bytes = try Self.whole(read, start, end)
      // Else summed here, on the fetching task: each byte once, never on the loop thread.
      check?.add(bytes, start..<end, summed: sums?.sums)
      self?.arrived(id, bytes)
      return bytes
    }
  }

  private func arrived(_ id: Int, _ bytes: ByteBuffer) {
    state.withLock { state in
      if let index = state.segments.firstIndex(where: { $0.id == id }) { state.segments[index].bytes = bytes }
    }
  }

  /// Drops the segments a read has consumed, keeping their memory for reuse.
  /// The reply may still hold slices of it: a later write then copies
  /// (ByteBuffer is copy-on-write), so reuse never touches bytes in use.
  /// A spare keeps its grant; none is kept while the budget is short.
  private func retire(_ state: inout State, upTo end: UInt64) {
    while let first = state.segments.first, first.end <= end {
      state.segments.removeFirst()
      if let bytes = first.bytes, state.spares.count < Self.maxSpares, budget.available >= budget.capacity / 4
      {
        state.spares.append(Spare(bytes: bytes, grant: first.grant))
      } else {
        budget.release(first.grant)
      }
    }
  }

  private func drop(_ state: inout State) {
    for segment in state.segments {
      segment.task.cancel()
      budget.release(segment.grant)
    }
    state.segments = []
  }

  /// The same bytes now live at `key`, `generation` (a rename by this
  /// mount): later fetches go there, as reads of a renamed local file work.
  func retarget(key: String, generation: Int64) {
    target.withLock { $0 = (key, generation) }
  }
}

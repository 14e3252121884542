import NIOCore
import ObjectStore
import Synchronization

/// Reads one open file: ranged GETs of the generation pinned at open, with
/// read-ahead for sequential access (docs/SEMANTICS.md#reads).
///
/// A sequential reader gets a stream of segments fetched ahead of it, larger
/// the longer it stays sequential, several in flight at once; a random reader
/// gets exactly the bytes it asks for. Reads of bytes that have already
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
  private let firstSegment: UInt64 = 256 << 10
  private let maxSegment: UInt64
  private let maxAhead: UInt64
  /// Shared by all readers: every segment and kept spare holds a grant.
  private let budget: ReadAheadBudget
  /// The smallest segment worth fetching ahead when the budget is short.
  private static let minimumGrant = 64 << 10

  private struct Segment {
    let id: Int
    let start: UInt64
    let end: UInt64
    let task: Task<ByteBuffer, any Error>
    /// Budget held for it, at least its length.
    let grant: Int
    /// Set once the bytes have arrived.
    var bytes: ByteBuffer?
  }
  private struct Spare {
    let bytes: ByteBuffer
    let grant: Int
  }
  private struct State {
    /// Contiguous segments, in order.
    var segments: [Segment] = []
    /// Sequential reads in a row: the segment size grows with it.
    var streak = 0
    var lastEnd: UInt64 = 0
    var nextID = 0
    /// Buffers of consumed segments, for the next segments to fill.
    var spares: [Spare] = []
  }
  /// Enough to cycle while a sequential reader consumes one segment at a time.
  private static let maxSpares = 2
  private let state = Mutex(State())

  init(
    key: String, generation: Int64, size: UInt64, store: any ObjectStore, maxSegment: Int, maxAhead: Int,
    budget: ReadAheadBudget, prefetched: (task: Task<ByteBuffer, any Error>, grant: Int)? = nil
  ) {
    self.target = Mutex((key, generation))
    self.size = size
    self.store = store
    self.maxSegment = UInt64(max(maxSegment, 256 << 10))
    self.maxAhead = UInt64(max(maxAhead, maxSegment))
    self.budget = budget
    // The whole file, fetched ahead (SiblingPrefetch): the first segment, holding its grant.
    if let prefetched {
      let task = Task { [weak self] in
        let bytes = try await prefetched.task.value
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

  /// The bytes if every one of them has arrived already; never waits.
  func buffered(offset: UInt64, count: Int) -> [ByteBuffer]? {
    guard offset < size, count > 0 else { return [] }
    let end = min(offset + UInt64(count), size)
    return state.withLock { state -> [ByteBuffer]? in
      guard let first = state.segments.firstIndex(where: { $0.start <= offset && offset < $0.end }) else {
        return nil
      }
      var pieces: [ByteBuffer] = []
      var at = offset
      for segment in state.segments[first...] where at < end {
        guard segment.start == at || segment.start <= at, let bytes = segment.bytes else { return nil }
        guard let piece = slice(bytes, of: segment, from: at, to: end) else { return nil }
        pieces.append(piece)
        at += UInt64(piece.readableBytes)
      }
      guard at == end else { return nil }
      state.streak += 1
      state.lastEnd = end
      topUp(&state, from: offset)
      retire(&state, upTo: end)
      return pieces
    }
  }

  func read(offset: UInt64, count: Int) async throws -> [ByteBuffer] {
    if let pieces = buffered(offset: offset, count: count) { return pieces }
    let end = min(offset + UInt64(count), size)
    let planned = state.withLock { state -> [Segment]? in
      let covered =
        state.segments.first.map { $0.start <= offset && offset < state.segments.last!.end } ?? false
      defer { state.lastEnd = end }
      if covered {
        state.streak += 1
      } else {
        drop(&state)
        // The kernel's own read-ahead may reorder neighbouring reads a little.
        let nearLast = offset >= state.lastEnd ? offset - state.lastEnd : state.lastEnd - offset
        state.streak = 0
        // Without a grant the reader gets only what it asks for.
        guard offset == 0 || nearLast <= (1 << 20), append(&state, from: offset) else { return nil }
      }
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
        // An interrupted reader gives up its segment; a later read fetches it again.
        let task = segment.task
        bytes = try await withTaskCancellationHandler {
          try await task.value
        } onCancel: {
          task.cancel()
        }
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
      if UInt64(bytes.readableBytes) < segment.end - segment.start { break }  // object shorter than expected
    }
    state.withLock { state in retire(&state, upTo: end) }
    // Segments stopped short of the request (the budget ran out): the rest directly.
    if at < end, let last = planned.last, last.end < end, at == last.end {
      pieces.append(try await direct(at, end))
    }
    return pieces
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
    return try await store.read(key, generation: generation, range: Int64(offset)..<Int64(end))
  }

  /// Keeps a few segments in flight ahead of the reader, as far as the budget allows.
  private func topUp(_ state: inout State, from offset: UInt64) {
    while let last = state.segments.last, last.end < size,
      last.end - offset < min(maxAhead, segmentSize(state.streak) * 4),
      append(&state, from: last.end)
    {}
  }

  private func segmentSize(_ streak: Int) -> UInt64 {
    min(maxSegment, firstSegment << UInt64(min(streak, 16)))
  }

  /// Starts fetching a segment from `start`, as large as the streak and the
  /// budget allow; false when the budget has too little left.
  private func append(_ state: inout State, from start: UInt64) -> Bool {
    let wanted = Int(min(start + segmentSize(state.streak), size) - start)
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
    let store = self.store
    let (key, generation) = target.withLock { $0 }
    let spare = SpareBuffer(reused)
    let task = Task { [weak self] in
      let bytes = try await store.read(
        key, generation: generation, range: Int64(start)..<Int64(end), reusing: spare)
      self?.arrived(id, bytes)
      return bytes
    }
    state.segments.append(Segment(id: id, start: start, end: end, task: task, grant: grant))
    return true
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

import ObjectStore

/// Reads one open file: ranged GETs of the generation pinned at open, with
/// read-ahead for sequential access (SPEC §5).
///
/// A sequential reader gets a stream of segments fetched ahead of it, larger
/// the longer it stays sequential, several in flight at once; a random reader
/// gets exactly the bytes it asks for.
actor FileReader {
  let key: String
  let generation: Int64
  let size: UInt64
  private let store: any ObjectStore
  private let firstSegment: UInt64 = 256 << 10
  private let maxSegment: UInt64
  private let maxAhead: UInt64

  private struct Segment {
    let start: UInt64
    let end: UInt64
    let bytes: Task<[UInt8], any Error>
  }
  /// Contiguous segments, in order.
  private var segments: [Segment] = []
  /// Sequential reads in a row: the segment size grows with it.
  private var streak = 0
  private var lastEnd: UInt64 = 0

  init(key: String, generation: Int64, size: UInt64, store: any ObjectStore, maxSegment: Int, maxAhead: Int) {
    self.key = key
    self.generation = generation
    self.size = size
    self.store = store
    self.maxSegment = UInt64(max(maxSegment, 256 << 10))
    self.maxAhead = UInt64(max(maxAhead, maxSegment))
  }

  deinit {
    for segment in segments { segment.bytes.cancel() }
  }

  func read(offset: UInt64, count: Int) async throws -> [UInt8] {
    guard offset < size, count > 0 else { return [] }
    let end = min(offset + UInt64(count), size)
    defer { lastEnd = end }

    let covered = segments.first.map { $0.start <= offset && offset < segments.last!.end } ?? false
    if covered {
      streak += 1
    } else {
      dropSegments()
      // The kernel's own read-ahead may reorder neighbouring reads a little.
      let nearLast = offset >= lastEnd ? offset - lastEnd : lastEnd - offset
      guard offset == 0 || nearLast <= (1 << 20) else {
        streak = 0
        return try await store.read(key, generation: generation, range: Int64(offset)..<Int64(end))
      }
      streak = 0
      appendSegment(from: offset)
    }
    // Keep a few segments in flight ahead of the reader.
    while let last = segments.last, last.end < size, last.end - offset < min(maxAhead, segmentSize * 4) {
      appendSegment(from: last.end)
    }

    var result: [UInt8] = []
    result.reserveCapacity(Int(end - offset))
    for segment in segments where segment.start < end && segment.end > offset {
      let bytes: [UInt8]
      do {
        // An interrupted reader gives up its segment; a later read fetches it again.
        let task = segment.bytes
        bytes = try await withTaskCancellationHandler {
          try await task.value
        } onCancel: {
          task.cancel()
        }
      } catch is CancellationError where !Task.isCancelled {
        // Another read dropped this segment (a jump elsewhere): fetch directly.
        return try await store.read(key, generation: generation, range: Int64(offset)..<Int64(end))
      } catch StorageError.cancelled where !Task.isCancelled {
        return try await store.read(key, generation: generation, range: Int64(offset)..<Int64(end))
      } catch {
        // Forget the failed segment and everything after it so the next read retries.
        if let index = segments.firstIndex(where: { $0.start == segment.start }) {
          segments.removeSubrange(index...)
        }
        throw error
      }
      let from = Int(max(offset, segment.start) - segment.start)
      let to = min(Int(end - segment.start), bytes.count)
      if from < to { result += bytes[from..<to] }
      if UInt64(bytes.count) < segment.end - segment.start { break }  // object shorter than expected
    }
    // Consumed segments are no longer needed.
    segments.removeAll { $0.end <= end }
    return result
  }

  private var segmentSize: UInt64 { min(maxSegment, firstSegment << UInt64(min(streak, 16))) }

  private func appendSegment(from start: UInt64) {
    let end = min(start + segmentSize, size)
    let store = self.store
    let key = self.key
    let generation = self.generation
    let task = Task {
      try await store.read(key, generation: generation, range: Int64(start)..<Int64(end))
    }
    segments.append(Segment(start: start, end: end, bytes: task))
  }

  private func dropSegments() {
    for segment in segments { segment.bytes.cancel() }
    segments = []
  }
}

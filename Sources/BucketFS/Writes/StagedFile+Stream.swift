import FUSE
import ObjectStore

/// Its stream (for ``WriteStreams``): what the stream of parts is told and
/// asked, each under the file's lock.
extension StagedFile {
  /// Whether a write at `offset` keeps the file in order, and what then
  /// becomes of its stream.
  func streamStep(beforeWriteAt offset: UInt64) -> StreamStep {
    state.withLock { $0.streamStep(beforeWriteAt: offset) }
  }

  /// The size of a file that may start a stream now: written in order,
  /// loaded, well, and not streaming yet.
  var streamCandidateSize: Int64? {
    state.withLock { s in
      s.stream == nil && s.sequential && s.loaded && !s.unlinked && s.poisoned == nil ? Int64(s.size) : nil
    }
  }

  /// The stream, the key and the base generation, while it streams.
  var streamSnapshot: (stream: WriteStream, key: String, generation: Int64)? {
    state.withLock { s in s.stream.map { ($0, s.key, s.baseGeneration) } }
  }

  var isStreaming: Bool { state.withLock { $0.stream != nil } }

  /// Whether bytes of `range` may have left the stage.
  func streamedAway(_ range: Range<Int64>) -> Bool {
    state.withLock { $0.stream?.gone(range) ?? false }
  }

  /// The stored crc32c of the generation a stream's commit composes first.
  var baseCRC32C: UInt32? { state.withLock { $0.base?.crc32c }.flatMap { CRC32C.value(base64: $0) } }

  /// `stream` begins: returns the sidecar that says where its bytes go.
  func beginStream(_ stream: WriteStream) -> StageRecord {
    state.withLock { s in
      s.stream = stream
      return s.record(uploaded: false)
    }
  }

  /// The stream `id` ended (brought back, dropped or never begun).
  func endStream(_ id: UInt64) {
    state.withLock { s in if s.stream?.id == id { s.stream = nil } }
  }

  /// The file is not written in order any more: it never streams again
  /// until it is emptied.
  func noteOutOfOrder() {
    state.withLock { $0.sequential = false }
  }

  /// Starts the uploads of the parts now complete (``WriteStream/launch(upTo:_:)``).
  func launchParts(_ start: (Range<Int64>, UInt64, any PartedUpload) -> Task<Void, Never>) {
    state.withLock { s in
      let size = Int64(s.size)
      s.stream?.launch(upTo: size, start)
    }
  }

  /// Stream `id`'s part of bytes `range` is stored; false when the stream
  /// no longer has it.
  func notePartStored(_ part: StoredPart, at range: Range<Int64>, stream id: UInt64) -> Bool {
    state.withLock { s in
      guard s.stream?.id == id, s.stream?.store(part, at: range) == true else { return false }
      // Bytes before every part still going up are summed for good.
      if let stream = s.stream { s.sums.forget(below: stream.unstoredStart) }
      return true
    }
  }

  /// Stream `id`'s bytes of `range` were punched out of the stage.
  func notePunched(_ range: Range<Int64>, stream id: UInt64) {
    state.withLock { s in if s.stream?.id == id { s.stream?.gone += Int64(range.count) } }
  }

  /// Stream `id`'s part of `range` could not be stored: it ends at the next
  /// write or commit. Returns the key, for the log.
  func notePartFailed(at range: Range<Int64>, stream id: UInt64) -> String {
    state.withLock { s in
      if s.stream?.id == id { s.stream?.partFailed(at: range) }
      return s.key
    }
  }

  /// Whether a writer of `count` more bytes may go on; `.enough` when the
  /// file does not stream.
  func room(for count: Int64) -> WriteStream.Room {
    state.withLock { s in s.stream?.room(for: count, size: Int64(s.size)) ?? .enough }
  }

  /// Starts a combine of stream `id` if it needs one (``WriteStream/startCombine(_:)``).
  func startCombine(
    stream id: UInt64, _ start: ([StoredPart], Range<Int64>, Int, any PartedUpload) -> Task<Void, Never>
  ) {
    state.withLock { s in if s.stream?.id == id { s.stream?.startCombine(start) } }
  }

  /// A combine of stream `id` made `combined`; false when it came too late
  /// (``WriteStream/replace(count:range:with:round:)``).
  func noteCombined(
    _ combined: StoredPart, replacing count: Int, range: Range<Int64>, stream id: UInt64, round: Int
  ) -> Bool {
    state.withLock { s in
      s.stream?.id == id
        && s.stream?.replace(count: count, range: range, with: combined, round: round) == true
    }
  }

  func noteCombineFailed(stream id: UInt64, round: Int) {
    state.withLock { s in if s.stream?.id == id { s.stream?.combineFailed(round: round) } }
  }

  /// Claims the stream for a commit's compose of `size` bytes (``WriteStream/claimForCompose(size:)``).
  func claimStreamForCompose(size: Int64) -> WriteStream.ComposeClaim {
    state.withLock { s in s.stream?.claimForCompose(size: size) ?? .noStream }
  }

  /// The compose of stream `claimed` made the object of `size` bytes.
  func noteComposed(size: Int64, claimed: WriteStream) {
    state.withLock { s in
      if s.stream?.id == claimed.id { s.stream?.composed(size: size, claimed: claimed) }
    }
  }

  /// The compose of stream `id` failed; `refused` by its precondition, the
  /// file is stale and the stream gone (its parts are deleted by the caller).
  func noteComposeFailed(stream id: UInt64, refused: Bool) {
    state.withLock { s in
      if s.stream?.id == id { s.stream?.composing = false }
      if refused {
        s.poisoned = .stale
        s.stream = nil
      }
    }
  }

  /// The tasks an ending stream awaits (``WriteStream/pending(combines:)``).
  func streamTasks(combines: Bool) -> [Task<Void, Never>] {
    state.withLock { $0.stream?.pending(combines: combines) ?? [] }
  }
}

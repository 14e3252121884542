import ObjectStore

/// Stored parts combined into one while the file is written, only as far as
/// needed for the close to compose every source in one request
/// (docs/SEMANTICS.md#writes-streaming).
extension WriteStream {
  /// Whether the compose at close could take more sources than one
  /// request takes, with a full round of part uploads still to come.
  var needsCombining: Bool { sourcesAtClose + plan.parallel > Self.composeLimit }

  /// The parts to combine next: the stored ones in a row after those
  /// combined before (so each byte is combined once), else from the first
  /// (a stream so long that its combined parts alone crowd the compose);
  /// at least 2, at most one compose's worth.
  var combinable: Range<Int>? {
    let combined = parts.prefix { $0.components > 1 }.count
    for start in [combined, 0] {
      let run = parts[start...].prefix { $0.stored != nil }.prefix(Self.composeLimit).count
      if run >= 2 { return start..<start + run }
    }
    return nil
  }
}

extension Staging {
  /// Starts a combine, apart from the writer, when the close would
  /// otherwise compose too many sources. A file of up to about 22 parts
  /// (176 MiB in 8 MiB parts) is never combined: its close makes one
  /// compose, and nothing during the write adds requests or, on an
  /// emulator, copies of its bytes.
  func combineIfNeeded(_ staged: StagedFile, stream id: UInt64) {
    staged.state.withLock { s in
      guard var stream = s.stream, stream.id == id, stream.combining == nil, !stream.failed,
        !stream.composing, stream.needsCombining, let run = stream.combinable
      else { return }
      let pieces = stream.parts[run].compactMap(\.stored)
      let range =
        stream.parts[run.lowerBound].range.lowerBound..<stream.parts[run.upperBound - 1].range.upperBound
      let (upload, round) = (stream.upload, stream.combineRound)
      stream.combining = tasks.start(.finish) {
        await self.combine(staged, stream: id, round: round, pieces, range: range, via: upload)
      }
      s.stream = stream
    }
  }

  /// Composes `pieces` (the parts of bytes `range`) into one part, which
  /// then takes their place; the pieces, or the combined part when it came
  /// too late (a commit went ahead without it), are deleted.
  private func combine(
    _ staged: StagedFile, stream id: UInt64, round: Int, _ pieces: [StoredPart], range: Range<Int64>,
    via upload: any PartedUpload
  ) async {
    do {
      let combined = try await upload.combine(pieces)
      let replaced = staged.state.withLock { s -> Bool in
        guard var stream = s.stream, stream.id == id, stream.combineRound == round else { return false }
        stream.combining = nil
        defer { s.stream = stream }
        guard let first = stream.parts.firstIndex(where: { $0.range.lowerBound == range.lowerBound }),
          first + pieces.count <= stream.parts.count,
          stream.parts[first + pieces.count - 1].range.upperBound == range.upperBound
        else { return false }
        let replaced = first..<first + pieces.count
        var part = WriteStream.Part(range: range)
        part.stored = combined
        part.components = stream.parts[replaced].reduce(0) { $0 + $1.components }
        stream.parts.replaceSubrange(replaced, with: [part])
        return true
      }
      let unused = replaced ? pieces : [combined]
      inBackground { await upload.remove(unused) }
    } catch {
      staged.state.withLock { s in
        if s.stream?.id == id, s.stream?.combineRound == round { s.stream?.combining = nil }
      }
      logger.debug(
        "combining \(pieces.count) parts under \(upload.prefix) failed (\(error)); the close composes them")
      return
    }
    combineIfNeeded(staged, stream: id)
  }
}

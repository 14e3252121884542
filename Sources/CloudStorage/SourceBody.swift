import NIOConcurrencyHelpers
import NIOCore
import ObjectStore

/// A request body read from an upload source in 1 MiB pieces as the client
/// sends it, so a chunk of any size costs about three pieces of memory (the
/// one being sent and the two kept for reuse). Each
/// attempt iterates afresh from `offset`. A local read failure is kept in
/// `failure` so the caller can pass it on unchanged rather than as an outage.
struct SourceBody: AsyncSequence, Sendable {
  typealias Element = ByteBuffer
  static let piece = 1 << 20

  let source: any UploadSource
  let offset: Int64
  let count: Int
  let failure = NIOLockedValueBox<(any Error)?>(nil)
  /// Sums the source's bytes as they are read for sending, when given.
  var running: RunningChecksum? = nil

  struct AsyncIterator: AsyncIteratorProtocol {
    let body: SourceBody
    var done = 0
    /// The last two pieces handed out: the older one's memory takes the
    /// next piece once the sender has let it go (two back, so the one
    /// being sent is never asked for).
    var sent: [ByteBuffer] = []

    mutating func next() async throws -> ByteBuffer? {
      guard done < body.count else { return nil }
      let at = body.offset + Int64(done)
      var piece: ByteBuffer
      let spare = SpareBuffer(sent.count >= 2 ? sent.removeFirst() : nil)
      do {
        piece = try await body.source.load(
          at: at, count: Swift.min(SourceBody.piece, body.count - done), reusing: spare)
        guard piece.readableBytes > 0 else {
          throw StorageError.badRequest("upload source ended at \(at) of \(body.source.size) bytes")
        }
      } catch {
        body.failure.withLockedValue { $0 = error }
        throw error
      }
      if piece.readableBytes > body.count - done {
        piece.moveWriterIndex(to: piece.readerIndex + body.count - done)
      }
      body.running?.add(piece, at: at)
      done += piece.readableBytes
      sent.append(piece)
      return piece
    }
  }

  func makeAsyncIterator() -> AsyncIterator { AsyncIterator(body: self) }
}

/// The CRC-32C of a source's first bytes, summed from the pieces read for
/// sending: a piece counts only for the bytes past those summed, so bytes
/// sent again after a fault are not summed twice.
final class RunningChecksum: Sendable {
  private let state = NIOLockedValueBox<(summed: Int64, crc: UInt32)>((0, 0))

  func add(_ piece: ByteBuffer, at offset: Int64) {
    state.withLockedValue { state in
      let end = offset + Int64(piece.readableBytes)
      guard offset <= state.summed, end > state.summed else { return }
      let skip = Int(state.summed - offset)
      piece.withUnsafeReadableBytes { raw in
        state.crc = CRC32C.update(state.crc, UnsafeRawBufferPointer(rebasing: raw[skip...]))
      }
      state.summed = end
    }
  }

  /// The checksum of the first `size` bytes; nil unless exactly those were summed.
  func sum(of size: Int64) -> UInt32? {
    state.withLockedValue { $0.summed == size ? $0.crc : nil }
  }
}

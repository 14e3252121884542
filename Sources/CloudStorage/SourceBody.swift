import NIOConcurrencyHelpers
import NIOCore
import ObjectStore

/// A request body read from an upload source in 1 MiB pieces as the client
/// sends it, so a chunk of any size costs about one piece of memory. Each
/// attempt iterates afresh from `offset`. A local read failure is kept in
/// `failure` so the caller can pass it on unchanged rather than as an outage.
struct SourceBody: AsyncSequence, Sendable {
  typealias Element = ByteBuffer
  static let piece = 1 << 20

  let source: any UploadSource
  let offset: Int64
  let count: Int
  let failure = NIOLockedValueBox<(any Error)?>(nil)

  struct AsyncIterator: AsyncIteratorProtocol {
    let body: SourceBody
    var done = 0

    mutating func next() async throws -> ByteBuffer? {
      guard done < body.count else { return nil }
      let at = body.offset + Int64(done)
      var piece: ByteBuffer
      do {
        piece = try await body.source.load(at: at, count: Swift.min(SourceBody.piece, body.count - done))
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
      done += piece.readableBytes
      return piece
    }
  }

  func makeAsyncIterator() -> AsyncIterator { AsyncIterator(body: self) }
}

import Foundation
import NIOCore
import ObjectStore
import XCTest

@testable import CloudStorage

/// A request body read from its source in pieces (``SourceBody``).
final class SourceBodyTests: XCTestCase {
  /// A source that writes each piece into the spare buffer it is handed,
  /// and counts the pieces that landed in memory it had already.
  final class ReusingSource: UploadSource, @unchecked Sendable {
    let size: Int64
    private let lock = NSLock()
    private var reusedPieces = 0

    init(size: Int64) { self.size = size }

    var reused: Int { lock.withLock { reusedPieces } }

    func read(at offset: Int64, count: Int) throws -> ByteBuffer {
      ByteBuffer(repeating: 7, count: count)
    }

    func load(at offset: Int64, count: Int, reusing spare: SpareBuffer) async throws -> ByteBuffer {
      var buffer = spare.take() ?? ByteBuffer()
      let before = buffer.capacity > 0 ? buffer.withVeryUnsafeBytes { $0.baseAddress } : nil
      buffer.clear(minimumCapacity: count)
      buffer.writeRepeatingByte(7, count: count)
      if before != nil, before == buffer.withVeryUnsafeBytes({ $0.baseAddress }) {
        lock.withLock { reusedPieces += 1 }
      }
      return buffer
    }
  }

  /// Each piece after the first two goes into the memory of the piece two
  /// back, once the sender let it go: no fresh pages for every MiB sent.
  func testPiecesGoIntoTheMemoryOfThoseSentBefore() async throws {
    let source = ReusingSource(size: 5 << 20)
    let body = SourceBody(source: source, offset: 0, count: 5 << 20)
    var sent = 0
    for try await piece in body { sent += piece.readableBytes }
    XCTAssertEqual(sent, 5 << 20)
    XCTAssertEqual(source.reused, 3)
  }

  /// A piece the sender still holds is never written over: its spare is
  /// copied away from, and the bytes sent stay what they were.
  func testAPieceStillHeldIsNeverWrittenOver() async throws {
    let source = ReusingSource(size: 4 << 20)
    let body = SourceBody(source: source, offset: 0, count: 4 << 20)
    var held: [ByteBuffer] = []
    for try await piece in body { held.append(piece) }
    XCTAssertEqual(source.reused, 0)
    XCTAssertEqual(held.count, 4)
    XCTAssertEqual(Set(held.map { $0.withVeryUnsafeBytes { UInt(bitPattern: $0.baseAddress) } }).count, 4)
  }

  /// The sources an upload wraps around the file's (a multipart body's
  /// framing, a composite upload's part) hand the spare memory on.
  func testWrappingSourcesHandTheSpareOn() async throws {
    let media = ReusingSource(size: 4 << 20)
    let framed = FramedSource(
      head: ByteBuffer(string: "head"), media: media, tail: ByteBuffer(string: "tail"))
    let part = PartSource(whole: media, range: (1 << 20)..<(3 << 20))
    for source in [framed, part] as [any UploadSource] {
      let spare = SpareBuffer(ByteBufferAllocator().buffer(capacity: 1 << 20))
      let piece = try await source.load(at: 4, count: 1 << 20, reusing: spare)
      XCTAssertEqual(piece.readableBytes, 1 << 20)
    }
    XCTAssertEqual(media.reused, 2)
  }
}

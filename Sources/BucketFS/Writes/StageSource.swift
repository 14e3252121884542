import CoreMetrics
import IOThreads
import NIOCore
import ObjectStore
import Synchronization

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

#if canImport(Glibc)
  import Glibc
#endif

/// The bytes of a stage (or of a range of it: a streamed part) as an upload reads them.
struct StageSource: UploadSource {
  let stage: Stage
  let range: Range<Int64>
  /// The whole data file: a cache may keep it by a second name.
  private let whole: Bool
  /// The bytes' CRC-32C, summed as they were written (``AppendSums``).
  let crc32c: UInt32?

  init(stage: Stage, size: Int64, crc32c: UInt32? = nil) {
    self.stage = stage
    range = 0..<size
    whole = true
    self.crc32c = crc32c
  }

  init(stage: Stage, range: Range<Int64>, crc32c: UInt32? = nil) {
    self.stage = stage
    self.range = range
    whole = false
    self.crc32c = crc32c
  }

  var size: Int64 { Int64(range.count) }

  func read(at offset: Int64, count: Int) throws -> ByteBuffer {
    let count = clamped(count, at: offset)
    return try checked(stage.readBlocking(at: range.lowerBound + offset, count: count), count: count)
  }

  func load(at offset: Int64, count: Int) async throws -> ByteBuffer {
    try await load(at: offset, count: count, reusing: nil)
  }

  func load(at offset: Int64, count: Int, reusing spare: SpareBuffer) async throws -> ByteBuffer {
    try await load(at: offset, count: count, reusing: Optional(spare))
  }

  private func load(at offset: Int64, count: Int, reusing spare: SpareBuffer?) async throws -> ByteBuffer {
    let count = clamped(count, at: offset)
    return try checked(
      await stage.read(at: range.lowerBound + offset, count: count, reusing: spare), count: count)
  }

  private func clamped(_ count: Int, at offset: Int64) -> Int {
    Int(max(0, min(Int64(count), size - offset)))
  }

  private func checked(_ bytes: ByteBuffer, count: Int) throws -> ByteBuffer {
    // The stage shrank under the upload: never send a short object.
    guard bytes.readableBytes == count else { throw StageFailure(code: EIO) }
    return bytes
  }

  func link(to path: String) -> Bool {
    whole && stage.link(to: path)
  }
}

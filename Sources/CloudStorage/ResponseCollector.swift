import AsyncHTTPClient
import NIOCore
import NIOHTTP1
import ObjectStore

/// Collects one answer on its connection's event loop as the parts arrive:
/// each part is copied into the answer and let go before the connection
/// reads again. So the TLS layer's receive buffer is no longer shared when
/// it decrypts the next records; while a part of it is still held (as the
/// async API's body stream holds parts until a task takes them), every
/// read is decrypted into fresh memory instead, whose page faults were a
/// sixth of a cold read's daemon CPU (BENCHMARKS.md, issue 41).
///
/// Unchecked: the client calls every method on the request's event loop,
/// one after another, and ``answer`` is read only once the task's future
/// has completed.
final class ResponseCollector: HTTPClientResponseDelegate, @unchecked Sendable {
  struct Answer: Sendable {
    var head: HTTPResponseHead
    var payload: ByteBuffer
  }

  /// Reading stopped early: a ranged GET answered with the whole object had
  /// sent all of the range.
  struct Filled: Error {}

  private let maxBody: Int
  private let window: Range<Int64>?
  private var recycled: ByteBuffer?
  private let sums: ArrivalSums?
  private var watch: (@Sendable (ByteBuffer) -> Bool)?
  private(set) var answer: Answer?
  // Set from the head: the window applies to a 200 answer only.
  private var skip: Int64 = 0
  private var keep = 0
  private var windowed = false

  init(
    maxBody: Int, window: Range<Int64>?, into recycled: consuming ByteBuffer?, sums: ArrivalSums?,
    head watch: (@Sendable (ByteBuffer) -> Bool)?
  ) {
    self.maxBody = maxBody
    self.window = window
    self.recycled = recycled
    self.sums = sums
    self.watch = watch
  }

  func didReceiveHead(task: HTTPClient.Task<Answer>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
    let ok = head.status == .ok
    windowed = ok && window != nil
    if !ok { watch = nil }
    // Never negative at the allocator, whatever the header says; the body is counted as it arrives.
    var expected = max(head.headers.first(name: "Content-Length").flatMap(Int.init) ?? 0, 0)
    if windowed, let window {
      expected = Int(max(0, min(Int64(expected) - window.lowerBound, window.upperBound - window.lowerBound)))
      skip = window.lowerBound
      keep = Int(window.upperBound - window.lowerBound)
    } else {
      keep = maxBody
    }
    if expected > maxBody { return task.eventLoop.makeFailedFuture(NIOTooManyBytesError(maxBytes: maxBody)) }
    // Sized from Content-Length up front: a large answer is copied once, never regrown.
    var payload = recycled.take() ?? ByteBuffer()
    if expected > 0 && payload.capacity >= expected {
      payload.clear()
    } else {
      payload = ByteBufferAllocator().buffer(capacity: expected)
      payload.prefaultWritableBytes()
    }
    sums?.restart()
    answer = Answer(head: head, payload: payload)
    return task.eventLoop.makeSucceededVoidFuture()
  }

  func didReceiveBodyPart(task: HTTPClient.Task<Answer>, _ part: ByteBuffer) -> EventLoopFuture<Void> {
    guard var answer = self.answer.take() else {
      return task.eventLoop.makeFailedFuture(StorageError.invalidResponse("a body before its head"))
    }
    defer { self.answer = answer }
    var chunk = part
    if skip > 0 {
      let dropped = Int(min(skip, Int64(chunk.readableBytes)))
      chunk.moveReaderIndex(forwardBy: dropped)
      skip -= Int64(dropped)
    }
    if windowed, chunk.readableBytes > keep - answer.payload.readableBytes {
      chunk.moveWriterIndex(to: chunk.readerIndex + keep - answer.payload.readableBytes)
    }
    if answer.payload.readableBytes + chunk.readableBytes > maxBody {
      return task.eventLoop.makeFailedFuture(NIOTooManyBytesError(maxBytes: maxBody))
    }
    let at = answer.payload.writerIndex
    answer.payload.writeImmutableBuffer(chunk)
    sums?.add(answer.payload, at: at, count: chunk.readableBytes)
    if let watch, watch(answer.payload) || answer.payload.readableBytes >= 64 << 10 { self.watch = nil }
    if windowed && answer.payload.readableBytes == keep { return task.eventLoop.makeFailedFuture(Filled()) }
    return task.eventLoop.makeSucceededVoidFuture()
  }

  func didFinishRequest(task: HTTPClient.Task<Answer>) throws -> Answer {
    guard let answer else { throw HTTPClientError.remoteConnectionClosed }
    return answer
  }
}

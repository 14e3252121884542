import NIOCore
import ObjectStore

/// What a reader decides about a segment's fetch that failed or came short.
extension FileReader {
  /// Errors a second fetch of the same bytes may not meet again: an outage
  /// that outlived one request's retries, or a short or malformed answer.
  static func mayRetry(_ error: StorageError) -> Bool {
    switch error {
    case .unavailable, .invalidResponse: true
    default: false
    }
  }

  static func deadlineLeft() -> Bool {
    guard let bound = OperationDeadline.current else { return true }
    return bound.retries && (bound.deadline.map { NIODeadline.now() < $0 } ?? true)
  }

  /// `bytes` if it holds all of [start, end), else a short part's error.
  static func whole(_ bytes: ByteBuffer, _ start: UInt64, _ end: UInt64) throws -> ByteBuffer {
    if UInt64(bytes.readableBytes) >= end - start { return bytes }
    throw StorageError.invalidResponse(
      "short part: \(bytes.readableBytes) of \(end - start) bytes at \(start)")
  }
}

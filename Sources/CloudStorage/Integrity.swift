import NIOCore
import NIOHTTP1
import ObjectStore

// What the client does when the service refuses an upload's bytes for
// their CRC-32C: the bytes were changed on the way, so the upload is sent
// again from its source, like one whose connection broke.
extension CloudStorageClient {
  /// Uploads refused for their checksum are sent this many times at most.
  static let corruptionAttempts = 3

  /// Whether `error` is the service's refusal of bytes that do not match
  /// the CRC-32C sent with them (400, `Provided CRC32C "…" doesn't match
  /// calculated CRC32C "…".`). Nothing was stored.
  static func isChecksumRefusal(_ error: any Error) -> Bool {
    guard case StorageError.badRequest(let message) = error else { return false }
    return message.contains("CRC32C") && message.contains("match")
  }

  /// `attempt`, repeated after a checksum refusal; the last refusal is
  /// thrown as `unavailable` (EIO), never as a success.
  func refusingCorruption<T>(_ operation: String, _ attempt: () async throws -> T) async throws -> T {
    var tries = 0
    while true {
      tries += 1
      do {
        return try await attempt()
      } catch  where Self.isChecksumRefusal(error) {
        metrics.mismatched(.upload)
        guard tries < Self.corruptionAttempts else {
          logger.error(
            "\(operation): the service refused the bytes \(tries) times for their crc32c: \(error)")
          throw StorageError.unavailable("\(operation): the bytes arrived changed \(tries) times")
        }
        logger.warning("\(operation): the service refused the bytes for their crc32c; sending them again")
        let wait = retry.delay(attempt: tries, retryAfter: nil)
        do { try await Task.sleep(nanoseconds: UInt64(wait * 1e9)) } catch { throw StorageError.cancelled }
      }
    }
  }
}

// Downloads: an answer that holds a whole object is checked against the
// CRC-32C the service sends with it (`x-goog-hash: crc32c=…`) before any
// byte of it is used; a mismatch is a transient fault (fetched again), and
// one that lasts fails the read.
extension CloudStorageClient {
  /// The object's CRC-32C from `x-goog-hash`, nil when not sent.
  static func declaredCRC32C(_ headers: HTTPHeaders) -> UInt32? {
    for value in headers["x-goog-hash"] {
      for item in value.split(separator: ",") {
        let item = item.drop(while: { $0 == " " })
        if item.hasPrefix("crc32c=") { return CRC32C.value(base64: String(item.dropFirst("crc32c=".count))) }
      }
    }
    return nil
  }

  /// Whether `body`, the answer to a read of `range`, is the whole object.
  static func holdsWholeObject(_ status: Int, _ headers: HTTPHeaders, _ body: ByteBuffer, range: Range<Int64>)
    -> Bool
  {
    guard range.lowerBound == 0 else { return false }
    switch status {
    case 206:
      guard let contentRange = ContentRange(headers.first(name: "Content-Range")),
        let size = contentRange.size
      else { return false }
      return contentRange.first == 0 && Int64(body.readableBytes) == size
    case 200:
      return headers.first(name: "Content-Length").flatMap(Int.init) == body.readableBytes
        && headers.first(name: "Content-Encoding") == nil
    default:
      return false
    }
  }

  /// Why a whole object's bytes are not the object's (their CRC-32C is not
  /// the one declared), or nil; counted as a download mismatch.
  func corruption(_ status: Int, _ headers: HTTPHeaders, _ body: ByteBuffer, asked range: Range<Int64>)
    -> String?
  {
    guard Self.holdsWholeObject(status, headers, body, range: range),
      let declared = Self.declaredCRC32C(headers)
    else { return nil }
    let sum = CRC32C.update(0, body)
    guard sum != declared else { return nil }
    metrics.mismatched(.download)
    return "the bytes have crc32c \(CRC32C.base64(sum)), the object \(CRC32C.base64(declared))"
  }
}

import NIOCore
import NIOHTTP1
import ObjectStore

// Uploads: the service refuses bytes that do not match the CRC-32C sent
// with them (400, `Provided CRC32C "…" doesn't match calculated CRC32C "…".`)
// and stores nothing; `exchange` sends such an upload again from its
// source, like one whose connection broke, until the retry deadline.
extension CloudStorageClient {
  /// Whether a 400's message is the service's checksum refusal.
  static func isChecksumRefusal(_ message: String) -> Bool {
    message.contains("CRC32C") && message.contains("match")
  }
}

/// The service's refusal of an upload's bytes for their checksum: thrown by
/// an attempt, and retried like a connection that was never made.
struct ChecksumRefusal: Error, CustomStringConvertible {
  let message: String
  var description: String { "the service refused the bytes for their crc32c: \(message)" }
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

import NIOHTTP1
import Tracing

/// What a request's attempts came to, for its span: how many were made, and
/// the last HTTP status (nil: none answered).
struct AttemptTally {
  var attempts = 0
  var status: Int?
}

extension Span {
  /// A storage request's attributes (docs/SEMANTICS.md, "Traces"): its kind,
  /// method, attempts, last status and the body bytes each way (sent: one
  /// attempt's body; received: the answer's, nil when it failed).
  func record(_ request: StorageRequest, _ tally: AttemptTally, received: Int?) {
    guard isRecording else { return }
    let sent: Int
    switch request.body {
    case .none: sent = 0
    case .bytes(let bytes): sent = bytes.readableBytes
    case .streaming(let source): sent = source.count
    }
    updateAttributes { attributes in
      attributes.set("storage.kind", value: .string(request.kind.rawValue))
      attributes.set("storage.operation", value: .string(request.operation))
      attributes.set("http.request.method", value: .string(request.method.rawValue))
      attributes.set("storage.attempts", value: .int64(Int64(tally.attempts)))
      attributes.set("storage.bytes_sent", value: .int64(Int64(sent)))
      if let status = tally.status {
        attributes.set("http.response.status_code", value: .int64(Int64(status)))
      }
      if let received { attributes.set("storage.bytes_received", value: .int64(Int64(received))) }
    }
  }
}

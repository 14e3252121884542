import Foundation
import NIOCore
import ObjectStore

/// `POST …/o/DESTINATION/compose` as the JSON API takes it: a body of
/// `sourceObjects` (name, generation, `objectPreconditions.ifGenerationMatch`)
/// and an optional `destination` resource; `ifGenerationMatch` and
/// `ifMetagenerationMatch` on the destination in the query. The answer is the
/// composite's resource, with `componentCount`.
extension FakeStorageServer {
  func compose(into destination: String, query: [String: String], body: [UInt8]) async throws -> Response {
    guard let json = try? JSONSerialization.jsonObject(with: Data(body)),
      let request = json as? [String: Any],
      let list = request["sourceObjects"] as? [[String: Any]]
    else {
      throw HTTPError(400, "Required sourceObjects.", reason: "required")
    }
    var sources: [InMemoryObjectStore.ComposeSource] = []
    for item in list {
      guard let name = item["name"] as? String, !name.isEmpty else {
        throw HTTPError(400, "Required sourceObjects[].name.", reason: "required")
      }
      let preconditions = item["objectPreconditions"] as? [String: Any]
      sources.append(
        .init(
          name, generation: try Self.int64(item["generation"], "generation"),
          ifGenerationMatch: try Self.int64(preconditions?["ifGenerationMatch"], "ifGenerationMatch")))
    }
    var attributes = ObjectAttributes()
    if let resource = request["destination"], !(resource is NSNull) {
      let data = try JSONSerialization.data(withJSONObject: resource)
      attributes = try Self.objectResource(Array(data)).1
    }
    let meta = try await store.compose(
      sources, into: destination, attributes: attributes,
      ifGenerationMatch: try Self.int64(query, "ifGenerationMatch"),
      ifMetagenerationMatch: try Self.int64(query, "ifMetagenerationMatch"))
    var answered = meta
    if !destination.contains(".bucketfs-parts/"), takeCorruption(\.composes) {
      answered.crc32c = "AAAAAA=="  // the bytes are right; the object's checksum is not theirs
    }
    var text = Resources.object(answered, endpoint: endpoint)
    if let count = store.componentCount(destination) {
      text = String(text.dropLast()) + ",\"componentCount\":\(count)}"
    }
    return .json(200, text)
  }

  /// An int64 field of a JSON body: a string (as the API writes them) or a number.
  static func int64(_ value: Any?, _ field: String) throws -> Int64? {
    switch value {
    case nil, is NSNull: return nil
    case let text as String:
      guard let number = Int64(text) else {
        throw HTTPError(400, "Invalid value for \(field): \(text)", reason: "invalid")
      }
      return number
    case let number as NSNumber: return number.int64Value
    default: throw HTTPError(400, "Invalid value for \(field).", reason: "invalid")
    }
  }
}

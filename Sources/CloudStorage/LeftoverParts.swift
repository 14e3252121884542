import ObjectStore

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

// Parts that composite uploads left behind (a crash, a kill, a part whose
// delete failed): counted at mount, deleted by `bucketfs clean-parts`.
extension CloudStorageClient {
  /// Where this client's parts are: `PREFIX.bucketfs-parts/`.
  public var partPrefix: String { uploads.partPrefix }

  /// The command that deletes this client's leftover parts.
  public var cleanCommand: String {
    let root = uploads.partPrefix.dropLast(UploadPolicy.partDirectory.count).dropLast()  // its "/"
    return "bucketfs clean-parts gs://\(bucket)" + (root.isEmpty ? "" : "/\(root)")
  }

  /// The part objects one list call finds (at most 1000), and whether there are more.
  public func leftoverParts() async throws -> (parts: [ObjectMetadata], more: Bool) {
    let page = try await list(ListRequest(prefix: uploads.partPrefix, pageSize: 1000))
    return (page.items, page.nextPageToken != nil)
  }

  /// What ``removeLeftoverParts(olderThan:)`` did.
  public struct PartsRemoval: Sendable, Equatable {
    public var removed = 0
    /// Parts of uploads that began less than the age ago: maybe under way.
    public var spared = 0
    public var failed = 0

    public init(removed: Int = 0, spared: Int = 0, failed: Int = 0) {
      (self.removed, self.spared, self.failed) = (removed, spared, failed)
    }
  }

  /// Deletes every part whose upload began more than `age` seconds ago
  /// (by the time in its upload's name; a name without one counts as old),
  /// each under its generation.
  public func removeLeftoverParts(olderThan age: Double) async throws -> PartsRemoval {
    let now = Date().timeIntervalSince1970
    var old: [ObjectMetadata] = []
    var result = PartsRemoval()
    var token: String?
    repeat {
      let page = try await list(ListRequest(prefix: uploads.partPrefix, pageSize: 1000, pageToken: token))
      for part in page.items {
        if let began = uploadStart(ofPart: part.name), now - Double(began) < age {
          result.spared += 1
        } else {
          old.append(part)
        }
      }
      token = page.nextPageToken
    } while token != nil
    let failures = await deleteAll(old.map { Component(name: $0.name, generation: $0.generation) })
    result.failed = failures
    result.removed = old.count - failures
    return result
  }

  /// The Unix time in a part's upload name (`.bucketfs-parts/SECONDS-RANDOM/…`).
  func uploadStart(ofPart name: String) -> Int64? {
    guard name.hasPrefix(uploads.partPrefix) else { return nil }
    let id = name.dropFirst(uploads.partPrefix.count).prefix { $0 != "/" }
    return id.split(separator: "-").first.flatMap { Int64($0) }
  }
}

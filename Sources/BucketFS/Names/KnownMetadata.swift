import FUSE
import ObjectStore

/// The full metadata of objects: kept (``MetadataCache``) while the node
/// that shows it is fresh, else fetched from the bucket, and what a fetch
/// finds told to the ``NodeTable``. Holds no state of its own.
final class KnownMetadata: MountComponent, Sendable {
  let context: MountContext
  /// The bounded cache of full metadata (its own lock).
  let metadataCache: MetadataCache
  private let nodes: NodeTable

  init(context: MountContext, nodes: NodeTable, metadataCache: MetadataCache) {
    self.context = context
    self.nodes = nodes
    self.metadataCache = metadataCache
  }

  /// The node's metadata if fetched within the TTL, else fetched now.
  func current(of node: Node, context: ErrorMapping.Context = .metadata) async throws -> ObjectMetadata {
    if nodes.isFresh(node), let metadata = metadataCache[node.key] { return metadata }
    return try await fetch(node.key, context: context)
  }

  /// The object as the bucket has it now (ENOENT when it has none); the
  /// node table learns it.
  func fetch(_ key: String, context: ErrorMapping.Context = .metadata) async throws -> ObjectMetadata {
    do {
      let metadata = try await store.metadata(of: key)
      // A PATCH may have answered with newer metadata while this GET was under way.
      return nodes.remember(metadata)
    } catch {
      throw diagnostics.failure(error, operation: "get metadata", key: key, context: context)
    }
  }

  /// The object as the bucket has it now, nil when it has none; nothing is learnt.
  func fetchIfPresent(_ key: String) async throws -> ObjectMetadata? {
    do {
      return try await store.metadata(of: key)
    } catch StorageError.notFound {
      return nil
    } catch {
      throw diagnostics.failure(error, operation: "get metadata", key: key)
    }
  }

  /// The full metadata kept of `key`, whatever its age.
  func cached(_ key: String) -> ObjectMetadata? {
    metadataCache[key]
  }
}

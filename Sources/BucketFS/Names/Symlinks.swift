import FUSE
import NIOCore
import ObjectStore
import Synchronization

/// Symbolic links (docs/SEMANTICS.md#symlinks): creating one as a single
/// conditional upload, and reading where one points. The kernel follows
/// links; nothing here resolves one.
final class Symlinks: MountComponent, Sendable {
  /// Targets read from links' bodies, by object version.
  private let targets = Mutex(LinkTargets(capacity: 4096))
  let context: MountContext
  /// The node and full metadata of each inode.
  let inodes: KnownInodes
  let entries: AttributeBuilder

  init(context: MountContext, inodes: KnownInodes, entries: AttributeBuilder) {
    self.context = context
    self.inodes = inodes
    self.entries = entries
  }

  /// One upload with `ifGenerationMatch=0` holding both stored forms.
  func create(parent: UInt64, name: String, target: [UInt8]) async throws -> Entry {
    if configuration.readOnly { throw Errno.readOnly }
    let parentKey = try inodes.node(parent, kind: .directory).key
    let key = try Names.key(name, under: parentKey, for: .newFile)
    // The legacy form keeps the target in custom metadata, which is text.
    guard let text = String(validating: target, as: UTF8.self), !target.isEmpty else {
      diagnostics.logger.notice("symlink \(key): the target is not UTF-8 text; refused")
      throw Errno.invalid
    }
    guard target.count <= SymlinkEncoding.maxTargetBytes else { throw Errno.nameTooLong }
    // A directory of that name hides any object of it.
    if inodes.nodes.held(fileKey: key, directoryKey: key + "/").kind == .directory { throw Errno.exists }
    var attributes = SymlinkEncoding.attributes(target: text, modified: Timestamp.now().seconds)
    // Its creator as owner (a link has no mode of its own to store).
    for (name, value) in configuration.newObjectPosix(mode: 0o777) where name != PosixKeys.mode {
      attributes.custom[name] = value
    }
    let stored: ObjectMetadata
    do {
      stored = try await store.upload(
        key, from: BytesSource(target), attributes: attributes, ifGenerationMatch: 0)
    } catch StorageError.preconditionFailed {
      throw Errno.exists
    } catch {
      throw diagnostics.failure(error, operation: "create symlink", key: key)
    }
    targets.withLock { $0.insert(target, for: stored) }
    let now = clock()
    // The bucket had no object of that name: a node the mount still holds for one is stale.
    let remembered = inodes.nodes.created(
      key, kind: .symlink, facts: FileFacts(stored), metadata: stored, detaching: key, at: now)
    return entries.entry(inode: remembered.0, kind: .symlink, facts: remembered.1, answeredAt: now)
  }

  /// The target of a link: from its metadata (fresh, or one GET), and for
  /// the body form from its bytes (one GET of that generation, then kept).
  func readlink(inode: UInt64) async throws -> [UInt8] {
    let node = try inodes.node(inode)
    guard node.kind == .symlink else { throw Errno.invalid }
    // Unlinked or replaced while the kernel holds it: its name means something else.
    if node.isDetached { throw Errno.stale }
    let metadata = try await inodes.metadata.current(of: node)
    do {
      return try await target(of: metadata)
    } catch  where StaleReads.isGenerationGone(error) {
      // Replaced since its metadata was fetched: the version there now.
      do {
        return try await target(of: try await inodes.metadata.fetch(node.key))
      } catch {
        throw diagnostics.failure(error, operation: "readlink", key: node.key, context: .read)
      }
    } catch {
      throw diagnostics.failure(error, operation: "readlink", key: node.key, context: .read)
    }
  }

  /// The target `metadata` names, the body read if it is there.
  private func target(of metadata: ObjectMetadata) async throws -> [UInt8] {
    let key = metadata.name
    switch SymlinkEncoding.source(of: metadata) {
    case .key(let target):
      return try checked(Array(target.utf8), key: key)
    case .none:
      warn(key, "no target stored (an empty body and no \(SymlinkEncoding.targetKey) key)")
      throw Errno.invalid
    case .body:
      if let target = targets.withLock({ $0[metadata] }) { return target }
      guard metadata.size <= SymlinkEncoding.maxTargetBytes else {
        warn(key, "a target of \(metadata.size) bytes is longer than a link holds")
        throw Errno.nameTooLong
      }
      let body = try await store.read(
        key, generation: metadata.generation, range: 0..<metadata.size, reusing: nil)
      let target = try checked(Array(body.readableBytesView), key: key)
      targets.withLock { $0.insert(target, for: metadata) }
      return target
    }
  }

  /// Once per link, so a tool that keeps asking does not flood the log.
  private func warn(_ key: String, _ message: String) {
    if diagnostics.firstWarning("readlink:" + key) {
      diagnostics.logger.warning("readlink \(key): \(message)")
    }
  }

  /// What readlink can answer: bytes with no NUL (a C string), not empty.
  private func checked(_ target: [UInt8], key: String) throws -> [UInt8] {
    if target.isEmpty || target.contains(0) {
      warn(key, "the stored target is \(target.isEmpty ? "empty" : "not a path (it holds a NUL)")")
      throw Errno.invalid
    }
    if target.count > SymlinkEncoding.maxTargetBytes {
      warn(key, "a target of \(target.count) bytes is longer than a link holds")
      throw Errno.nameTooLong
    }
    return target
  }
}

/// Targets read from links' bodies, bounded; the oldest goes first. Keyed by
/// name and generation: a generation's bytes never change, so an entry is
/// never stale, and a link replaced elsewhere is a new generation.
struct LinkTargets: Sendable {
  private struct Version: Hashable, Sendable {
    let key: ObjectKey
    let generation: Int64

    init(_ metadata: ObjectMetadata) {
      key = ObjectKey(metadata.name)
      generation = metadata.generation
    }
  }
  private var map: BoundedMap<Version, [UInt8]>

  /// Targets can be 4 KiB each: a few very long ones are bounded by their bytes.
  init(capacity: Int, maxBytes: Int = 1 << 20) {
    map = BoundedMap(capacity: capacity, maxCost: maxBytes) { $0.count + 64 }
  }

  var capacity: Int { map.capacity }
  var count: Int { map.count }

  subscript(metadata: ObjectMetadata) -> [UInt8]? { map[Version(metadata)] }

  mutating func insert(_ target: [UInt8], for metadata: ObjectMetadata) {
    map.insert(target, for: Version(metadata))
  }
}

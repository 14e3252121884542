import FUSE
import ObjectStore

/// What the mount knows of an inode now: its node (``NodeTable``), its
/// object's full metadata, kept while fresh or fetched (``KnownMetadata``),
/// and its staged file, whose size, times and pending metadata answer
/// before the object's (``StagedInodes``). The three travel together into
/// the components that answer for an inode; this holds no state of its
/// own, and asks each under its own lock, never one inside another.
struct KnownInodes: Sendable {
  let nodes: NodeTable
  let metadata: KnownMetadata
  let staged: StagedInodes

  /// The node of `inode` (ESTALE when the kernel holds none; with `kind`, an
  /// errno for a node of another kind).
  func node(_ inode: UInt64, kind: Node.Kind? = nil) throws -> Node {
    try nodes.node(inode, kind: kind)
  }

  /// The facts stat shows of a held inode, nil when it has none or is not held.
  func facts(of inode: UInt64) -> FileFacts? {
    (try? nodes.node(inode))?.facts
  }

  /// The full metadata of file `inode` (kept while fresh, else fetched);
  /// nil for a directory or a link, which have no object metadata to show.
  func fileMetadata(_ inode: UInt64) async throws -> ObjectMetadata? {
    let node = try nodes.node(inode)
    guard node.kind == .file else { return nil }
    return try await metadata.current(of: node)
  }

  // MARK: - Staged files

  /// The staged file of `inode`, if it has one.
  func stagedFile(_ inode: UInt64) -> StagedFile? {
    staged.file(inode: inode)
  }

  /// The staged file of the inode the kernel holds for `key`, if any (with
  /// nothing staged, no node is looked up).
  func stagedFile(named key: String) -> StagedFile? {
    guard !staged.isEmpty, let inode = nodes.held(key) else { return nil }
    return staged.file(inode: inode)
  }

  /// The staged files among the held files under `prefix` (a directory's
  /// descendants), each asked for as the walk reaches it: one staged or
  /// released while an earlier one is stored counts as it is then.
  func stagedFiles(under prefix: String) -> some Sequence<StagedFile> {
    let staged = self.staged
    return nodes.held(under: prefix).lazy.filter { $0.node.kind == .file }.compactMap {
      staged.file(inode: $0.inode)
    }
  }

  /// What stat shows of a staged file instead of its object's facts.
  func stagedView(of inode: UInt64) -> (size: UInt64, modified: Timestamp?, posix: StoredPosix?)? {
    staged.file(inode: inode)?.view
  }

  // MARK: - Memory only

  /// What the loop thread may answer of an inode from memory.
  enum AtHand {
    /// A staged file's pending metadata: what its upload would store.
    case pending(ObjectMetadata)
    /// A held node, with its full metadata if kept and fresh.
    case node(Node, metadata: ObjectMetadata?)
  }

  /// The pending metadata of `inode`'s staged file (one whose handles are
  /// only reading has none), else its node with what is kept of its
  /// metadata; nil for an inode the kernel no longer holds.
  func atHand(_ inode: UInt64, bucket: String) -> AtHand? {
    if let pending = staged.file(inode: inode)?.pendingMetadata(bucket: bucket) { return .pending(pending) }
    guard let node = try? nodes.node(inode) else { return nil }
    return .node(node, metadata: nodes.isFresh(node) ? metadata.cached(node.key) : nil)
  }

  /// The version of a held file the mount showed (its facts' generation),
  /// and its full metadata when that is what is kept.
  func shownVersion(inode: UInt64, key: String) -> (generation: Int64?, metadata: ObjectMetadata?) {
    let generation = facts(of: inode)?.generation
    return (generation, metadata.cached(key).flatMap { $0.generation == generation ? $0 : nil })
  }
}

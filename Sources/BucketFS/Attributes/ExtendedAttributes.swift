import FUSE
import ObjectStore

/// Object metadata as `user.*` extended attributes (docs/SEMANTICS.md#xattrs), with the
/// conditional PATCH loop behind set and remove. A staged file's pending
/// values answer first (below; Writes/StagedXattrs.swift keeps them).
struct ExtendedAttributes: MountComponent, Sendable {
  let context: MountContext
  /// The node, full metadata and staged file of each inode.
  let inodes: KnownInodes
  /// What bucketfs chose of the files it stored, and which it created lately.
  let provenance: Provenance

  func getxattr(inode: UInt64, name: String) async throws -> [UInt8] {
    if let answer = getxattrInline(inode: inode, name: name) { return try answer.get() }
    guard let property = XattrName(name) else { throw Errno.notSupported }
    guard let metadata = try await inodes.fileMetadata(inode) else { throw Errno.noData }
    guard let value = property.value(in: metadata) else { throw Errno.noData }
    return Array(value.utf8)
  }

  func listxattr(inode: UInt64) async throws -> [String] {
    if let answer = listxattrInline(inode: inode) { return try answer.get() }
    guard let metadata = try await inodes.fileMetadata(inode) else { return [] }
    return XattrName.names(of: metadata, hidingStatKeys: configuration.posixAttributes)
  }

  func getxattrInline(inode: UInt64, name: String) -> Result<[UInt8], Errno>? {
    guard let property = XattrName(name) else { return .failure(.notSupported) }
    switch inodes.atHand(inode, bucket: store.bucket) {
    case nil:
      return nil
    case .pending(let pending):
      return Self.stagedValue(property, in: pending).map { .success(Array($0.utf8)) } ?? .failure(.noData)
    case .node(let node, let metadata):
      guard node.kind == .file else { return .failure(.noData) }
      guard let metadata else { return nil }
      return property.value(in: metadata).map { .success(Array($0.utf8)) } ?? .failure(.noData)
    }
  }

  func listxattrInline(inode: UInt64) -> Result<[String], Errno>? {
    let hiding = configuration.posixAttributes
    switch inodes.atHand(inode, bucket: store.bucket) {
    case nil:
      return nil
    case .pending(let pending):
      return .success(Self.stagedNames(of: pending, hidingStatKeys: hiding))
    case .node(let node, let metadata):
      guard node.kind == .file else { return .success([]) }
      return metadata.map { .success(XattrName.names(of: $0, hidingStatKeys: hiding)) }
    }
  }

  func setxattr(inode: UInt64, name: String, value: [UInt8], flags: XattrFlags) async throws {
    if try setPending(inode: inode, name: name, value: value, flags: flags) { return }
    guard let (property, node) = try writableProperty(inode: inode, name: name) else { return }
    try await update(property, to: try property.text(of: value), flags: flags, inode: inode, node: node)
  }

  func removexattr(inode: UInt64, name: String) async throws {
    if try setPending(inode: inode, name: name, value: nil, flags: .replace) { return }
    guard let (property, node) = try writableProperty(inode: inode, name: name) else { return }
    try await update(property, to: nil, flags: .replace, inode: inode, node: node)
  }

  /// The checks that need no network, in the order docs/SEMANTICS.md#xattrs-errors
  /// gives them; nil for a read-only property, accepted and ignored (as
  /// chmod is on a store with no modes) so that copying tools that set every
  /// xattr they saw (rsync -X, cp -a) never fail on it.
  private func writableProperty(inode: UInt64, name: String) throws -> (XattrName, Node)? {
    guard let property = XattrName(name) else { throw Errno.notSupported }
    if configuration.readOnly { throw Errno.readOnly }
    let node = try inodes.node(inode)
    guard node.kind == .file else { throw Errno.notPermitted }
    let statKeys = configuration.posixAttributes ? inodes.metadata.cached(node.key)?.custom ?? [:] : nil
    guard try property.changes(refuseReadOnly: configuration.refuseReadOnlyXattrs, statKeys: statKeys) else {
      return nil
    }
    return (property, node)
  }

  /// Metadata fetched longer ago than this is fetched again before a
  /// decision that sends nothing (EEXIST, ENODATA, a value it has): only a
  /// PATCH carries a precondition that catches another client's change.
  static let confirmationAge = 1.0

  /// Decides against the metadata at hand and patches only if the object still
  /// has that generation and metageneration; when it changed meanwhile, reads
  /// it again and decides again (ConditionalPatch.swift).
  private func update(
    _ property: XattrName, to value: String?, flags: XattrFlags, inode: UInt64, node: Node
  ) async throws {
    let initial = try await inodes.metadata.current(of: node)
    let patch = property.patch(value)
    /// What the object is after our last PATCH, if that one was applied.
    var intended: ObjectMetadata?
    let result = try await patchConditionally(
      node.key, from: initial, fetchedAt: inodes.nodes.isFresh(node) ? node.fetchedAt : clock(),
      fetch: { try await inodes.metadata.fetch(node.key) }
    ) { current, fetchedAt in
      guard let metadata = current else { throw Errno.noEntry }
      // After a 412 the change may be ours: the client retries a PATCH whose
      // 200 was lost, and the retry finds the metageneration it moved itself.
      // Exactly one change since, giving exactly our result, is taken as ours.
      if let intended, Self.isResult(metadata, of: intended) {
        diagnostics.logger.debug("metadata of \(node.key) already shows the change; taking it as done")
        return .done(metadata)
      }
      let exists = property.value(in: metadata) != nil
      // Setting the value it has changes nothing: no PATCH (rsync -X sets
      // every name again once any differs, and a backup job reruns nightly).
      let unchanged = value != nil && property.value(in: metadata) == value
      let refused = flags.refusal(exists: exists, removing: value == nil)
      if unchanged || refused != nil, clock() - fetchedAt > Self.confirmationAge { return .refresh }
      if let refused { throw refused }
      if unchanged { return .done(metadata) }
      var proposed = metadata
      patch.apply(to: &proposed)
      guard MetadataLimits.fits(proposed.custom) else { throw Errno.tooBig }
      intended = proposed
      return .send(patch)
    }
    guard result.wrote else { return }
    inodes.nodes.remember(result.metadata)
    // Set by the user now: an atomic save no longer treats it as inferred.
    provenance.userSet(property, key: node.key, generation: result.metadata.generation)
  }

  /// Whether `current` is `proposed` (what a PATCH based on metageneration
  /// m would make) after exactly that one change: m + 1, same properties
  /// (none after the service's Int64.max).
  static func isResult(_ current: ObjectMetadata, of proposed: ObjectMetadata) -> Bool {
    current.generation == proposed.generation && proposed.metageneration < .max
      && current.metageneration == proposed.metageneration + 1
      && current.custom == proposed.custom
      && ObjectMetadata.WritableField.allCases.allSatisfy { current[$0] == proposed[$0] }
  }
}

/// Extended attributes of a staged file (open for writing or not yet
/// uploaded): pending values, changed in memory and carried by the upload,
/// with no PATCH of their own (docs/SEMANTICS.md#writes).
extension ExtendedAttributes {
  /// Sets or removes (nil) a property of a staged, dirty file in its pending
  /// upload. Returns false when the file is not staged that way (the PATCH
  /// path answers). Read-only names are accepted and ignored, so `cp -a`
  /// from another bucketfs mount succeeds, as they are on a file this mount
  /// created within the metadata TTL (rsync -X sets them on its temp file
  /// after closing it).
  private func setPending(inode: UInt64, name: String, value: [UInt8]?, flags: XattrFlags) throws -> Bool {
    guard let property = XattrName(name) else { throw Errno.notSupported }
    if configuration.readOnly { throw Errno.readOnly }
    guard let staged = inodes.stagedFile(inode) else {
      if case .readOnly = property, let key = (try? inodes.node(inode))?.key,
        provenance.isRecentlyCreated(key)
      {
        return true
      }
      return false
    }
    return try staged.setPending(
      property, to: try property.text(of: value), flags: flags, posixAttributes: configuration.posixAttributes
    )
  }

  /// The value a staged file shows for `property`: none for what only the
  /// service will decide (a new object's generation and times).
  private static func stagedValue(_ property: XattrName, in pending: ObjectMetadata) -> String? {
    guard let value = property.value(in: pending), !value.isEmpty else { return nil }
    if case .readOnly(let name) = property, name == .generation || name == .metageneration, value == "0" {
      return nil
    }
    return value
  }

  private static func stagedNames(of pending: ObjectMetadata, hidingStatKeys: Bool) -> [String] {
    XattrName.names(of: pending, hidingStatKeys: hidingStatKeys).filter { name in
      XattrName(name).map { stagedValue($0, in: pending) != nil } ?? false
    }
  }
}

extension XattrFlags {
  /// The errno these flags give a change of a property that `exists` or
  /// not: XATTR_CREATE of one that exists, XATTR_REPLACE or a removal of one
  /// that does not; nil when the change may go ahead.
  func refusal(exists: Bool, removing: Bool) -> Errno? {
    if contains(.create) && exists { return .exists }
    if (contains(.replace) || removing) && !exists { return .noData }
    return nil
  }
}

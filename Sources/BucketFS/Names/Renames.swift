import FUSE
import ObjectStore

#if canImport(Glibc)
  import Glibc
#endif

/// rename of a file: server-side, with preconditions on both names, and the
/// atomic-save rule when it replaces a file (docs/SEMANTICS.md#tree).
extension Namespace {
  func rename(parent: UInt64, name: String, newParent: UInt64, newName: String, flags: RenameFlags)
    async throws
  {
    try checkWritable()
    // Two objects cannot be swapped in one step; whiteouts are for overlays.
    guard flags.subtracting(.noReplace).isEmpty else { throw Errno.invalid }
    let fromParent = try nodes.node(parent, kind: .directory).key
    let toParent = try nodes.node(newParent, kind: .directory).key
    let from = try Names.key(name, under: fromParent, for: .existing)
    let to = try Names.key(newName, under: toParent, for: .newFile)

    let held = nodes.held(fileKey: from, directoryKey: from + "/")
    var kind = held.kind
    // A source the mount does not hold is asked for once, here.
    var unheldFile: ObjectMetadata?
    if kind == nil {
      let found = try await lookInBucket(fileKey: from, directoryKey: from + "/")
      kind = found.directory != nil ? .directory : found.file != nil ? .file : nil
      unheldFile = found.file
    }
    guard let kind else { throw Errno.noEntry }
    if Names.same(from, to) { return }
    if kind == .directory, (to + "/").utf8.starts(with: (from + "/").utf8) { throw Errno.invalid }
    let target = try await lookInBucket(fileKey: to, directoryKey: to + "/")
    if flags.contains(.noReplace), target.file != nil || target.directory != nil { throw Errno.exists }
    switch kind {
    case .file, .symlink:
      // A directory wins over a file of the same name (SPEC §1): that is what the name shows.
      if target.directory != nil { throw Errno.isDirectory }
      try await renameFile(
        from, to: to, replacing: target.file, noReplace: flags.contains(.noReplace), unheld: unheldFile)
    case .directory:
      let replaced: ObjectMetadata?
      switch target.directory {
      case .nonEmpty: throw Errno(ENOTEMPTY)
      case .empty(let placeholder): replaced = placeholder
      case nil:
        if target.file != nil { throw Errno.notDirectory }
        replaced = nil
      }
      try await renameDirectory(from + "/", to: to + "/", replacingPlaceholder: replaced)
    }
  }

  /// `unheld`: the source as the bucket has it, when the mount holds no node of it.
  func renameFile(
    _ from: String, to: String, replacing replaced: ObjectMetadata?, noReplace: Bool, unheld: ObjectMetadata?
  ) async throws {
    let inode: UInt64?
    let source: ObjectMetadata
    if let unheld {
      (inode, source) = (nil, unheld)
    } else {
      if let held = nodes.held(fileKey: from, directoryKey: from + "/").inode,
        let staged = stagedInodes.file(inode: held)
      {
        try await uploads.commit(staged)
      }
      (inode, source) = try await existingFile(from)
    }
    let inferred = provenance.inferred(key: from, generation: source.generation)
    var attributes: ObjectAttributes?
    // A link is moved as it is, and nothing of a replaced link is carried
    // (its keys would make the moved file a link): an atomic save is of files.
    if let replaced, !SymlinkEncoding.isLink(source), !SymlinkEncoding.isLink(replaced) {
      let own = ObjectAttributes(of: source)
      let merged = AtomicSave.attributes(
        source: own, inferred: inferred, replaced: ObjectAttributes(of: replaced))
      if merged != own { attributes = merged }
    }
    let moved: ObjectMetadata
    do {
      moved = try await relocate(
        source, to: to, attributes: attributes, ifGenerationMatch: replaced?.generation ?? 0)
    } catch RelocationFailure.sourceChanged {
      throw await changedMeanwhile(from, operation: "rename")
    } catch RelocationFailure.destinationChanged {
      let errno = await changedMeanwhile(to, operation: "rename onto")
      throw noReplace ? Errno.exists : errno
    } catch RelocationFailure.sourceKept(let copy, let error) {
      logger.error(
        "rename \(from) to \(to): copied, but \(from) could not be deleted (\(error)); both names hold it")
      nodes.remember(copy)
      throw diagnostics.failure(error, operation: "delete", key: from)
    } catch RelocationFailure.failed(let error) {
      throw diagnostics.failure(error, operation: "rename", key: from)
    }
    // What stays inferred: what the result still has from the source's inference.
    let stillInferred = inferred.filter { property in replaced.map { property.value(in: $0) == nil } ?? true }
    provenance.stored(key: moved.name, generation: moved.generation, inferred: stillInferred)
    let replacedInode = nodes.inode(of: to)
    moveNode(inode, from: from, to: moved, sameBytesAs: source.generation)
    if let replacedInode, replacedInode != inode { stagedInodes.file(inode: replacedInode)?.noteUnlinked() }
    if let inode { stagedInodes.file(inode: inode)?.noteRenamed(to: to, generation: moved.generation) }
  }

  /// The table after a file moved: the kernel keeps the inode number for the
  /// new name, with the new object's facts; a node that held the new name
  /// (the replaced file) is detached. The bytes are the same, so the kernel's
  /// cached pages of the old generation stay valid.
  func moveNode(_ inode: UInt64?, from: String, to moved: ObjectMetadata, sameBytesAs generation: Int64) {
    nodes.movedFile(inode, from: from, to: moved, sameBytesAs: generation)
    // Open readers of the old name read the same bytes at the new one.
    reads.retarget(from: from, generation: generation, to: moved)
  }

  enum RelocationFailure: Error {
    /// The source's generation is gone (changed or deleted meanwhile): nothing changed.
    case sourceChanged
    /// The destination is not what the precondition said: nothing changed.
    case destinationChanged
    /// The copy exists; deleting the source failed: both names hold it.
    case sourceKept(copy: ObjectMetadata, error: any Error)
    case failed(any Error)
  }

  /// Moves one object server-side: the service's move when the bucket has
  /// it and the metadata comes along unchanged, else a copy (rewrite) with
  /// `attributes` and then a delete of the source generation. The
  /// destination must be at generation `ifGenerationMatch` (0: absent); the
  /// source is never deleted before its copy exists. The store remembers a
  /// bucket that cannot move (its later moves answer `unsupported` at once).
  func relocate(
    _ source: ObjectMetadata, to destination: String, attributes: ObjectAttributes?, ifGenerationMatch: Int64
  ) async throws -> ObjectMetadata {
    if attributes == nil {
      do {
        return try await store.move(
          source.name, sourceGeneration: source.generation, to: destination,
          ifGenerationMatch: ifGenerationMatch)
      } catch StorageError.unsupported {
        // Copied and deleted below.
      } catch StorageError.preconditionFailed {
        // Either name may have failed its precondition: the source tells which.
        let current = try? await store.metadata(of: source.name)
        throw current?.generation == source.generation
          ? RelocationFailure.destinationChanged : RelocationFailure.sourceChanged
      } catch StorageError.notFound {
        throw RelocationFailure.sourceChanged
      } catch {
        throw RelocationFailure.failed(error)
      }
    }
    let copy: ObjectMetadata
    do {
      copy = try await store.copy(
        source.name, sourceGeneration: source.generation, to: destination, attributes: attributes,
        ifGenerationMatch: ifGenerationMatch)
    } catch StorageError.notFound {
      throw RelocationFailure.sourceChanged
    } catch StorageError.preconditionFailed {
      throw RelocationFailure.destinationChanged
    } catch {
      throw RelocationFailure.failed(error)
    }
    do {
      try await store.delete(source.name, ifGenerationMatch: source.generation)
    } catch StorageError.notFound, StorageError.preconditionFailed {
      // Someone else deleted or rewrote the source after the copy: theirs stays.
      logger.notice(
        "rename: \(source.name) changed after it was copied to \(destination); the new version stays")
    } catch {
      throw RelocationFailure.sourceKept(copy: copy, error: error)
    }
    return copy
  }
}

import FUSE
import ObjectStore

#if canImport(Glibc)
  import Glibc
#endif

/// rename: of a file, server-side, with preconditions on both names, and
/// the atomic-save rule when it replaces a file (docs/SEMANTICS.md#tree); of
/// a directory, every object under its prefix moved server-side, several at
/// once, up to `renameDirectoryLimit` objects (beyond: EXDEV, so `mv`
/// copies). A directory's rename is not atomic: others may see it half
/// done, and a failure midway leaves it half done (EIO, and the log says
/// which objects moved). Only `rename` is called from outside this file.
extension Namespace {
  func rename(parent: UInt64, name: String, newParent: UInt64, newName: String, flags: RenameFlags)
    async throws
  {
    try checkWritable()
    // Two objects cannot be swapped in one step; whiteouts are for overlays.
    guard flags.subtracting(.noReplace).isEmpty else { throw Errno.invalid }
    let fromParent = try inodes.node(parent, kind: .directory).key
    let toParent = try inodes.node(newParent, kind: .directory).key
    let from = try Names.key(name, under: fromParent, for: .existing)
    let to = try Names.key(newName, under: toParent, for: .newFile)

    let held = inodes.nodes.held(fileKey: from, directoryKey: from + "/")
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
  private func renameFile(
    _ from: String, to: String, replacing replaced: ObjectMetadata?, noReplace: Bool, unheld: ObjectMetadata?
  ) async throws {
    let inode: UInt64?
    let source: ObjectMetadata
    if let unheld {
      (inode, source) = (nil, unheld)
    } else {
      if let held = inodes.nodes.held(fileKey: from, directoryKey: from + "/").inode,
        let staged = inodes.stagedFile(held)
      {
        try await uploader.commit(staged)
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
      inodes.nodes.remember(copy)
      throw diagnostics.failure(error, operation: "delete", key: from)
    } catch RelocationFailure.failed(let error) {
      throw diagnostics.failure(error, operation: "rename", key: from)
    }
    let replacedInode = inodes.nodes.held(to)
    // The kernel keeps the inode number for the new name, with the new
    // object's facts; a node that held the new name (the replaced file) is
    // detached. The bytes are the same, so the kernel's cached pages of the
    // old generation stay valid.
    inodes.nodes.moved(file: inode, from: from, to: moved, sameBytesAs: source.generation)
    changes.publish(
      .fileRenamed(
        FileMove(
          from: from, sourceGeneration: source.generation, to: moved, replaced: replaced, inode: inode,
          replacedInode: replacedInode)))
  }

  private enum RelocationFailure: Error {
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
  private func relocate(
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

  // MARK: - Directories

  private func renameDirectory(_ from: String, to: String, replacingPlaceholder replaced: ObjectMetadata?)
    async throws
  {
    // Dirty files go up first, so the listing has them.
    for staged in inodes.stagedFiles(under: from) { try await uploader.commit(staged) }

    let objects = try await objectsToMove(under: from)
    if objects.isEmpty { throw Errno.noEntry }
    let targets = objects.map {
      to + String(decoding: $0.name.utf8.dropFirst(from.utf8.count), as: UTF8.self)
    }
    if targets.contains(where: { $0.utf8.count > Names.maxObjectNameBytes }) { throw Errno.nameTooLong }

    let outcome = await moveAll(objects, to: targets, replacing: replaced, into: to)
    // Each object moved joined the listings of `to` and its parent (ListingAwareStore).
    if let (name, error) = outcome.failure {
      let moved = outcome.moved.map { "\($0.from) -> \($0.to.name)" }
      let kept = outcome.sourceKept.map { "\($0) (copied, source kept)" }
      let left = objects.map(\.name).filter { name in !outcome.moved.contains { Names.same($0.from, name) } }
      logger.error(
        """
        rename \(from) to \(to) failed at \(name): \(error). \
        Moved (\(moved.count)): \(moved.joined(separator: ", ")). \
        Not moved (\(left.count)): \(left.joined(separator: ", ")).\(kept.isEmpty ? "" : " " + kept.joined(separator: ", "))
        """)
      // What moved is no longer under the old names.
      for moved in outcome.moved { inodes.nodes.deleted(moved.from) }
      throw Errno.io
    }

    let held = inodes.nodes.moved(directory: from, to: to, objects: outcome.moved.map(\.to)).map {
      MovedInode(inode: $0.inode, key: $0.key, generation: $0.generation)
    }
    let generations = Dictionary(objects.map { ($0.name, $0.generation) }, uniquingKeysWith: { a, _ in a })
    let moves = outcome.moved.compactMap { moved in
      generations[moved.from].map { FileMove(from: moved.from, sourceGeneration: $0, to: moved.to) }
    }
    changes.publish(.directoryRenamed(moves, held: held))
  }

  /// Every object under `prefix` (placeholder included), or EXDEV when
  /// there are more than the limit: nothing is moved then.
  private func objectsToMove(under prefix: String) async throws -> [ObjectMetadata] {
    let limit = configuration.renameDirectoryLimit
    var objects: [ObjectMetadata] = []
    var token: String?
    var tokens = Set<String>()
    repeat {
      let page: ListPage
      do {
        page = try await store.list(
          ListRequest(
            prefix: prefix, pageSize: min(1000, limit + 1 - objects.count), pageToken: token))
      } catch {
        throw diagnostics.failure(error, operation: "list", key: prefix)
      }
      objects += page.items
      if objects.count > limit {
        logger.notice(
          "rename \(prefix): more than \(limit) objects (--rename-dir-limit); answering EXDEV, so mv copies")
        throw Errno(EXDEV)
      }
      token = page.nextPageToken
      if let token, !tokens.insert(token).inserted {
        throw diagnostics.failure(
          StorageError.invalidResponse("page token \(token) came back; the listing loops"), operation: "list",
          key: prefix)
      }
    } while token != nil
    return objects
  }

  private struct MoveOutcome {
    var moved: [(from: String, to: ObjectMetadata)] = []
    var sourceKept: [String] = []
    var failure: (String, any Error)?
  }

  /// One child's answer: built whole after its last suspension point.
  private struct Relocation: Sendable {
    let name: String
    let result: Result<ObjectMetadata, any Error>
  }

  /// Moves each object to its target, `renameConcurrency` at a time; after
  /// a failure starts no more, and lets the ones under way finish.
  ///
  /// The child returns a ``Relocation`` made after its await, never a tuple
  /// literal with an await inside: Swift 6.3.1 at -O miscompiles a closure
  /// that returns `(known, try await …)` through an indirect result (the
  /// elements written before the suspension are lost), which crashed every
  /// `mv dir dir2` of the release build. Tests/ToolchainCheck reproduces it;
  /// scripts/lint-async-tuples.py keeps the shape out of the code.
  private func moveAll(
    _ objects: [ObjectMetadata], to targets: [String], replacing replaced: ObjectMetadata?, into to: String
  )
    async -> MoveOutcome
  {
    var outcome = MoveOutcome()
    let concurrency = max(configuration.renameConcurrency, 1)
    await withTaskGroup(of: Relocation.self) { group in
      var next = 0
      var running = 0
      repeat {
        while outcome.failure == nil, next < objects.count, running < concurrency {
          let (object, target) = (objects[next], targets[next])
          next += 1
          running += 1
          // The placeholder of an empty directory being replaced is replaced in turn.
          let match = Names.same(target, to) ? replaced?.generation ?? 0 : 0
          group.addTask {
            let result: Result<ObjectMetadata, any Error>
            do {
              result = .success(
                try await self.relocate(object, to: target, attributes: nil, ifGenerationMatch: match))
            } catch {
              result = .failure(error)
            }
            return Relocation(name: object.name, result: result)
          }
        }
        guard let done = await group.next() else { break }
        running -= 1
        switch done.result {
        case .success(let moved):
          outcome.moved.append((done.name, moved))
        case .failure(let error):
          if case RelocationFailure.sourceKept = error { outcome.sourceKept.append(done.name) }
          if outcome.failure == nil { outcome.failure = (done.name, error) }
        }
      } while running > 0 || (outcome.failure == nil && next < objects.count)
    }
    return outcome
  }
}

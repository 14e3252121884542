import FUSE
import ObjectStore

#if canImport(Glibc)
  import Glibc
#endif

/// rename of a directory: every object under its prefix moved server-side,
/// several at once, up to `renameDirectoryLimit` objects (beyond: EXDEV, so
/// `mv` copies). Not atomic: others may see it half done, and a failure
/// midway leaves it half done (EIO, and the log says which objects moved).
extension Namespace {
  func renameDirectory(_ from: String, to: String, replacingPlaceholder replaced: ObjectMetadata?)
    async throws
  {
    // Dirty files go up first, so the listing has them.
    let heldFiles = nodes.held(under: from).filter { $0.node.kind == .file }
    for (inode, _) in heldFiles {
      if let staged = stagedInodes.file(inode: inode) { try await uploads.commit(staged) }
    }

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
      for moved in outcome.moved { nodes.forgetKey(moved.from) }
      throw Errno.io
    }

    let renamed = nodes.movedDirectory(from: from, to: to, moved: outcome.moved.map(\.to))
    for (inode, key, generation) in renamed {
      stagedInodes.file(inode: inode)?.noteRenamed(to: key, generation: generation)
    }
    let generations = Dictionary(objects.map { ($0.name, $0.generation) }, uniquingKeysWith: { a, _ in a })
    for moved in outcome.moved {
      guard let generation = generations[moved.from] else { continue }
      let inferred = provenance.inferred(key: moved.from, generation: generation)
      provenance.stored(key: moved.to.name, generation: moved.to.generation, inferred: inferred)
    }
  }

  /// Every object under `prefix` (placeholder included), or EXDEV when
  /// there are more than the limit: nothing is moved then.
  func objectsToMove(under prefix: String) async throws -> [ObjectMetadata] {
    let limit = configuration.renameDirectoryLimit
    var objects: [ObjectMetadata] = []
    var token: String?
    var tokens = Set<String>()
    repeat {
      let page: ListPage
      do {
        page = try await store.list(
          prefix: prefix, delimiter: nil, pageSize: min(1000, limit + 1 - objects.count), pageToken: token)
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

  struct MoveOutcome {
    var moved: [(from: String, to: ObjectMetadata)] = []
    var sourceKept: [String] = []
    var failure: (String, any Error)?
  }

  /// One child's answer: built whole after its last suspension point.
  struct Relocation: Sendable {
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
  func moveAll(
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

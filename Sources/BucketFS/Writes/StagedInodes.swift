import Synchronization

/// The staged file of each inode that new opens share. Each file counts
/// its own writers and refuses one once its last closed (``StagedFile``);
/// this only maps inodes to files, and never holds its lock while it asks
/// a file anything. What stat, lookups and the namespace ask of staged
/// files: which inode has one (the files in flight are their directories',
/// ``DirectoryCache``).
final class StagedInodes: Sendable {
  /// The staged file of each inode that new opens share.
  private let byInode = Mutex<[UInt64: StagedFile]>([:])
  /// Staged files with writers (some no longer in `byInode`: their name
  /// was unlinked and made anew): at 0 the lookups skip the lock.
  private let live = Atomic<Int>(0)

  /// Whether any file is staged.
  var isEmpty: Bool { live.load(ordering: .relaxed) == 0 }
  var count: Int { live.load(ordering: .relaxed) }

  func file(inode: UInt64) -> StagedFile? {
    guard !isEmpty else { return nil }
    return byInode.withLock { $0[inode] }
  }

  /// The staged file of `inode` that a new open may share: not unlinked,
  /// with a writer open.
  func shared(inode: UInt64) -> StagedFile? {
    guard let staged = file(inode: inode), staged.isShareable else { return nil }
    return staged
  }

  /// `staged`, with its one writer, becomes its inode's staged file.
  func add(_ staged: StagedFile) {
    byInode.withLock { $0[staged.inode] = staged }
    live.add(1, ordering: .relaxed)
  }

  /// As ``add(_:)``, unless the inode has a staged file already that a new
  /// open may share (another open staged it meanwhile): that one is
  /// returned. One that may not is replaced; its own last release takes
  /// out only itself.
  func addUnlessShared(_ staged: StagedFile) -> StagedFile? {
    while true {
      let other = byInode.withLock { $0[staged.inode] }
      if let other, other.isShareable { return other }
      let placed = byInode.withLock { byInode -> Bool in
        guard byInode[staged.inode] === other else { return false }
        byInode[staged.inode] = staged
        return true
      }
      if placed {
        live.add(1, ordering: .relaxed)
        return nil
      }
    }
  }

  /// The last writer of `staged` closed: new opens stage the inode anew.
  func remove(_ staged: StagedFile) {
    byInode.withLock { byInode in
      if byInode[staged.inode] === staged { byInode[staged.inode] = nil }
    }
    live.subtract(1, ordering: .relaxed)
  }
}

extension StagedInodes: NameChangeObserver {
  /// A staged file uploads to its new name from now on, replacing only the
  /// moved generation; one whose name a rename replaced is unlinked.
  func observe(_ change: NameChange) {
    switch change {
    case .fileRenamed(let move):
      if let replaced = move.replacedInode, replaced != move.inode { file(inode: replaced)?.noteUnlinked() }
      if let inode = move.inode {
        file(inode: inode)?.noteRenamed(to: move.to.name, generation: move.to.generation)
      }
    case .directoryRenamed(_, let held):
      for moved in held { file(inode: moved.inode)?.noteRenamed(to: moved.key, generation: moved.generation) }
    }
  }
}

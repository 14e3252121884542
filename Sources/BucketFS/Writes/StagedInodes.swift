import Synchronization

/// The staged file of each inode that new opens share. Each file counts
/// its own writers and refuses one once its last closed (``StagedFile``);
/// this only maps inodes to files, and never holds its lock while it asks
/// a file anything. What stat, lookups, listings and the namespace ask of
/// staged files: which inode has one, and which files are in flight
/// (created through the mount, not stored yet).
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

  /// Every staged file new opens share.
  private func files() -> [StagedFile] {
    guard !isEmpty else { return [] }
    return byInode.withLock { Array($0.values) }
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

  // MARK: - Files in flight

  /// A file created through the mount and not stored yet.
  struct InFlight: Sendable, Equatable {
    let name: String
    let inode: UInt64
  }

  /// The files in flight directly in directory `directoryKey` (or anywhere
  /// under it, `deep`), in the order the service lists names: a file being
  /// written is a file, listed with its directory and keeping it non-empty.
  func inFlight(in directoryKey: String, deep: Bool = false) -> [InFlight] {
    var found: [InFlight] = []
    for staged in files() {
      guard let key = staged.inFlightKey, key.utf8.count > directoryKey.utf8.count,
        key.utf8.starts(with: directoryKey.utf8)
      else {
        continue
      }
      let name = String(decoding: key.utf8.dropFirst(directoryKey.utf8.count), as: UTF8.self)
      if deep || !name.utf8.contains(UInt8(ascii: "/")) {
        found.append(InFlight(name: name, inode: staged.inode))
      }
    }
    return found.sorted { Names.precedes($0.name, $1.name) }
  }

  /// Whether `inode` is still a file in flight (not stored, not unlinked).
  func isInFlight(_ inode: UInt64) -> Bool {
    file(inode: inode)?.inFlightKey != nil
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

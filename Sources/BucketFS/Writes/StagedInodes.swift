import Synchronization

/// The staged file of each inode, and how many write handles each has. A
/// writer is added only to its inode's current staged file, and the last
/// one's removal takes the file out, under one lock: no write handle is
/// ever added to a released stage. What stat, lookups, listings and the
/// namespace ask of staged files: which inode has one, and which files are
/// in flight (created through the mount, not stored yet).
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

  /// The staged file of `inode` that a new open may share: not unlinked.
  func shared(inode: UInt64) -> StagedFile? {
    guard let staged = file(inode: inode), !staged.isUnlinked else { return nil }
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

  /// As ``add(_:)``, unless the inode has a staged file already that is
  /// not unlinked (another open staged it meanwhile): that one is returned.
  func addUnlessShared(_ staged: StagedFile) -> StagedFile? {
    let other = byInode.withLock { byInode -> StagedFile? in
      if let other = byInode[staged.inode], !other.isUnlinked { return other }
      byInode[staged.inode] = staged
      return nil
    }
    if other == nil { live.add(1, ordering: .relaxed) }
    return other
  }

  /// One more write handle on `staged`; false if its last one closed
  /// meanwhile (then the caller stages the file anew).
  func addWriter(_ staged: StagedFile) -> Bool {
    byInode.withLock { byInode in
      guard byInode[staged.inode] === staged else { return false }
      staged.state.withLock { $0.handles += 1 }
      return true
    }
  }

  /// A write handle on `staged` closed: true when it was the last.
  func removeWriter(_ staged: StagedFile) -> Bool {
    byInode.withLock { byInode in
      let last = staged.state.withLock { s in
        s.handles -= 1
        return s.handles <= 0
      }
      guard last else { return false }
      if byInode[staged.inode] === staged { byInode[staged.inode] = nil }
      live.subtract(1, ordering: .relaxed)
      return true
    }
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
      let (key, fresh) = staged.state.withLock { ($0.key, $0.baseGeneration == 0 && !$0.unlinked) }
      guard fresh, key.utf8.count > directoryKey.utf8.count, key.utf8.starts(with: directoryKey.utf8) else {
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
    file(inode: inode)?.state.withLock { $0.baseGeneration == 0 && !$0.unlinked } ?? false
  }
}

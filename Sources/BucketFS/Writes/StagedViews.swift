import FUSE
import NIOCore
import ObjectStore

/// What reads, stat, lookups and the last close see of a staged file
/// (docs/SEMANTICS.md#writes-staging).
extension Staging {
  // MARK: - Reading staged bytes

  /// What a read-only open of a staged inode reads.
  enum Reading {
    /// The stage, which holds the bytes: the handle counts as its reader,
    /// so the stage outlives the writers' close for it (``releaseReader(_:)``).
    case stage(StagedFile)
    /// The generation the stage was opened on, which it does not hold yet.
    case base(ObjectMetadata)
  }

  /// A read-only open of `inode`: the stage's bytes once it holds them, the
  /// opened generation's until then. Nil when it is not staged, or the last
  /// writer closed meanwhile: then the bucket has the bytes.
  func openForReading(inode: UInt64) -> Reading? {
    guard let staged = file(inode: inode) else { return nil }
    return staged.state.withLock { s -> Reading? in
      guard s.handles > 0 else { return nil }
      guard s.loaded else { return s.base.map(Reading.base) }
      s.readers += 1
      return .stage(staged)
    }
  }

  /// A reader of a stage closed: the last one removes a stage its writers left.
  func releaseReader(_ staged: StagedFile) {
    let remove = staged.state.withLock { s in
      s.readers -= 1
      return s.readers == 0 && s.removeWhenUnread
    }
    if remove { discard(staged.stage) }
  }

  /// The bytes of a stage that holds the file's. A streaming file's bytes
  /// that left the stage are brought back first; a read that raced their
  /// leaving is made again.
  func read(_ staged: StagedFile, offset: UInt64, size: Int) async throws -> [ByteBuffer] {
    while true {
      let total = staged.state.withLock { $0.size }
      guard offset < total, size > 0 else { return [] }
      let count = Int(min(UInt64(size), total - offset))
      let range = Int64(offset)..<Int64(offset) + Int64(count)
      if try await bringBackIfGone(staged, range) { continue }
      let bytes: ByteBuffer
      do {
        bytes = try await staged.stage.read(at: Int64(offset), count: count)
      } catch {
        throw Errno(error.code)
      }
      // Bytes are marked gone before they are punched: unmarked now, they were there.
      if staged.state.withLock({ $0.stream?.gone(range) ?? false }) { continue }
      return [bytes]
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
    let files = inodes.files()
    var found: [InFlight] = []
    for staged in files {
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

  /// Whether the mount holds `key` as a file in flight.
  func isInFlight(key: String) -> Bool {
    nodes.inode(of: key).map(isInFlight) ?? false
  }

  /// Whether `inode` is still a file in flight (not stored, not unlinked).
  func isInFlight(_ inode: UInt64) -> Bool {
    file(inode: inode)?.state.withLock { $0.baseGeneration == 0 && !$0.unlinked } ?? false
  }

  // MARK: - Release

  /// A writer of a staged file closed. At the last, the stage goes, unless
  /// it holds bytes that were never stored (then it stays, and the log says
  /// where) or readers remain (then the last of them removes it).
  func releaseWriter(_ closed: StagedFile) {
    guard inodes.removeWriter(closed) else { return }
    // An upload under way (its close or fsync interrupted, or another
    // handle's fsync) decides when it ends: its bytes may yet be stored.
    let deferred = closed.state.withLock { s in
      if s.uploading > 0 { s.releasedWhileUploading = true }
      return s.uploading > 0
    }
    if !deferred { settleReleased(closed) }
  }

  /// After the last handle's release and every upload: the stage goes,
  /// unless it holds bytes that were never stored.
  func settleReleased(_ closed: StagedFile) {
    let (key, dirty, unlinked, poisoned, uploadedOnce) = closed.state.withLock {
      ($0.key, $0.dirty, $0.unlinked, $0.poisoned, $0.baseGeneration != 0)
    }
    if unlinked || poisoned != nil { dropStream(closed) }
    let localFault = poisoned != nil && poisoned != .stale
    if dirty && !unlinked && !localFault {
      logger.error(
        "\(key): closed with bytes that were not stored; they are kept in \(closed.stage.path) (see \(closed.stage.sidecarPath))"
      )
    } else if closed.state.withLock({ s in
      s.removeWhenUnread = s.readers > 0
      return !s.removeWhenUnread
    }) {
      discard(closed.stage)
    }
    if !uploadedOnce {
      // Never stored: what stat knows of it must come from the bucket again.
      nodes.expire(closed.inode)
    }
  }

  /// Removes a stage's files apart from the caller: release runs on the
  /// FUSE loop thread, which never waits for the disk.
  private func discard(_ stage: Stage) {
    tasks.start(.finish, priority: .utility) { stage.remove() }
  }
}

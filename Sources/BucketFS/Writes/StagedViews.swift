import FUSE
import NIOCore
import ObjectStore

/// What reads, stat, lookups and the last close see of a staged file
/// (docs/SEMANTICS.md#writes-staging).
extension Staging {
  // MARK: - Reading staged bytes

  /// A read-only handle on a staged inode: the stage's bytes once it holds
  /// them, the opened generation's until then. A handle on a loaded stage
  /// counts as its reader, so the stage outlives the writers' close for it.
  /// Nil when the last writer closed meanwhile: then the bucket has the bytes.
  func openForReading(_ staged: StagedFile) -> OpenResult? {
    enum Source {
      case stage
      case base(ObjectMetadata?)
      case closed
    }
    let source = staged.state.withLock { s -> Source in
      guard s.handles > 0 else { return .closed }
      guard s.loaded else { return .base(s.base) }
      s.readers += 1
      return .stage
    }
    let handle = handles.next()
    switch source {
    case .closed: return nil
    case .base(let base): if let base { reads.add(handle: handle, base: base) }
    case .stage:
      registry.withLock { $0.readers[handle] = staged }
      count.add(1, ordering: .relaxed)
    }
    return OpenResult(handle: handle, keepCache: false)
  }

  /// The stage a read-only handle reads, if it was opened on a loaded one.
  func reader(handle: UInt64) -> StagedFile? {
    guard isActive else { return nil }
    return registry.withLock { $0.readers[handle] }
  }

  /// A reader of a stage closed: the last one removes a stage its writers left.
  func releaseReader(handle: UInt64) {
    guard isActive, let staged = registry.withLock({ $0.readers.removeValue(forKey: handle) }) else { return }
    count.subtract(1, ordering: .relaxed)
    let remove = staged.state.withLock { s in
      s.readers -= 1
      return s.readers == 0 && s.removeWhenUnread
    }
    if remove { discard(staged.stage) }
  }

  /// The staged file whose stage answers reads of the handle, if it holds the bytes.
  private func loaded(inode: UInt64, handle: UInt64) -> (StagedFile, UInt64)? {
    guard isActive, let staged = file(handle: handle) ?? reader(handle: handle) ?? file(inode: inode),
      let total = staged.state.withLock({ $0.loaded ? $0.size : nil })
    else { return nil }
    return (staged, total)
  }

  /// Whether reads of the handle come from a stage (file I/O: not at hand).
  func holdsBytes(inode: UInt64, handle: UInt64) -> Bool {
    loaded(inode: inode, handle: handle) != nil
  }

  /// The bytes of a loaded stage, for any handle of the inode; nil when the
  /// inode is not staged or its bytes are still the object's.
  /// A streaming file's bytes that left the stage are brought back first;
  /// a read that raced their leaving is made again.
  func bytes(inode: UInt64, handle: UInt64, offset: UInt64, size: Int) async throws -> [ByteBuffer]? {
    while true {
      guard let (staged, total) = loaded(inode: inode, handle: handle) else { return nil }
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
    guard isActive else { return [] }
    let files = registry.withLock { Array($0.byInode.values) }
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

  // MARK: - Attributes

  /// What stat shows of a staged inode: its staged size and mtime, and the
  /// mode and owner its upload will store (nil when it only reads).
  func view(_ inode: UInt64) -> (size: UInt64, modified: Timestamp?, posix: StoredPosix?)? {
    file(inode: inode)?.state.withLock { s in
      (s.size, s.modified, s.dirty || s.base == nil ? StoredPosix(s.attributes.custom) : nil)
    }
  }

  // MARK: - Release

  /// The last handle of a staged file closed: the stage goes, unless it
  /// holds bytes that were never stored (then it stays, and the log says where).
  func releaseWriter(handle: UInt64) {
    guard isActive else { return }
    let closed = registry.withLock { registry -> StagedFile? in
      guard let staged = registry.handles.removeValue(forKey: handle) else { return nil }
      let last = staged.state.withLock { s in
        s.handles -= 1
        return s.handles <= 0
      }
      guard last else { return nil }
      if registry.byInode[staged.inode] === staged { registry.byInode[staged.inode] = nil }
      count.subtract(1, ordering: .relaxed)
      return staged
    }
    guard let closed else { return }
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

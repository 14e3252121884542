import FUSE
import ObjectStore
import Synchronization

/// One inode being written: its stage, the properties its upload will carry
/// and the precondition it uploads with. Every handle of the inode shares it,
/// so each sees the others' writes and stat shows the staged size.
final class StagedFile: Sendable {
  let inode: UInt64
  let stage: Stage

  struct State {
    /// The object name the bytes go to (a rename changes it).
    var key: String
    /// ifGenerationMatch of the next upload: 0 for a new object, else the
    /// generation opened (or last uploaded).
    var baseGeneration: Int64
    /// That generation's metadata, where its bytes come from when a write
    /// needs them; nil for a new object.
    var base: ObjectMetadata?
    /// What the upload stores as writable properties.
    var attributes: ObjectAttributes
    /// Properties bucketfs chose (contentType from the name, a generated
    /// download token), not the user or the replaced object.
    var inferred: Set<XattrName>
    var size: UInt64
    /// The stage holds the file's bytes; until then they are `base`'s and
    /// only writes that need none of them go to the stage without a download.
    var loaded: Bool
    var dirty = false
    /// Set by a refused upload (412) or a local failure: every later write,
    /// fsync and close of the inode's handles fails with it.
    var poisoned: Errno?
    var unlinked = false
    var handles = 0
    /// The mtime stat shows.
    var modified: Timestamp?
    /// Whether the sidecar says "uploaded", to flip it once on the next change.
    var recordUploaded = false
    /// Read-only handles reading the loaded stage: it stays until they close.
    var readers = 0
    /// Every write handle closed while readers remained: the last reader's
    /// close removes the stage.
    var removeWhenUnread = false
    /// Every byte was written in order from 0 since the file was last empty:
    /// it may stream (``WriteStream``).
    var sequential = false
    var stream: WriteStream?
    /// Uploads under way (``Staging/commit(_:)``): a release meanwhile
    /// leaves its decision to the last of them to end.
    var uploading = 0
    var releasedWhileUploading = false

    /// What the sidecar says of the file.
    func record(uploaded: Bool) -> StageRecord {
      StageRecord(
        key: key, baseGeneration: baseGeneration, uploaded: uploaded,
        fields: Dictionary(uniqueKeysWithValues: attributes.fields.map { ($0.key.rawValue, $0.value) }),
        custom: attributes.custom, parts: stream?.upload.prefix)
    }
  }
  let state: Mutex<State>
  /// Orders the work on the stage's bytes and sidecar (writes, resizes,
  /// downloads into it, uploads from it), none of which holds `state`.
  let gate = AsyncGate()

  init(inode: UInt64, stage: Stage, state: State) {
    self.inode = inode
    self.stage = stage
    self.state = Mutex(state)
  }

  var record: StageRecord {
    state.withLock { $0.record(uploaded: $0.recordUploaded) }
  }
}

extension StagedFile {
  /// Whether the stage holds the file's bytes (until then they are the
  /// opened generation's).
  var holdsBytes: Bool { state.withLock { $0.loaded } }

  /// The generation reads of a write handle come from while the stage does
  /// not hold the bytes; nil once it does.
  var unloadedBase: ObjectMetadata? { state.withLock { $0.loaded ? nil : $0.base } }

  /// What stat shows of the file: its staged size and mtime, and the mode
  /// and owner its upload will store (nil when it only reads).
  var view: (size: UInt64, modified: Timestamp?, posix: StoredPosix?) {
    state.withLock { s in
      (s.size, s.modified, s.dirty || s.base == nil ? StoredPosix(s.attributes.custom) : nil)
    }
  }

  // MARK: - What the namespace tells it

  /// Its name was unlinked: its handles keep reading and writing their
  /// bytes, as on a local filesystem, but never upload them to the removed
  /// name, and the stage is deleted when the last one closes.
  func noteUnlinked() {
    state.withLock { $0.unlinked = true }
  }

  /// A file this mount created and never stored has no object to delete:
  /// unlinking it drops the name at once (a create-then-unlink scratch
  /// file). False, and nothing changes, when it was stored or unlinked.
  func unlinkIfNeverStored() -> Bool {
    state.withLock { s in
      guard s.baseGeneration == 0, !s.unlinked else { return false }
      s.unlinked = true
      return true
    }
  }

  /// It was renamed to `newKey`, stored as `generation`: its handles upload
  /// there from now on, replacing only that generation.
  func noteRenamed(to newKey: String, generation: Int64) {
    state.withLock { s in
      s.key = newKey
      s.baseGeneration = generation
      if var base = s.base {
        base.name = newKey
        base.generation = generation
        s.base = base
      }
    }
  }
}

/// The staged file of each inode, and how many write handles each has. A
/// writer is added only to its inode's current staged file, and the last
/// one's removal takes the file out, under one lock: no write handle is
/// ever added to a released stage.
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

  /// Every staged file new opens share.
  func files() -> [StagedFile] {
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
      if let other = byInode[staged.inode], !other.state.withLock({ $0.unlinked }) { return other }
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
}

/// A lock for async work: waiters resume in order, none is lost. A task
/// cancelled while it waits leaves the line and throws `CancellationError`
/// (one that finds the gate free takes it).
final class AsyncGate: Sendable {
  private struct Waiter {
    let id: UInt64
    let continuation: CheckedContinuation<Void, any Error>
  }
  private struct State {
    var locked = false
    var lastID: UInt64 = 0
    var waiters: [Waiter] = []
  }
  private let state = Mutex(State())

  func lock() async throws {
    let id = state.withLock { s in
      s.lastID += 1
      return s.lastID
    }
    try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
        let outcome = state.withLock { s -> Result<Void, any Error>? in
          if !s.locked {
            s.locked = true
            return .success(())
          }
          // Cancelled before it could queue: the handler below found nothing to take out.
          if Task.isCancelled { return .failure(CancellationError()) }
          s.waiters.append(Waiter(id: id, continuation: continuation))
          return nil
        }
        if let outcome { continuation.resume(with: outcome) }
      }
    } onCancel: {
      let left = state.withLock { s -> Waiter? in
        guard let index = s.waiters.firstIndex(where: { $0.id == id }) else { return nil }
        return s.waiters.remove(at: index)
      }
      left?.continuation.resume(throwing: CancellationError())
    }
  }

  func unlock() {
    let next = state.withLock { s -> Waiter? in
      if s.waiters.isEmpty {
        s.locked = false
        return nil
      }
      return s.waiters.removeFirst()
    }
    next?.continuation.resume()
  }

  /// Tasks waiting for the gate.
  var waiting: Int { state.withLock { $0.waiters.count } }

  func run<T: Sendable>(_ body: () async throws -> T) async throws -> T {
    try await lock()
    defer { unlock() }
    return try await body()
  }
}

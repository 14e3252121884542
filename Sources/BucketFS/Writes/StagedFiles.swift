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

/// Staged files by inode, and which write handles belong to which.
struct StagedFiles: Sendable {
  /// The staged file of each inode that new opens share.
  var byInode: [UInt64: StagedFile] = [:]
  /// Write handles and the staged file each writes to. A handle keeps its
  /// own even when the inode gets another (its name unlinked and made anew).
  var handles: [UInt64: StagedFile] = [:]
  /// Read-only handles opened on a loaded stage, and the stage each reads.
  var readers: [UInt64: StagedFile] = [:]
  /// Properties bucketfs inferred per uploaded key and generation, for an
  /// atomic save to tell them from the user's; bounded, oldest dropped first.
  var inferred: [InferredKey: Set<XattrName>] = [:]
  var inferredOrder: [InferredKey] = []
  static let inferredCapacity = 4096

  /// Objects this mount created lately (key -> when), for tools that set
  /// xattrs on a new file after closing it (rsync -X reopens its temp file).
  var created: [ObjectKey: Double] = [:]
  var createdOrder: [ObjectKey] = []

  mutating func remember(created key: String, at time: Double) {
    if created.updateValue(time, forKey: ObjectKey(key)) == nil { createdOrder.append(ObjectKey(key)) }
    if createdOrder.count > Self.inferredCapacity {
      created[createdOrder.removeFirst()] = nil
    }
  }

  struct InferredKey: Hashable, Sendable {
    let key: ObjectKey
    let generation: Int64

    init(key: String, generation: Int64) {
      self.key = ObjectKey(key)
      self.generation = generation
    }
  }

  mutating func remember(inferred properties: Set<XattrName>, key: String, generation: Int64) {
    guard !properties.isEmpty else { return }
    let id = InferredKey(key: key, generation: generation)
    if inferred.updateValue(properties, forKey: id) == nil { inferredOrder.append(id) }
    if inferredOrder.count > Self.inferredCapacity {
      let drop = inferredOrder.count - Self.inferredCapacity
      for old in inferredOrder.prefix(drop) { inferred[old] = nil }
      inferredOrder.removeFirst(drop)
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

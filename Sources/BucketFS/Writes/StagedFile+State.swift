import FUSE
import ObjectStore

/// What a ``StagedFile`` knows of itself, and the rules it alone applies:
/// when its stage may go, and what it asks of an upload. Only the file's own
/// methods (StagedFile.swift) hold it, under the file's lock.
extension StagedFile {
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
    var dirty: Bool
    /// Set by a refused upload (412) or a local failure: every later write,
    /// fsync and close of the inode's handles fails with it.
    var poisoned: Errno?
    var unlinked = false
    /// Write handles open on it; 0 once the last closed, and then for good.
    var writers = 1
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
    var sequential: Bool
    /// The bytes' CRC-32C as they were written, while every write was
    /// summed in order from the file's first byte (a file with the opened
    /// generation's bytes has none).
    var sums = AppendSums()
    var stream: WriteStream?
    /// Uploads under way: a release meanwhile leaves its decision to the
    /// last of them to end.
    var uploading = 0
    var releasedWhileUploading = false

    /// What the sidecar says of the file.
    func record(uploaded: Bool) -> StageRecord {
      StageRecord(
        key: key, baseGeneration: baseGeneration, uploaded: uploaded,
        fields: Dictionary(uniqueKeysWithValues: attributes.fields.map { ($0.key.rawValue, $0.value) }),
        custom: attributes.custom, parts: stream?.upload.prefix)
    }

    /// Whether a write needs none of the bytes not yet in the stage.
    func covers(offset: UInt64, count: Int) -> Bool {
      loaded || (offset == 0 && UInt64(count) >= size)
    }

    /// The last writer closed and no upload is under way: the stage goes,
    /// unless it holds bytes that were never stored (then it stays) or
    /// readers remain (then the last of them removes it).
    mutating func settle() -> StageSettlement {
      let localFault = poisoned != nil && poisoned != .stale
      let stage: StageSettlement.Fate
      if dirty && !unlinked && !localFault {
        stage = .keptUnstored
      } else {
        removeWhenUnread = readers > 0
        stage = removeWhenUnread ? .leftToReaders : .removed
      }
      return StageSettlement(
        key: key, stage: stage, dropsStream: unlinked || poisoned != nil, neverStored: baseGeneration == 0)
    }

    /// A writer closed: at the last, the settlement, unless an upload under
    /// way is left to settle it when it ends.
    mutating func dismissWriter() -> (last: Bool, settlement: StageSettlement?) {
      writers -= 1
      guard writers <= 0 else { return (false, nil) }
      if uploading > 0 {
        releasedWhileUploading = true
        return (true, nil)
      }
      return (true, settle())
    }

    /// An upload ended: the last one settles a stage released meanwhile.
    mutating func endUpload() -> StageSettlement? {
      uploading -= 1
      guard uploading == 0 else { return nil }
      defer { releasedWhileUploading = false }
      return releasedWhileUploading ? settle() : nil
    }

    /// What an upload now sends: nil when there is nothing to store (clean,
    /// or unlinked). Every upload stores the mtime stat showed while staged
    /// (whole seconds, as gsutil), so stat does not change when the file is
    /// stored or renamed (vim refuses to save over a changed mtime).
    func uploadRequest() throws(Errno) -> UploadRequest? {
      if let poisoned { throw poisoned }
      guard dirty, !unlinked else { return nil }
      var attributes = attributes
      if let modified { attributes.custom[Staging.mtimeKey] = String(modified.seconds) }
      return UploadRequest(key: key, generation: baseGeneration, attributes: attributes, size: size)
    }

    /// An upload stored `uploaded`: the file is clean, and the next upload
    /// replaces that generation.
    mutating func noteUploaded(_ uploaded: ObjectMetadata) {
      dirty = false
      recordUploaded = true
      base = uploaded
      baseGeneration = uploaded.generation
      attributes = ObjectAttributes(of: uploaded)
    }

    /// Whether a write at `offset` keeps the file in order, and what then
    /// becomes of its stream.
    mutating func streamStep(beforeWriteAt offset: UInt64) -> StreamStep {
      let inOrder = sequential && offset == size
      if !inOrder { sequential = false }
      guard let stream else { return .notStreaming }
      return inOrder && !stream.failed ? .continues : .fallsBack
    }
  }

  /// What becomes of a stage whose last writer closed, once no upload is
  /// under way (``State/settle()``); the caller acts on it.
  struct StageSettlement: Equatable {
    enum Fate: Equatable {
      /// It holds bytes that were never stored: it stays, and the log says where.
      case keptUnstored
      /// It goes now.
      case removed
      /// Its last reader removes it.
      case leftToReaders
    }
    let key: String
    let stage: Fate
    /// Its stream will never be composed: its parts are deleted.
    let dropsStream: Bool
    /// It was never stored: what stat knows of it must come from the bucket again.
    let neverStored: Bool
  }

  /// What one upload sends, under which precondition.
  struct UploadRequest {
    let key: String
    /// ifGenerationMatch: 0 for a new object.
    let generation: Int64
    let attributes: ObjectAttributes
    let size: UInt64
  }

  /// What a write at some offset does to the file's stream.
  enum StreamStep: Equatable {
    case notStreaming
    /// In order, and the stream is well: it goes on.
    case continues
    /// Out of order, or a part failed: the stream's bytes come back first.
    case fallsBack
  }

  /// What a read-only open of a staged inode reads.
  enum ReadSource {
    /// The stage, which holds the bytes: the handle counts as its reader.
    case stage
    /// The generation the stage was opened on, which it does not hold yet.
    case base(ObjectMetadata)
  }
}

import ObjectStore

/// A rename made through the mount, told once to every component that keeps
/// state by name or generation (``NameChanges``): open readers, staged
/// files, what bucketfs chose of the files it stores. The node table is the
/// namespace's own and has moved first; the directory cache learns the
/// store's writes from the store itself (``ListingAwareStore``).
enum NameChange: Sendable {
  /// One file moved, replacing `move.replaced` if it had a name there.
  case fileRenamed(FileMove)
  /// Every object under a directory moved; `held` are the inodes the mount
  /// holds under it, with their new keys and generations.
  case directoryRenamed([FileMove], held: [MovedInode])
}

/// One object moved server-side (a move, or a copy and a delete).
struct FileMove: Sendable {
  let from: String
  /// The source's generation, which the move consumed.
  let sourceGeneration: Int64
  let to: ObjectMetadata
  /// The file the move replaced at `to.name`, if any.
  var replaced: ObjectMetadata?
  /// The inode of the moved file (nil: the mount held none), and of the
  /// file that held the new name.
  var inode: UInt64?
  var replacedInode: UInt64?
}

/// A held inode a directory rename carried to a new key.
struct MovedInode: Sendable {
  let inode: UInt64
  let key: String
  let generation: Int64
}

/// A component that keeps state by name or generation, told of every rename.
protocol NameChangeObserver: Sendable {
  func observe(_ change: NameChange)
}

/// Tells every observer of a rename, in the order given.
struct NameChanges: Sendable {
  let observers: [any NameChangeObserver]

  func publish(_ change: NameChange) {
    for observer in observers { observer.observe(change) }
  }
}

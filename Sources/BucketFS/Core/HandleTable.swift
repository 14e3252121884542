import Synchronization

/// What one open handle is: the one place a handle number is looked up,
/// so read, write and release each find it once and switch on its case.
enum Handle: Sendable {
  /// Reads a generation of an object.
  case object(FileReader)
  /// Reads the stage of an inode being written (opened read-only once the
  /// stage held the bytes): the stage outlives its writers for it.
  case stageReader(StagedFile)
  /// Writes a stage; its reads come from `base`, the generation opened,
  /// until the stage holds the bytes (nil when it held them at open).
  case write(StagedFile, base: FileReader?)
  /// Lists a directory.
  case directory(OpenDirectory)
}

/// Every open handle by number: files, stages and directories. Open puts a
/// handle here and takes its number; release takes it out, once.
final class HandleTable: Sendable {
  private let last = Atomic<UInt64>(0)
  private let open = Mutex<[UInt64: Handle]>([:])

  /// Numbers `handle` and holds it until ``take(_:)``.
  func put(_ handle: Handle) -> UInt64 {
    let number = last.add(1, ordering: .relaxed).newValue
    open.withLock { $0[number] = handle }
    return number
  }

  func find(_ number: UInt64) -> Handle? {
    open.withLock { $0[number] }
  }

  /// Removes the handle (release): nil when it was never put or already taken.
  func take(_ number: UInt64) -> Handle? {
    open.withLock { $0.removeValue(forKey: number) }
  }

  /// The readers of objects open now: read handles, and write handles
  /// still reading their base generation.
  func objectReaders() -> [FileReader] {
    open.withLock { open in
      open.values.compactMap { handle in
        switch handle {
        case .object(let reader): reader
        case .write(_, let base): base
        case .stageReader, .directory: nil
        }
      }
    }
  }

  /// Handles open now, of the kinds `counted` picks (for tests and logs).
  func count(where counted: (Handle) -> Bool = { _ in true }) -> Int {
    open.withLock { $0.values.count(where: counted) }
  }
}

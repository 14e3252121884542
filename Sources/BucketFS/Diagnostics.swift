import FUSE
import Logging
import ObjectStore
import Synchronization

/// Where the components' failures become errno: each mapped by one table
/// (`ErrorMapping`) and logged here, once, when it deserves it.
final class Diagnostics: Sendable {
  let logger: Logger
  /// Keys already warned about (conflicts, access denied), bounded.
  private let warned = Mutex<Set<ObjectKey>>([])

  init(logger: Logger) {
    self.logger = logger
  }

  /// Maps a failure to errno, logging what deserves it.
  func failure(
    _ error: any Error, operation: String, key: String, context: ErrorMapping.Context = .metadata
  ) -> Errno {
    if let storage = error as? StorageError {
      switch storage {
      case .accessDenied(let message):
        if firstWarning("denied:" + key) {
          logger.error("\(operation) \(key): access denied: \(message)")
          if let hint = ErrorMapping.hint(for: storage) { logger.error("\(hint)") }
        }
      case .unavailable, .invalidResponse, .badRequest:
        logger.error("\(operation) \(key): \(storage)")
      default:
        break
      }
    } else if !(error is Errno) && !(error is CancellationError) {
      logger.error("\(operation) \(key): \(error)")
    }
    return ErrorMapping.errno(for: error, context: context)
  }

  /// A stage's local file failed (a full disk, a closed descriptor).
  func localFailure(_ code: Int32, key: String) -> Errno {
    logger.error("staging \(key) failed locally: \(Errno(code)); nothing of it is uploaded")
    return Errno(code)
  }

  func warnConflict(_ fileKey: String) {
    if firstWarning("conflict:" + fileKey) {
      logger.warning(
        "object '\(fileKey)' has the same name as a directory; the directory is shown, the object is left untouched"
      )
    }
  }

  func firstWarning(_ key: String) -> Bool {
    warned.withLock { warned in
      if warned.count > 10_000 { warned.removeAll() }
      return warned.insert(ObjectKey(key)).inserted
    }
  }
}

import FUSE
import Logging
import ObjectStore
import Synchronization

/// A failure inside the filesystem: the errno it answers, what was being
/// done to which object, and the error behind it. Components throw it; the
/// FUSE boundary (``BucketFileSystem/boundary(_:_:)``) logs it once and
/// answers its errno.
struct FileSystemError: Error, CustomStringConvertible {
  let errno: Errno
  let operation: String
  let key: String
  let cause: any Error
  /// How loud the boundary logs it; nil for an answer that is no trouble
  /// (ENOENT of a missing name, a cancelled request).
  let level: Logger.Level?
  /// What to do about it, when that is known (Firebase's listing rules).
  let hint: String?

  var description: String { "\(operation) \(key): \(cause)" }
}

/// Where the components' failures become errno: each mapped by one table
/// (`ErrorMapping`) into a ``FileSystemError``, which is logged once where it
/// leaves the filesystem.
final class Diagnostics: Sendable {
  let logger: Logger
  /// Keys already warned about (conflicts, access denied), bounded.
  private let warned = Mutex(BoundedMap<ObjectKey, Bool>(capacity: 10_000))

  init(logger: Logger) {
    self.logger = logger
  }

  /// The failure `error` of `operation` on `key`, with its errno and how
  /// loud it is; one that is already a ``FileSystemError`` stays as it is.
  func failure(
    _ error: any Error, operation: String, key: String, context: ErrorMapping.Context = .metadata
  ) -> FileSystemError {
    if let failure = error as? FileSystemError { return failure }
    var level: Logger.Level?
    var hint: String?
    if let storage = error as? StorageError {
      switch storage {
      case .accessDenied:
        // Once per key: a denied tree would flood the log.
        if firstWarning("denied:" + key) {
          level = .error
          hint = ErrorMapping.hint(for: storage)
        }
      case .unavailable, .invalidResponse, .badRequest:
        level = .error
      default:
        break
      }
    } else if !(error is Errno) && !(error is CancellationError) {
      level = .error
    }
    return FileSystemError(
      errno: ErrorMapping.errno(for: error, context: context), operation: operation, key: key, cause: error,
      level: level, hint: hint)
  }

  /// Logs a failure where it leaves the filesystem: `during` is the FUSE operation.
  func log(_ failure: FileSystemError, during operation: String) {
    guard let level = failure.level else { return }
    logger.log(level: level, "\(operation): \(failure) (answered \(failure.errno))")
    if let hint = failure.hint { logger.log(level: level, "\(hint)") }
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
      guard warned[ObjectKey(key)] == nil else { return false }
      warned.insert(true, for: ObjectKey(key))
      return true
    }
  }
}

import FUSE
import ObjectStore

/// How a failed upload leaves the file: told by ``Uploader`` and ``WriteStreams``.
extension StagedFile {
  /// What a failed upload of `key` (whole or streamed) throws, and leaves
  /// the file as: a refusal by the precondition is ESTALE, with the stage
  /// kept (`kept` says what of it, before its path); a local failure
  /// poisons the file; the rest is mapped and logged. A stream's own
  /// errors come already mapped and recorded.
  func uploadFailure(
    _ error: any Error, key: String, generation: Int64, kept: String, diagnostics: Diagnostics
  ) -> any Error {
    if let failure = error as? Errno { return failure }
    if let failure = error as? FileSystemError { return failure }
    if case StorageError.preconditionFailed = error {
      noteRefused()
      diagnostics.logger.error(
        "upload of \(key) refused: the object \(generation == 0 ? "appeared" : "changed since generation \(generation)") meanwhile; nothing was overwritten; \(kept) \(stage.path)"
      )
      return Errno.stale
    }
    if let local = error as? StageFailure { return poison(local.code, diagnostics: diagnostics) }
    return diagnostics.failure(error, operation: "upload", key: key)
  }
}

import FUSE
import ObjectStore

#if canImport(Glibc)
  import Glibc
#endif

/// The one conditional-PATCH loop of the mount, behind setxattr, removexattr,
/// chmod, chown and utimens: a decision on the metadata at hand, sent with
/// both its generation and metageneration; on a 412 the object is read
/// again and the decision made again, at most five times (then EAGAIN).
extension ExtendedAttributes {
  /// What to do with the metadata at hand.
  enum PatchStep {
    /// Nothing to send: this is the result.
    case done(ObjectMetadata)
    /// Read the object again and decide again (what is at hand is too old
    /// for a decision that sends nothing).
    case refresh
    /// Send this PATCH, conditional on the metadata at hand.
    case send(MetadataPatch)
    /// There is no object: make one with these properties where nothing is
    /// (`ifGenerationMatch=0`; a directory's placeholder).
    case create(ObjectAttributes)
  }

  /// Runs `decide` on the metadata of `key` (`initial`, read at
  /// `fetchedAt`; nil: no object) until it is done or a write it asked for
  /// went through. `fetch` reads the object again. Returns the result, and
  /// whether a write made it.
  func patchConditionally(
    _ key: String, from initial: ObjectMetadata?, fetchedAt: Double,
    fetch: () async throws -> ObjectMetadata?,
    decide: (_ current: ObjectMetadata?, _ fetchedAt: Double) throws -> PatchStep
  ) async throws -> (metadata: ObjectMetadata, wrote: Bool) {
    var current = initial
    var fetchedAt = fetchedAt
    for _ in 0..<5 {
      switch try decide(current, fetchedAt) {
      case .done(let metadata):
        return (metadata, false)
      case .refresh:
        break
      case .create(let attributes):
        do {
          let made = try await store.upload(
            key, from: BytesSource([]), attributes: attributes, ifGenerationMatch: 0)
          return (made, true)
        } catch StorageError.preconditionFailed {
          diagnostics.logger.debug("\(key) made meanwhile; deciding again")
        } catch {
          throw diagnostics.failure(error, operation: "create placeholder", key: key)
        }
      case .send(let patch):
        // A decision to patch is made on metadata at hand.
        guard let metadata = current else { throw Errno.noEntry }
        do {
          // Both numbers: a replaced generation may have the same metageneration.
          let updated = try await store.patch(
            key, patch, ifGenerationMatch: metadata.generation, ifMetagenerationMatch: metadata.metageneration
          )
          return (updated, true)
        } catch StorageError.preconditionFailed {
          diagnostics.logger.debug("metadata of \(key) changed meanwhile; deciding again")
        } catch StorageError.notFound {
          // Gone meanwhile: decided again on no object.
          current = nil
          continue
        } catch {
          throw diagnostics.failure(error, operation: "patch", key: key)
        }
      }
      current = try await fetch()
      fetchedAt = clock()
    }
    diagnostics.logger.warning("metadata of \(key) keeps changing; giving up this change")
    throw Errno(EAGAIN)
  }
}

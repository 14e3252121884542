import FUSE
import ObjectStore

/// What an error means to the caller (docs/SEMANTICS.md#errors-table). One table, used everywhere.
enum ErrorMapping {
  enum Context {
    case metadata, read
    /// An open or getattr of an inode the kernel found by a name it still holds.
    case inode
  }

  static func errno(for error: any Error, context: Context = .metadata) -> Errno {
    switch error {
    case let errno as Errno: return errno
    case let failure as FileSystemError: return failure.errno
    case is CancellationError: return .interrupted
    case let storage as StorageError: return errno(for: storage, context: context)
    default: return .io
    }
  }

  static func errno(for error: StorageError, context: Context) -> Errno {
    switch error {
    // A read names the generation pinned at open: gone means replaced. An
    // open or getattr names an inode the kernel found by a name: gone means
    // that entry is stale, and ESTALE makes the kernel look the name up
    // again, once (then open(O_CREAT) creates it, open and stat get ENOENT).
    case .notFound: context == .metadata ? .noEntry : .stale
    case .accessDenied: .accessDenied
    case .preconditionFailed: context == .read ? .stale : .io
    case .tooLarge: .tooBig
    case .badRequest: .invalid
    case .unavailable, .invalidResponse, .tlsFailure: .io
    case .cancelled: .interrupted
    case .unsupported: .notSupported
    }
  }

  /// The Firebase rules message that has a known fix.
  static func hint(for error: StorageError) -> String? {
    guard case .accessDenied(let message) = error,
      message.contains("rules_version") || message.contains("Listing objects in a bucket is disallowed")
    else { return nil }
    return "Firebase security rules forbid listing with rules_version = \"1\"; "
      + "set rules_version = \"2\" in your storage rules to allow list calls"
  }
}

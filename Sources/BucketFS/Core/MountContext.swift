import Logging
import ObjectStore

/// What every component of one mount uses alike, built once by
/// ``BucketFileSystem``: the store every component calls (the
/// ``ListingAwareStore``, so each write reaches the ``DirectoryCache``), the
/// mount's settings, where failures become errno, the clock, and the owner
/// of the tasks started apart from a request.
struct MountContext: Sendable {
  let store: any ObjectStore
  let configuration: Configuration
  let diagnostics: Diagnostics
  let clock: @Sendable () -> Double
  /// Owns every task started apart from a request (BackgroundTasks.swift).
  let tasks: BackgroundTasks
}

/// A component that keeps the mount's ``MountContext`` as one property and
/// reads its parts by their own names.
protocol MountComponent {
  var context: MountContext { get }
}

extension MountComponent {
  var store: any ObjectStore { context.store }
  var configuration: Configuration { context.configuration }
  var diagnostics: Diagnostics { context.diagnostics }
  var clock: @Sendable () -> Double { context.clock }
  var tasks: BackgroundTasks { context.tasks }
  var logger: Logger { context.diagnostics.logger }
}

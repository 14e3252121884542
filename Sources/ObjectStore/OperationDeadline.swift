import NIOCore

/// What the user-visible operation under way allows a store call: until when
/// it may retry, and whether it may retry at all. Set by the filesystem as a
/// task-local, so calls made on its behalf (read-ahead tasks included) share
/// one deadline instead of each starting its own.
public struct OperationDeadline: Sendable {
  /// Retries stop at this moment (or the store's own deadline, if sooner).
  public var deadline: NIODeadline?
  /// False: one attempt only, bounded by the store's request timeout.
  public var retries: Bool

  public init(deadline: NIODeadline?, retries: Bool = true) {
    self.deadline = deadline
    self.retries = retries
  }

  @TaskLocal public static var current: OperationDeadline?
}

#if canImport(Glibc)
  import Glibc
#endif

/// A POSIX error number, the only kind of failure a FUSE reply can carry.
public struct Errno: Error, Sendable, Equatable, Hashable, CustomStringConvertible {
  public let code: Int32
  public init(_ code: Int32) { self.code = code }

  public static let noEntry = Errno(ENOENT)
  public static let io = Errno(EIO)
  public static let accessDenied = Errno(EACCES)
  public static let notPermitted = Errno(EPERM)
  public static let noData = Errno(ENODATA)
  public static let exists = Errno(EEXIST)
  public static let range = Errno(ERANGE)
  public static let tooBig = Errno(E2BIG)
  public static let invalid = Errno(EINVAL)
  public static let notSupported = Errno(EOPNOTSUPP)
  public static let readOnly = Errno(EROFS)
  public static let stale = Errno(ESTALE)
  public static let interrupted = Errno(EINTR)
  public static let isDirectory = Errno(EISDIR)
  public static let notDirectory = Errno(ENOTDIR)
  public static let badHandle = Errno(EBADF)
  public static let nameTooLong = Errno(ENAMETOOLONG)

  public var description: String { String(cString: strerror(code)) }
}

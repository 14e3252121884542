import CFuse

#if canImport(Glibc)
  import Glibc
#endif

/// A point in time as stat reports it.
public struct Timestamp: Sendable, Equatable, Comparable {
  public var seconds: Int
  public var nanoseconds: Int

  public init(seconds: Int, nanoseconds: Int = 0) {
    self.seconds = seconds
    self.nanoseconds = nanoseconds
  }

  public static func < (a: Timestamp, b: Timestamp) -> Bool {
    (a.seconds, a.nanoseconds) < (b.seconds, b.nanoseconds)
  }

  public static func now() -> Timestamp {
    var ts = Glibc.timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Timestamp(seconds: ts.tv_sec, nanoseconds: ts.tv_nsec)
  }

  var timespec: Glibc.timespec { Glibc.timespec(tv_sec: seconds, tv_nsec: nanoseconds) }
}

/// What stat shows of one inode.
public struct FileAttributes: Sendable, Equatable {
  public enum Kind: Sendable, Equatable {
    case file, directory, symlink
    /// Special files: shown, never opened through (the kernel serves a FIFO
    /// or socket itself; the mount is nodev).
    case fifo, socket, characterDevice, blockDevice
  }

  public var inode: UInt64
  public var kind: Kind
  public var size: UInt64
  /// `S_IFMT`: the file type bits of a mode.
  public static let typeMask: UInt32 = 0o170000
  /// Permission bits only; the file type comes from `kind`.
  public var permissions: UInt32
  public var uid: UInt32
  public var gid: UInt32
  public var accessTime: Timestamp
  public var modificationTime: Timestamp
  public var changeTime: Timestamp
  /// The device number of a character or block device (0 for anything else).
  public var device: UInt64

  public init(
    inode: UInt64, kind: Kind, size: UInt64, permissions: UInt32, uid: UInt32, gid: UInt32,
    accessTime: Timestamp, modificationTime: Timestamp, changeTime: Timestamp, device: UInt64 = 0
  ) {
    self.device = device
    self.inode = inode
    self.kind = kind
    self.size = size
    self.permissions = permissions
    self.uid = uid
    self.gid = gid
    self.accessTime = accessTime
    self.modificationTime = modificationTime
    self.changeTime = changeTime
  }

  var stat: Glibc.stat {
    var st = Glibc.stat()
    st.st_ino = __ino_t(inode)
    st.st_mode = kind.mode | (permissions & 0o7777)
    st.st_nlink = kind == .directory ? 2 : 1
    st.st_uid = uid
    st.st_gid = gid
    st.st_size = Int(clamping: size)
    st.st_blksize = 4096
    st.st_blocks = Int((size + 511) / 512)
    st.st_atim = accessTime.timespec
    st.st_mtim = modificationTime.timespec
    st.st_ctim = changeTime.timespec
    st.st_rdev = __dev_t(device)
    return st
  }
}

extension FileAttributes.Kind {
  /// The file type bits of `st_mode` (readdir's `d_type` comes from them).
  public var mode: mode_t {
    switch self {
    case .file: S_IFREG
    case .directory: S_IFDIR
    case .symlink: S_IFLNK
    case .fifo: 0o010000
    case .socket: 0o140000
    case .characterDevice: 0o020000
    case .blockDevice: 0o060000
    }
  }

  /// The kind a file's `st_mode` type bits name; nil for a regular file, a
  /// directory or a link (those come from the object itself, never a key).
  public init?(special mode: UInt32) {
    switch mode & FileAttributes.typeMask {
    case 0o010000: self = .fifo
    case 0o140000: self = .socket
    case 0o020000: self = .characterDevice
    case 0o060000: self = .blockDevice
    default: return nil
    }
  }
}

/// Who made a request: its effective uid and gid, as the kernel passed them.
public struct Caller: Sendable, Equatable {
  public var uid: UInt32
  public var gid: UInt32

  public init(uid: UInt32, gid: UInt32) {
    self.uid = uid
    self.gid = gid
  }

  /// The caller of the request being served; nil outside one (tests set it).
  @TaskLocal public static var current: Caller?
}

/// The answer to a lookup: an inode with its attributes, or a negative entry
/// the kernel may cache for `entryTimeout` seconds.
public struct Entry: Sendable, Equatable {
  public var attributes: FileAttributes?
  public var entryTimeout: Double
  public var attributeTimeout: Double

  public init(attributes: FileAttributes?, entryTimeout: Double, attributeTimeout: Double) {
    self.attributes = attributes
    self.entryTimeout = entryTimeout
    self.attributeTimeout = attributeTimeout
  }

  public static func negative(timeout: Double) -> Entry {
    Entry(attributes: nil, entryTimeout: timeout, attributeTimeout: 0)
  }

  var parameters: fuse_entry_param {
    var param = fuse_entry_param()
    param.ino = attributes?.inode ?? 0
    param.generation = 1
    if let attributes { param.attr = attributes.stat }
    param.entry_timeout = entryTimeout
    param.attr_timeout = attributeTimeout
    return param
  }
}

/// What open and opendir answer besides the handle.
public struct OpenResult: Sendable {
  public var handle: UInt64
  /// Keep the kernel's page cache from an earlier open (content unchanged);
  /// for a directory, the readdir results it cached.
  public var keepCache: Bool
  /// A directory only: the kernel may cache this handle's readdir results
  /// (FOPEN_CACHE_DIR), for later opens with ``keepCache``.
  public var cacheDirectory: Bool
  /// A file only: this handle's reads and writes bypass the page cache
  /// (FOPEN_DIRECT_IO); every read goes to the file system.
  public var directIO: Bool

  public init(handle: UInt64, keepCache: Bool, cacheDirectory: Bool = false, directIO: Bool = false) {
    self.handle = handle
    self.keepCache = keepCache
    self.cacheDirectory = cacheDirectory
    self.directIO = directIO
  }
}

/// Flags of a setxattr call.
public struct XattrFlags: OptionSet, Sendable {
  public let rawValue: Int32
  public init(rawValue: Int32) { self.rawValue = rawValue }
  /// Fail with EEXIST if the attribute exists.
  public static let create = XattrFlags(rawValue: cfuse_xattr_create)
  /// Fail with ENODATA if the attribute does not exist.
  public static let replace = XattrFlags(rawValue: cfuse_xattr_replace)
}

/// What a setattr call changes; nil fields stay as they are.
public struct AttributeChanges: Sendable, Equatable {
  public var size: UInt64?
  public var mode: UInt32?
  public var uid: UInt32?
  public var gid: UInt32?
  public var accessTime: Timestamp?
  public var modificationTime: Timestamp?

  public init(
    size: UInt64? = nil, mode: UInt32? = nil, uid: UInt32? = nil, gid: UInt32? = nil,
    accessTime: Timestamp? = nil, modificationTime: Timestamp? = nil
  ) {
    self.size = size
    self.mode = mode
    self.uid = uid
    self.gid = gid
    self.accessTime = accessTime
    self.modificationTime = modificationTime
  }
}

/// Flags of a rename call (renameat2).
public struct RenameFlags: OptionSet, Sendable {
  public let rawValue: UInt32
  public init(rawValue: UInt32) { self.rawValue = rawValue }
  /// Fail with EEXIST if the destination exists.
  public static let noReplace = RenameFlags(rawValue: 1)
  /// Swap source and destination.
  public static let exchange = RenameFlags(rawValue: 2)
}

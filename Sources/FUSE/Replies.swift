import CFuse
import NIOCore

#if canImport(Glibc)
  import Glibc
#endif

// How answers reach the kernel: data by writev, xattr values by the size
// protocol, and the attributes a setattr carries.

/// One writev of every piece: the kernel copies straight out of our buffers.
/// Returns the errno answered: none, 0.
func replyData(_ req: fuse_req_t, _ pieces: [ByteBuffer]) -> Int32 {
  var vectors: [iovec] = []
  vectors.reserveCapacity(pieces.count)
  // Each piece's pointer is valid only inside its closure: nest them.
  func gather(_ index: Int) {
    guard index < pieces.count else {
      _ = fuse_reply_iov(req, vectors, Int32(vectors.count))
      return
    }
    pieces[index].withUnsafeReadableBytes { bytes in
      vectors.append(
        iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress), iov_len: bytes.count))
      gather(index + 1)
    }
  }
  gather(0)
  return 0
}

/// How many bytes a write took. Returns the errno answered: none, 0.
func replyWritten(_ req: fuse_req_t, _ count: Int) -> Int32 {
  fuse_reply_write(req, count)
  return 0
}

/// The buffer is used by one task at a time, then by the reply.
struct SendableBuffer: @unchecked Sendable {
  let value: FUSEDirectoryBuffer
  init(_ value: FUSEDirectoryBuffer) { self.value = value }
}

/// getxattr/listxattr protocol: size 0 asks for the length; too small is
/// ERANGE. Returns the errno answered, or 0.
@discardableResult
func replyXattr(_ req: fuse_req_t, _ answer: Result<[UInt8], Errno>, size: Int) -> Int32 {
  let value: [UInt8]
  switch answer {
  case .success(let bytes): value = bytes
  case .failure(let errno):
    fuse_reply_err(req, errno.code)
    return errno.code
  }
  switch XattrReply(value: value, bufferSize: size) {
  case .size(let count): fuse_reply_xattr(req, count)
  case .error(let errno):
    fuse_reply_err(req, errno.code)
    return errno.code
  case .value:
    value.withUnsafeBufferPointer { buffer in
      buffer.withMemoryRebound(to: CChar.self) { _ = fuse_reply_buf(req, $0.baseAddress, $0.count) }
    }
  }
  return 0
}

/// listxattr's format: each name followed by a NUL.
func packNames(_ names: [String]) -> [UInt8] {
  var packed: [UInt8] = []
  for name in names { packed += Array(name.utf8) + [0] }
  return packed
}

/// How an xattr value answers a caller's buffer of `bufferSize` bytes.
public enum XattrReply: Equatable {
  case size(Int)
  case value
  case error(Errno)

  public init(value: [UInt8], bufferSize: Int) {
    if bufferSize == 0 {
      self = .size(value.count)
    } else if value.count > bufferSize {
      self = .error(.range)
    } else {
      self = .value
    }
  }
}

extension AttributeChanges {
  init(_ attr: stat, toSet: Int32) {
    func has(_ bit: Int32) -> Bool { toSet & bit != 0 }
    self.init()
    if has(FUSE_SET_ATTR_SIZE) { size = UInt64(max(attr.st_size, 0)) }
    if has(FUSE_SET_ATTR_MODE) { mode = attr.st_mode & 0o7777 }
    if has(FUSE_SET_ATTR_UID) { uid = attr.st_uid }
    if has(FUSE_SET_ATTR_GID) { gid = attr.st_gid }
    if has(FUSE_SET_ATTR_ATIME_NOW) {
      accessTime = .now()
    } else if has(FUSE_SET_ATTR_ATIME) {
      accessTime = Timestamp(seconds: attr.st_atim.tv_sec, nanoseconds: attr.st_atim.tv_nsec)
    }
    if has(FUSE_SET_ATTR_MTIME_NOW) {
      modificationTime = .now()
    } else if has(FUSE_SET_ATTR_MTIME) {
      modificationTime = Timestamp(seconds: attr.st_mtim.tv_sec, nanoseconds: attr.st_mtim.tv_nsec)
    }
  }
}

import CFuse
import NIOCore

#if canImport(Glibc)
  import Glibc
#endif

/// The libfuse callback table. Each callback copies what it needs out of
/// libfuse's buffers, then answers inline (cheap, local work) or hands the
/// request to ``FUSESession/serve(_:_:reply:)``.
extension FUSESession {
  func makeOperations() -> fuse_lowlevel_ops {
    var ops = fuse_lowlevel_ops()
    ops.`init` = { userdata, conn in
      guard let userdata, let conn else { return }
      // Always readdirplus: entries arrive with attributes, so `ls -l` needs no lookups.
      if conn.pointee.capable & UInt32(FUSE_CAP_READDIRPLUS) != 0 {
        conn.pointee.want |= UInt32(FUSE_CAP_READDIRPLUS)
      }
      conn.pointee.want &= ~UInt32(FUSE_CAP_READDIRPLUS_AUTO)
      conn.pointee.want |= UInt32(FUSE_CAP_ASYNC_READ)
      // open(O_TRUNC) arrives as one open with the flag, not open plus a truncate.
      if conn.pointee.capable & UInt32(FUSE_CAP_ATOMIC_O_TRUNC) != 0 {
        conn.pointee.want |= UInt32(FUSE_CAP_ATOMIC_O_TRUNC)
      }
      let session = Unmanaged<FUSESession>.fromOpaque(userdata).takeUnretainedValue()
      session.fileSystem.mounted(kernel: KernelCache(session: session))
    }
    ops.lookup = { req, parent, name in
      guard let name = utf8Name(req, name) else { fuse_reply_err(req, ENOENT); return }
      let fs = session(req).fileSystem
      session(req).serve(req, { try await fs.lookup(parent: parent, name: name) }) { request, entry in
        var param = entry.parameters
        if fuse_reply_entry(request.raw, &param) != 0 { fs.replyFailed(.lookup(inode: param.ino)) }
      }
    }
    ops.forget = { req, inode, count in
      session(req).fileSystem.forget(inode: inode, count: count)
      fuse_reply_none(req)
    }
    ops.forget_multi = { req, count, forgets in
      let fs = session(req).fileSystem
      for item in UnsafeBufferPointer(start: forgets, count: count) {
        fs.forget(inode: item.ino, count: item.nlookup)
      }
      fuse_reply_none(req)
    }
    ops.getattr = { req, inode, _ in
      let fs = session(req).fileSystem
      session(req).serve(req, { try await fs.getattr(inode: inode) }) { request, answer in
        var st = answer.0.stat
        fuse_reply_attr(request.raw, &st, answer.timeout)
      }
    }
    ops.readlink = { req, inode in
      let fs = session(req).fileSystem
      session(req).serve(req, { try await fs.readlink(inode: inode) }) { request, target in
        // A C string: the target's bytes and a NUL.
        _ = (target + [0]).withUnsafeBufferPointer { bytes in
          bytes.withMemoryRebound(to: CChar.self) { fuse_reply_readlink(request.raw, $0.baseAddress) }
        }
      }
    }
    ops.opendir = { req, inode, _ in
      let fs = session(req).fileSystem
      session(req).serve(req, { try await fs.opendir(inode: inode) }) { request, handle in
        var info = fuse_file_info()
        info.fh = handle
        if fuse_reply_open(request.raw, &info) != 0 { fs.replyFailed(.opendir(inode: inode, handle: handle)) }
      }
    }
    ops.readdir = { req, inode, size, offset, info in
      guard let handle = fileHandle(req, info, "readdir"), let offset = checkedOffset(req, offset, "readdir")
      else { return }
      serveReaddir(req, inode: inode, size: size, offset: offset, handle: handle, plus: false)
    }
    ops.readdirplus = { req, inode, size, offset, info in
      guard let handle = fileHandle(req, info, "readdirplus"),
        let offset = checkedOffset(req, offset, "readdirplus")
      else { return }
      serveReaddir(req, inode: inode, size: size, offset: offset, handle: handle, plus: true)
    }
    ops.releasedir = { req, inode, info in
      guard let handle = fileHandle(req, info, "releasedir") else { return }
      session(req).fileSystem.releasedir(inode: inode, handle: handle)
      fuse_reply_err(req, 0)
    }
    ops.open = { req, inode, info in
      guard let info else { return missing(req, "file info for open") }
      let flags = info.pointee.flags
      let fs = session(req).fileSystem
      session(req).serve(req, { try await fs.open(inode: inode, flags: flags) }) { request, result in
        var reply = fuse_file_info()
        reply.fh = result.handle
        reply.keep_cache = result.keepCache ? 1 : 0
        if fuse_reply_open(request.raw, &reply) != 0 {
          fs.replyFailed(.open(inode: inode, handle: result.handle))
        }
      }
    }
    ops.read = { req, inode, size, offset, info in
      guard let req, let handle = fileHandle(req, info, "read"),
        let offset = checkedOffset(req, offset, "read")
      else { return }
      let fs = session(req).fileSystem
      if let pieces = fs.readInline(inode: inode, handle: handle, offset: offset, size: size) {
        replyData(req, pieces)
        return
      }
      session(req).serve(
        req, { try await fs.read(inode: inode, handle: handle, offset: offset, size: size) }
      ) { request, pieces in
        replyData(request.raw, pieces)
      }
    }
    ops.release = { req, inode, info in
      guard let handle = fileHandle(req, info, "release") else { return }
      session(req).fileSystem.release(inode: inode, handle: handle)
      fuse_reply_err(req, 0)
    }
    ops.statfs = { req, _ in
      var st = statvfs()
      st.f_bsize = 4096
      st.f_frsize = 4096
      st.f_blocks = 1 << 40
      st.f_bfree = 1 << 40
      st.f_bavail = 1 << 40
      st.f_files = 1 << 32
      st.f_ffree = 1 << 32
      st.f_favail = 1 << 32
      st.f_namemax = 255
      fuse_reply_statfs(req, &st)
    }
    ops.getxattr = { req, inode, name, size in
      guard let req else { return }
      guard let name = name.map({ String(cString: $0) }) else { return missing(req, "getxattr name") }
      let fs = session(req).fileSystem
      if let answer = fs.getxattrInline(inode: inode, name: name) {
        replyXattr(req, answer, size: size)
        return
      }
      session(req).serve(req, { try await fs.getxattr(inode: inode, name: name) }) { request, value in
        replyXattr(request.raw, .success(value), size: size)
      }
    }
    ops.listxattr = { req, inode, size in
      guard let req else { return }
      let fs = session(req).fileSystem
      if let answer = fs.listxattrInline(inode: inode) {
        replyXattr(req, answer.map(packNames), size: size)
        return
      }
      session(req).serve(req, { try await fs.listxattr(inode: inode) }) { request, names in
        replyXattr(request.raw, .success(packNames(names)), size: size)
      }
    }
    ops.setxattr = { req, inode, name, value, size, flags in
      guard let name = name.map({ String(cString: $0) }) else { return missing(req, "setxattr name") }
      let bytes =
        size == 0 || value == nil
        ? [] : Array(UnsafeRawBufferPointer(start: value, count: size).bindMemory(to: UInt8.self))
      let fs = session(req).fileSystem
      session(req).serve(
        req,
        { try await fs.setxattr(inode: inode, name: name, value: bytes, flags: XattrFlags(rawValue: flags)) }
      ) { request, _ in
        fuse_reply_err(request.raw, 0)
      }
    }
    ops.removexattr = { req, inode, name in
      guard let name = name.map({ String(cString: $0) }) else { return missing(req, "removexattr name") }
      let fs = session(req).fileSystem
      session(req).serve(req, { try await fs.removexattr(inode: inode, name: name) }) { request, _ in
        fuse_reply_err(request.raw, 0)
      }
    }
    ops.create = { req, parent, name, mode, info in
      guard let name = utf8Name(req, name) else { fuse_reply_err(req, EINVAL); return }
      guard let info else { return missing(req, "file info for create") }
      let flags = info.pointee.flags
      let fs = session(req).fileSystem
      session(req).serve(
        req, { try await fs.create(parent: parent, name: name, mode: UInt32(mode), flags: flags) }
      ) { request, answer in
        var param = answer.0.parameters
        var reply = fuse_file_info()
        reply.fh = answer.1.handle
        reply.keep_cache = answer.1.keepCache ? 1 : 0
        if fuse_reply_create(request.raw, &param, &reply) != 0 {
          fs.replyFailed(.create(inode: param.ino, handle: answer.1.handle))
        }
      }
    }
    ops.write = { req, inode, buf, size, offset, info in
      guard let handle = fileHandle(req, info, "write"), let offset = checkedOffset(req, offset, "write")
      else {
        return
      }
      guard buf != nil || size == 0 else { return missing(req, "data to write") }
      let fs = session(req).fileSystem
      let bytes = UnsafeRawBufferPointer(start: buf, count: size)
      if let answer = fs.writeInline(inode: inode, handle: handle, offset: offset, data: bytes) {
        switch answer {
        case .success(let count): fuse_reply_write(req, count)
        case .failure(let errno): fuse_reply_err(req, errno.code)
        }
        return
      }
      let data = Array(bytes.bindMemory(to: UInt8.self))
      session(req).serve(
        req, { try await fs.write(inode: inode, handle: handle, offset: offset, data: data) }
      ) { request, count in
        fuse_reply_write(request.raw, count)
      }
    }
    ops.flush = { req, inode, info in
      guard let handle = fileHandle(req, info, "flush") else { return }
      let fs = session(req).fileSystem
      session(req).serve(req, { try await fs.flush(inode: inode, handle: handle) }) { request, _ in
        fuse_reply_err(request.raw, 0)
      }
    }
    ops.fsync = { req, inode, dataOnly, info in
      guard let handle = fileHandle(req, info, "fsync") else { return }
      let fs = session(req).fileSystem
      session(req).serve(req, { try await fs.fsync(inode: inode, handle: handle, dataOnly: dataOnly != 0) }) {
        request, _ in
        fuse_reply_err(request.raw, 0)
      }
    }
    ops.setattr = { req, inode, attr, toSet, info in
      guard let attr else { return missing(req, "attributes to set") }
      // off_t: a size past Int64.max arrives negative. Never a truncation to 0.
      if toSet & FUSE_SET_ATTR_SIZE != 0 && attr.pointee.st_size < 0 {
        let size = UInt64(bitPattern: Int64(attr.pointee.st_size))
        session(req).logger.notice("truncate of inode \(inode) to \(size) bytes: past the largest file size")
        fuse_reply_err(req, EINVAL)
        return
      }
      let changes = AttributeChanges(attr.pointee, toSet: toSet)
      let handle = info.map { $0.pointee.fh }
      let fs = session(req).fileSystem
      session(req).serve(req, { try await fs.setattr(inode: inode, handle: handle, changes: changes) }) {
        request, answer in
        var st = answer.0.stat
        fuse_reply_attr(request.raw, &st, answer.timeout)
      }
    }
    ops.mkdir = { req, parent, name, mode in
      guard let name = utf8Name(req, name) else { fuse_reply_err(req, EINVAL); return }
      let fs = session(req).fileSystem
      session(req).serve(req, { try await fs.mkdir(parent: parent, name: name, mode: UInt32(mode)) }) {
        request, entry in
        var param = entry.parameters
        if fuse_reply_entry(request.raw, &param) != 0 { fs.replyFailed(.lookup(inode: param.ino)) }
      }
    }
    ops.unlink = { req, parent, name in
      guard let name = utf8Name(req, name) else { fuse_reply_err(req, ENOENT); return }
      let fs = session(req).fileSystem
      session(req).serve(req, { try await fs.unlink(parent: parent, name: name) }) { request, _ in
        fuse_reply_err(request.raw, 0)
      }
    }
    ops.rmdir = { req, parent, name in
      guard let name = utf8Name(req, name) else { fuse_reply_err(req, ENOENT); return }
      let fs = session(req).fileSystem
      session(req).serve(req, { try await fs.rmdir(parent: parent, name: name) }) { request, _ in
        fuse_reply_err(request.raw, 0)
      }
    }
    ops.rename = { req, parent, name, newParent, newName, flags in
      guard let name = utf8Name(req, name) else { fuse_reply_err(req, ENOENT); return }
      guard let newName = utf8Name(req, newName) else { fuse_reply_err(req, EINVAL); return }
      let fs = session(req).fileSystem
      session(req).serve(
        req,
        {
          try await fs.rename(
            parent: parent, name: name, newParent: newParent, newName: newName,
            flags: RenameFlags(rawValue: flags))
        }
      ) { request, _ in
        fuse_reply_err(request.raw, 0)
      }
    }
    ops.symlink = { req, target, parent, name in
      guard let name = utf8Name(req, name) else { fuse_reply_err(req, EINVAL); return }
      guard let target else { return missing(req, "symlink target") }
      let bytes = Array(
        UnsafeRawBufferPointer(start: target, count: strlen(target)).bindMemory(to: UInt8.self))
      let fs = session(req).fileSystem
      session(req).serve(req, { try await fs.symlink(parent: parent, name: name, target: bytes) }) {
        request, entry in
        var param = entry.parameters
        if fuse_reply_entry(request.raw, &param) != 0 { fs.replyFailed(.lookup(inode: param.ino)) }
      }
    }
    // Objects have no hard links and no special files (docs/SEMANTICS.md): say
    // so plainly rather than ENOSYS, which some kernels remember for the mount.
    ops.link = { req, _, _, _ in fuse_reply_err(req, EPERM) }
    // Only regular files: a store of objects has no devices, FIFOs or sockets.
    ops.mknod = { req, parent, name, mode, _ in
      guard mode & S_IFMT == S_IFREG else { fuse_reply_err(req, EPERM); return }
      guard let name = utf8Name(req, name) else { fuse_reply_err(req, EINVAL); return }
      let fs = session(req).fileSystem
      session(req).serve(req, { try await fs.mknod(parent: parent, name: name, mode: UInt32(mode)) }) {
        request, entry in
        var param = entry.parameters
        if fuse_reply_entry(request.raw, &param) != 0 { fs.replyFailed(.lookup(inode: param.ino)) }
      }
    }
    return ops
  }
}

/// A name from the kernel, if it is UTF-8. Object names are UTF-8: a name
/// that is not can be no object's, and `String(cString:)` would repair it to
/// U+FFFD and so reach (or create) another object.
private func utf8Name(_ req: fuse_req_t?, _ raw: UnsafePointer<CChar>?) -> String? {
  guard let raw else {
    session(req).logger.error("libfuse passed no name")
    return nil
  }
  if let name = String(validatingCString: raw) { return name }
  session(req).logger.info("refusing a name that is not UTF-8: \(String(cString: raw).debugDescription)")
  return nil
}

private func session(_ req: fuse_req_t?) -> FUSESession {
  Unmanaged<FUSESession>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
}

/// Something libfuse always passes is missing: EIO and a log line, never a trap.
private func missing(_ req: fuse_req_t?, _ what: String) {
  session(req).logger.error("libfuse passed no \(what)")
  fuse_reply_err(req, EIO)
}

/// The handle of an open file or directory; nil (answered) without one.
private func fileHandle(
  _ req: fuse_req_t?, _ info: UnsafeMutablePointer<fuse_file_info>?, _ operation: String
)
  -> UInt64?
{
  guard let info else {
    missing(req, "file info for \(operation)")
    return nil
  }
  return info.pointee.fh
}

/// A file offset as the filesystem takes it; nil (answered EINVAL) when
/// negative, as a 64-bit offset past Int64.max arrives in an off_t.
private func checkedOffset(_ req: fuse_req_t?, _ offset: off_t, _ operation: String) -> UInt64? {
  guard offset < 0 else { return UInt64(offset) }
  session(req).logger.notice(
    "\(operation) at offset \(UInt64(bitPattern: Int64(offset))): past the largest file offset")
  fuse_reply_err(req, EINVAL)
  return nil
}

private func serveReaddir(
  _ req: fuse_req_t?, inode: UInt64, size: Int, offset: UInt64, handle: UInt64, plus: Bool
) {
  guard let req else { return }
  let fs = session(req).fileSystem
  let buffer = SendableBuffer(FUSEDirectoryBuffer(request: req, capacity: size, plus: plus))
  session(req).serve(
    req,
    {
      try await fs.readdir(inode: inode, handle: handle, offset: offset, into: buffer.value)
      return buffer
    }
  ) { (request: Request, filled: SendableBuffer) in
    if fuse_reply_buf(request.raw, filled.value.bytes, filled.value.used) != 0 {
      for inode in filled.value.counted { fs.forget(inode: inode, count: 1) }
    }
  }
}

import CFuse
import NIOCore

#if canImport(Glibc)
  import Glibc
#endif

/// The libfuse callback table. Each callback notes its ``Arrival``, copies
/// what it needs out of libfuse's buffers, then answers inline (cheap, local
/// work) or hands the request to ``FUSESession/serve(_:_:_:reply:)``; either
/// way the answer is counted once (``RequestMetrics``).
extension FUSESession {
  func makeOperations() -> fuse_lowlevel_ops {
    var ops = fuse_lowlevel_ops()
    ops.`init` = { userdata, conn in
      guard let userdata, let conn else { return }
      // Readdirplus where attributes are wanted (the kernel's choice: the
      // first call of a pass, and the next after a lookup or stat in the
      // directory), so `ls -l` needs no lookups; plain readdir for `ls -f`
      // and `find`, which make the kernel and the daemon hold nothing.
      if conn.pointee.capable & UInt32(FUSE_CAP_READDIRPLUS) != 0 {
        conn.pointee.want |= UInt32(FUSE_CAP_READDIRPLUS)
        if conn.pointee.capable & UInt32(FUSE_CAP_READDIRPLUS_AUTO) != 0 {
          conn.pointee.want |= UInt32(FUSE_CAP_READDIRPLUS_AUTO)
        }
      }
      conn.pointee.want |= UInt32(FUSE_CAP_ASYNC_READ)
      // open(O_TRUNC) arrives as one open with the flag, not open plus a truncate.
      if conn.pointee.capable & UInt32(FUSE_CAP_ATOMIC_O_TRUNC) != 0 {
        conn.pointee.want |= UInt32(FUSE_CAP_ATOMIC_O_TRUNC)
      }
      let session = Unmanaged<FUSESession>.fromOpaque(userdata).takeUnretainedValue()
      session.fileSystem.mounted(kernel: KernelCache(session: session))
    }
    ops.lookup = { req, parent, name in
      let arrival = Arrival(.lookup, parent: parent)
      guard let name = utf8Name(req, name) else { return answer(req, arrival, error: ENOENT) }
      serveEntry(req, arrival) { try await $0.lookup(parent: parent, name: name) }
    }
    ops.forget = { req, inode, count in
      let arrival = Arrival(.forget, inode: inode)
      let current = session(req)
      current.fileSystem.forget(inode: inode, count: count)
      fuse_reply_none(req)
      current.answered(arrival)
    }
    ops.forget_multi = { req, count, forgets in
      let arrival = Arrival(.forgetMulti)
      let current = session(req)
      for item in UnsafeBufferPointer(start: forgets, count: count) {
        current.fileSystem.forget(inode: item.ino, count: item.nlookup)
      }
      fuse_reply_none(req)
      current.answered(arrival)
    }
    ops.getattr = { req, inode, _ in
      let arrival = Arrival(.getattr, inode: inode)
      let fs = session(req).fileSystem
      session(req).serve(req, arrival, { try await fs.getattr(inode: inode) }) { request, answer in
        var st = answer.0.stat
        fuse_reply_attr(request.raw, &st, answer.timeout)
      }
    }
    ops.readlink = { req, inode in
      let fs = session(req).fileSystem
      session(req).serve(req, Arrival(.readlink, inode: inode), { try await fs.readlink(inode: inode) }) {
        request, target in
        // A C string: the target's bytes and a NUL.
        _ = (target + [0]).withUnsafeBufferPointer { bytes in
          bytes.withMemoryRebound(to: CChar.self) { fuse_reply_readlink(request.raw, $0.baseAddress) }
        }
      }
    }
    ops.opendir = { req, inode, _ in
      let arrival = Arrival(.opendir, inode: inode)
      let fs = session(req).fileSystem
      session(req).serve(req, arrival, { try await fs.opendir(inode: inode) }) { request, result in
        var info = fuse_file_info()
        info.fh = result.handle
        info.keep_cache = result.keepCache ? 1 : 0
        info.cache_readdir = result.cacheDirectory ? 1 : 0
        if fuse_reply_open(request.raw, &info) != 0 {
          fs.replyFailed(.opendir(inode: inode, handle: result.handle))
        }
      }
    }
    ops.readdir = { req, inode, size, offset, info in
      let arrival = Arrival(.readdir, inode: inode, size: size)
      guard let handle = fileHandle(req, info, arrival), let offset = checkedOffset(req, offset, arrival)
      else { return }
      serveReaddir(req, arrival, inode: inode, size: size, offset: offset, handle: handle, plus: false)
    }
    ops.readdirplus = { req, inode, size, offset, info in
      let arrival = Arrival(.readdirplus, inode: inode, size: size)
      guard let handle = fileHandle(req, info, arrival), let offset = checkedOffset(req, offset, arrival)
      else { return }
      serveReaddir(req, arrival, inode: inode, size: size, offset: offset, handle: handle, plus: true)
    }
    ops.releasedir = { req, inode, info in
      let arrival = Arrival(.releasedir, inode: inode)
      guard let handle = fileHandle(req, info, arrival) else { return }
      session(req).fileSystem.releasedir(inode: inode, handle: handle)
      answer(req, arrival, error: 0)
    }
    ops.open = { req, inode, info in
      let arrival = Arrival(.open, inode: inode)
      guard let info else { return missing(req, arrival, "file info") }
      let flags = info.pointee.flags
      let fs = session(req).fileSystem
      session(req).serve(req, arrival, { try await fs.open(inode: inode, flags: flags) }) { request, result in
        var reply = fuse_file_info()
        reply.fh = result.handle
        reply.keep_cache = result.keepCache ? 1 : 0
        reply.direct_io = result.directIO ? 1 : 0
        if fuse_reply_open(request.raw, &reply) != 0 {
          fs.replyFailed(.open(inode: inode, handle: result.handle))
        }
      }
    }
    ops.read = { req, inode, size, offset, info in
      let arrival = Arrival(.read, inode: inode, size: size)
      guard let req, let handle = fileHandle(req, info, arrival),
        let offset = checkedOffset(req, offset, arrival)
      else { return }
      let current = session(req)
      let fs = current.fileSystem
      let inline = fs.readInline(inode: inode, handle: handle, offset: offset, size: size)
      current.serve(req, arrival, inline: inline.map { .success($0) }, reply: replyData) {
        { try await fs.read(inode: inode, handle: handle, offset: offset, size: size) }
      }
    }
    ops.release = { req, inode, info in
      let arrival = Arrival(.release, inode: inode)
      guard let handle = fileHandle(req, info, arrival) else { return }
      session(req).fileSystem.release(inode: inode, handle: handle)
      answer(req, arrival, error: 0)
    }
    ops.statfs = { req, _ in
      let arrival = Arrival(.statfs)
      let current = session(req)
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
      current.answered(arrival)
    }
    ops.getxattr = { req, inode, name, size in
      let arrival = Arrival(.getxattr, inode: inode)
      guard let req else { return }
      guard let name = name.map({ String(cString: $0) }) else { return missing(req, arrival, "name") }
      let current = session(req)
      let fs = current.fileSystem
      let inline = fs.getxattrInline(inode: inode, name: name)
      current.serve(req, arrival, inline: inline, reply: { replyXattr($0, .success($1), size: size) }) {
        { try await fs.getxattr(inode: inode, name: name) }
      }
    }
    ops.listxattr = { req, inode, size in
      let arrival = Arrival(.listxattr, inode: inode)
      guard let req else { return }
      let current = session(req)
      let fs = current.fileSystem
      let inline = fs.listxattrInline(inode: inode)
      current.serve(
        req, arrival, inline: inline, reply: { replyXattr($0, .success(packNames($1)), size: size) }
      ) {
        { try await fs.listxattr(inode: inode) }
      }
    }
    ops.setxattr = { req, inode, name, value, size, flags in
      let arrival = Arrival(.setxattr, inode: inode)
      guard let name = name.map({ String(cString: $0) }) else { return missing(req, arrival, "name") }
      let bytes =
        size == 0 || value == nil
        ? [] : Array(UnsafeRawBufferPointer(start: value, count: size).bindMemory(to: UInt8.self))
      serveEmpty(req, arrival) {
        try await $0.setxattr(inode: inode, name: name, value: bytes, flags: XattrFlags(rawValue: flags))
      }
    }
    ops.removexattr = { req, inode, name in
      let arrival = Arrival(.removexattr, inode: inode)
      guard let name = name.map({ String(cString: $0) }) else { return missing(req, arrival, "name") }
      serveEmpty(req, arrival) { try await $0.removexattr(inode: inode, name: name) }
    }
    ops.create = { req, parent, name, mode, info in
      let arrival = Arrival(.create, parent: parent)
      guard let name = utf8Name(req, name) else { return answer(req, arrival, error: EINVAL) }
      guard let info else { return missing(req, arrival, "file info") }
      let flags = info.pointee.flags
      let fs = session(req).fileSystem
      session(req).serve(
        req, arrival, { try await fs.create(parent: parent, name: name, mode: UInt32(mode), flags: flags) }
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
      let arrival = Arrival(.write, inode: inode, size: size)
      guard let req, let handle = fileHandle(req, info, arrival),
        let offset = checkedOffset(req, offset, arrival)
      else { return }
      guard buf != nil || size == 0 else { return missing(req, arrival, "data") }
      let current = session(req)
      let fs = current.fileSystem
      let bytes = UnsafeRawBufferPointer(start: buf, count: size)
      let inline = fs.writeInline(inode: inode, handle: handle, offset: offset, data: bytes)
      current.serve(req, arrival, inline: inline, reply: replyWritten) {
        // Only a write served later copies the bytes: libfuse's buffer lasts as long as this callback.
        let data = Array(bytes.bindMemory(to: UInt8.self))
        return { try await fs.write(inode: inode, handle: handle, offset: offset, data: data) }
      }
    }
    ops.flush = { req, inode, info in
      let arrival = Arrival(.flush, inode: inode)
      guard let handle = fileHandle(req, info, arrival) else { return }
      serveEmpty(req, arrival) { try await $0.flush(inode: inode, handle: handle) }
    }
    ops.fsync = { req, inode, dataOnly, info in
      let arrival = Arrival(.fsync, inode: inode)
      guard let handle = fileHandle(req, info, arrival) else { return }
      serveEmpty(req, arrival) { try await $0.fsync(inode: inode, handle: handle, dataOnly: dataOnly != 0) }
    }
    ops.setattr = { req, inode, attr, toSet, info in
      let arrival = Arrival(.setattr, inode: inode)
      guard let attr else { return missing(req, arrival, "attributes") }
      // off_t: a size past Int64.max arrives negative. Never a truncation to 0.
      if toSet & FUSE_SET_ATTR_SIZE != 0 && attr.pointee.st_size < 0 {
        let size = UInt64(bitPattern: Int64(attr.pointee.st_size))
        session(req).logger.notice("truncate of inode \(inode) to \(size) bytes: past the largest file size")
        return answer(req, arrival, error: EINVAL)
      }
      let changes = AttributeChanges(attr.pointee, toSet: toSet)
      let handle = info.map { $0.pointee.fh }
      let fs = session(req).fileSystem
      session(req).serve(
        req, arrival, { try await fs.setattr(inode: inode, handle: handle, changes: changes) }
      ) {
        request, answer in
        var st = answer.0.stat
        fuse_reply_attr(request.raw, &st, answer.timeout)
      }
    }
    ops.mkdir = { req, parent, name, mode in
      let arrival = Arrival(.mkdir, parent: parent)
      guard let name = utf8Name(req, name) else { return answer(req, arrival, error: EINVAL) }
      serveEntry(req, arrival) { try await $0.mkdir(parent: parent, name: name, mode: UInt32(mode)) }
    }
    ops.unlink = { req, parent, name in
      let arrival = Arrival(.unlink, parent: parent)
      guard let name = utf8Name(req, name) else { return answer(req, arrival, error: ENOENT) }
      serveEmpty(req, arrival) { try await $0.unlink(parent: parent, name: name) }
    }
    ops.rmdir = { req, parent, name in
      let arrival = Arrival(.rmdir, parent: parent)
      guard let name = utf8Name(req, name) else { return answer(req, arrival, error: ENOENT) }
      serveEmpty(req, arrival) { try await $0.rmdir(parent: parent, name: name) }
    }
    ops.rename = { req, parent, name, newParent, newName, flags in
      let arrival = Arrival(.rename, parent: parent)
      guard let name = utf8Name(req, name) else { return answer(req, arrival, error: ENOENT) }
      guard let newName = utf8Name(req, newName) else { return answer(req, arrival, error: EINVAL) }
      serveEmpty(req, arrival) {
        try await $0.rename(
          parent: parent, name: name, newParent: newParent, newName: newName,
          flags: RenameFlags(rawValue: flags))
      }
    }
    ops.symlink = { req, target, parent, name in
      let arrival = Arrival(.symlink, parent: parent)
      guard let name = utf8Name(req, name) else { return answer(req, arrival, error: EINVAL) }
      guard let target else { return missing(req, arrival, "symlink target") }
      let bytes = Array(
        UnsafeRawBufferPointer(start: target, count: strlen(target)).bindMemory(to: UInt8.self))
      serveEntry(req, arrival) { try await $0.symlink(parent: parent, name: name, target: bytes) }
    }
    // Objects have no hard links (docs/SEMANTICS.md): say
    // so plainly rather than ENOSYS, which some kernels remember for the mount.
    ops.link = { req, _, _, _ in answer(req, Arrival(.link), error: EPERM) }
    // Regular files, FIFOs, sockets and (as root, the kernel checks) devices;
    // the filesystem decides which it stores.
    ops.mknod = { req, parent, name, mode, device in
      let arrival = Arrival(.mknod, parent: parent)
      guard let name = utf8Name(req, name) else { return answer(req, arrival, error: EINVAL) }
      serveEntry(req, arrival) {
        try await $0.mknod(parent: parent, name: name, mode: UInt32(mode), device: UInt64(device))
      }
    }
    return ops
  }
}

extension FUSESession {
  /// Answers on the loop thread what the filesystem answered at once
  /// (`inline`: cheap, local work), else serves the operation `later` makes,
  /// as ``serveWithStatus(_:_:_:reply:)`` does. `reply` answers a value
  /// either way and returns the errno it answered, or 0; a failure is
  /// answered as its errno.
  fileprivate func serve<T: Sendable>(
    _ req: fuse_req_t, _ arrival: Arrival, inline: Result<T, Errno>?,
    reply: @escaping @Sendable (fuse_req_t, T) -> Int32, later: () -> @Sendable () async throws -> T
  ) {
    switch inline {
    case nil: serveWithStatus(req, arrival, later()) { request, value in reply(request.raw, value) }
    case .success(let value):
      answered(arrival, error: reply(req, value), bytes: replyBytes(Result<T, Errno>.success(value)))
    case .failure(let errno):
      fuse_reply_err(req, errno.code)
      answered(arrival, error: errno.code)
    }
  }
}

/// Serves a request answered with success alone (setxattr, removexattr,
/// flush, fsync, unlink, rmdir, rename).
private func serveEmpty(
  _ req: fuse_req_t?, _ arrival: Arrival,
  _ operation: @escaping @Sendable (any FileSystem) async throws -> Void
) {
  let fs = session(req).fileSystem
  session(req).serve(req, arrival, { try await operation(fs) }) { request, _ in fuse_reply_err(request.raw, 0)
  }
}

/// Serves a request answered with an entry (lookup, mkdir, mknod, symlink):
/// an entry the kernel did not take is a lookup to undo.
private func serveEntry(
  _ req: fuse_req_t?, _ arrival: Arrival,
  _ operation: @escaping @Sendable (any FileSystem) async throws -> Entry
) {
  let fs = session(req).fileSystem
  session(req).serve(req, arrival, { try await operation(fs) }) { request, entry in
    var param = entry.parameters
    if fuse_reply_entry(request.raw, &param) != 0 { fs.replyFailed(.lookup(inode: param.ino)) }
  }
}

private func serveReaddir(
  _ req: fuse_req_t?, _ arrival: Arrival, inode: UInt64, size: Int, offset: UInt64, handle: UInt64, plus: Bool
) {
  guard let req else { return }
  let fs = session(req).fileSystem
  let buffer = SendableBuffer(FUSEDirectoryBuffer(request: req, capacity: size, plus: plus))
  session(req).serve(
    req, arrival,
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

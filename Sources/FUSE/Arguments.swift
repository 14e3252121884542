import CFuse

#if canImport(Glibc)
  import Glibc
#endif

// What a callback takes out of libfuse's arguments, and its answers on the
// loop thread: a missing or unusable argument is answered here, and counted,
// never trapped on.

/// A name from the kernel, if it is UTF-8. Object names are UTF-8: a name
/// that is not can be no object's, and `String(cString:)` would repair it to
/// U+FFFD and so reach (or create) another object.
func utf8Name(_ req: fuse_req_t?, _ raw: UnsafePointer<CChar>?) -> String? {
  guard let raw else {
    session(req).logger.error("libfuse passed no name")
    return nil
  }
  if let name = String(validatingCString: raw) { return name }
  session(req).logger.info("refusing a name that is not UTF-8: \(String(cString: raw).debugDescription)")
  return nil
}

func session(_ req: fuse_req_t?) -> FUSESession {
  Unmanaged<FUSESession>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
}

/// Answers `req` on the loop thread with `code` (0: success) and counts it.
/// The session is taken first: the reply frees the request.
func answer(_ req: fuse_req_t?, _ arrival: Arrival, error code: Int32) {
  let current = session(req)
  fuse_reply_err(req, code)
  current.answered(arrival, error: code)
}

/// Something libfuse always passes is missing: EIO and a log line, never a trap.
func missing(_ req: fuse_req_t?, _ arrival: Arrival, _ what: String) {
  session(req).logger.error("libfuse passed no \(what) for \(arrival.operation.rawValue)")
  answer(req, arrival, error: EIO)
}

/// The handle of an open file or directory; nil (answered) without one.
func fileHandle(_ req: fuse_req_t?, _ info: UnsafeMutablePointer<fuse_file_info>?, _ arrival: Arrival)
  -> UInt64?
{
  guard let info else {
    missing(req, arrival, "file info")
    return nil
  }
  return info.pointee.fh
}

/// A file offset as the filesystem takes it; nil (answered EINVAL) when
/// negative, as a 64-bit offset past Int64.max arrives in an off_t.
func checkedOffset(_ req: fuse_req_t?, _ offset: off_t, _ arrival: Arrival) -> UInt64? {
  guard offset < 0 else { return UInt64(offset) }
  session(req).logger.notice(
    "\(arrival.operation.rawValue) at offset \(UInt64(bitPattern: Int64(offset))): past the largest file offset"
  )
  answer(req, arrival, error: EINVAL)
  return nil
}

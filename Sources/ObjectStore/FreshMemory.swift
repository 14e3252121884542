import NIOCore

#if canImport(Glibc)
  import Glibc
#endif

extension ByteBuffer {
  /// Bytes of fresh room worth prefaulting in one call: below this the
  /// allocator's own reuse usually has the pages already.
  public static let prefaultThreshold = 1 << 20

  /// Makes the pages of the room not yet written resident in one
  /// `madvise(MADV_POPULATE_WRITE)`, before they are filled. A large answer
  /// lands in memory fresh from the kernel, and faulting it in a page at a
  /// time as it was copied took 14% of a cold read's daemon samples
  /// (BENCHMARKS.md, issue 41); one call does the same work without a trap
  /// for each page (faults and advice together: 16% → 12%).
  /// Best effort: a kernel without the advice (before Linux 5.14) faults the
  /// pages in as they are written, as before.
  public mutating func prefaultWritableBytes() {
    #if os(Linux)
      guard writableBytes >= Self.prefaultThreshold else { return }
      withUnsafeMutableWritableBytes { room in
        guard let base = room.baseAddress else { return }
        let page = UInt(sysconf(Int32(_SC_PAGESIZE)))
        let start = (UInt(bitPattern: base) + page - 1) & ~(page - 1)
        let end = (UInt(bitPattern: base) + UInt(room.count)) & ~(page - 1)
        guard end > start, let first = UnsafeMutableRawPointer(bitPattern: start) else { return }
        _ = madvise(first, Int(end - start), MADV_POPULATE_WRITE)
      }
    #endif
  }
}

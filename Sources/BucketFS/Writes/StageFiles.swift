import CoreMetrics
import IOThreads
import NIOCore
import ObjectStore
import Synchronization

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

#if canImport(Glibc)
  import Glibc
#endif

/// A local failure of the staging disk (ENOSPC, EIO, …), passed to the
/// caller as its own errno.
struct StageFailure: Error, Equatable {
  let code: Int32
}

/// The calls that change the bytes of a stage file. ``LocalStageFiles`` makes
/// them; tests put in one that fails as a full or broken disk would.
protocol StageFiles: Sendable {
  /// Writes all of `data` at `offset` of `fd`: 0, or the errno of the failure.
  func write(_ fd: Int32, _ data: UnsafeRawBufferPointer, at offset: UInt64) -> Int32
  /// Sets the size of `fd`: 0, or the errno of the failure.
  func truncate(_ fd: Int32, to size: UInt64) -> Int32
  /// Frees the disk under `range` of `fd` (a hole; the size stays): 0, or the errno.
  func punch(_ fd: Int32, _ range: Range<Int64>) -> Int32
}

extension StageFiles {
  func punch(_ fd: Int32, _ range: Range<Int64>) -> Int32 {
    guard let fallocate = Self.fallocate else { return EOPNOTSUPP }
    // FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
    while fallocate(fd, 0x02 | 0x01, off_t(range.lowerBound), off_t(range.count)) != 0 {
      if errno != EINTR { return errno }
    }
    return 0
  }

  /// glibc's fallocate(2), which its Swift module leaves out (it is a GNU extension).
  private static var fallocate: (@convention(c) (Int32, Int32, off_t, off_t) -> Int32)? {
    guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "fallocate") else { return nil }
    return unsafeBitCast(symbol, to: (@convention(c) (Int32, Int32, off_t, off_t) -> Int32).self)
  }
}

/// `pwrite` and `ftruncate`, retried after EINTR.
struct LocalStageFiles: StageFiles {
  func write(_ fd: Int32, _ data: UnsafeRawBufferPointer, at offset: UInt64) -> Int32 {
    var done = 0
    while done < data.count {
      let n = pwrite(fd, data.baseAddress! + done, data.count - done, off_t(offset) + off_t(done))
      if n < 0 {
        if errno == EINTR { continue }
        return errno
      }
      done += n
    }
    return 0
  }

  func truncate(_ fd: Int32, to size: UInt64) -> Int32 {
    while ftruncate(fd, off_t(size)) != 0 {
      if errno != EINTR { return errno }
    }
    return 0
  }
}

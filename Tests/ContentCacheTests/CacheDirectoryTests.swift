import XCTest

@testable import ContentCache

#if canImport(Glibc)
  import Glibc
#endif

/// Who holds a bucket's cache directory: a live mount is not waited for,
/// one that is exiting (its mountpoint gone) is, up to the patience.
final class CacheDirectoryTests: XCTestCase {
  private func take(
    _ base: String, patience: Duration = .seconds(2), at mountpoint: String?, mounted: Set<String> = []
  ) throws(CacheDirectory.Failure) -> CacheDirectory {
    try CacheDirectory(
      cacheDirectory: base, bucket: "b", patience: patience, mountpoint: mountpoint,
      isMounted: { mounted.contains($0) })
  }

  private func seconds(_ body: () throws -> Void) rethrows -> Double {
    let start = ContinuousClock.now
    try body()
    return (ContinuousClock.now - start) / .seconds(1)
  }

  private func assertInUse(_ body: () throws(CacheDirectory.Failure) -> CacheDirectory) {
    do {
      _ = try body()
      XCTFail("a second holder took the directory")
    } catch {
      guard case .inUse = error else { return XCTFail("expected in use, got \(error)") }
    }
  }

  func testASecondMountGivesUpAtOnceWhileTheHolderIsMounted() throws {
    let base = temporaryDirectory(self)
    let first = try take(base, at: "/mnt/one")
    let waited = seconds {
      assertInUse { () throws(CacheDirectory.Failure) in
        try take(base, at: "/mnt/two", mounted: ["/mnt/one"])
      }
    }
    XCTAssertLessThan(waited, 1, "no wait for a live mount")
    withExtendedLifetime(first) {}
  }

  func testAnExitingHolderIsWaitedForUpToThePatience() throws {
    let base = temporaryDirectory(self)
    let first = try take(base, at: "/mnt/one")
    // Its mountpoint is gone (unmounted, the daemon still exiting): the new mount waits.
    let waited = seconds {
      assertInUse { () throws(CacheDirectory.Failure) in
        try take(base, patience: .milliseconds(500), at: "/mnt/one")
      }
    }
    XCTAssertGreaterThanOrEqual(waited, 0.45, "waited for the patience")
    withExtendedLifetime(first) {}
  }

  func testAHolderThatNamedNoMountpointIsWaitedFor() throws {
    let base = temporaryDirectory(self)
    let first = try take(base, at: nil)
    let waited = seconds {
      assertInUse { () throws(CacheDirectory.Failure) in
        try take(base, patience: .milliseconds(500), at: "/mnt/two", mounted: ["/mnt/one"])
      }
    }
    XCTAssertGreaterThanOrEqual(waited, 0.45, "an unknown holder may be exiting")
    withExtendedLifetime(first) {}
  }

  func testTheDirectoryIsTakenOnceItsHolderLetsGo() throws {
    let base = temporaryDirectory(self)
    var first: CacheDirectory? = try take(base, at: "/mnt/one")
    XCTAssertNotNil(first)
    first = nil
    let second = try take(base, at: "/mnt/two", mounted: ["/mnt/one"])
    XCTAssertTrue(second.path.hasPrefix(base))
  }
}

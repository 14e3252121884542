import AsyncHTTPClient
import CloudStorage
import FUSE
import ObjectStore
import ServiceAccess
import StorageFake
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// Writes over the real HTTP client over the fake service's exact semantics:
/// what fake-gcs-server cannot show end to end (it ignores ifGenerationMatch
/// on resumable uploads), and upload faults at the HTTP level.
final class WriteHTTPTests: XCTestCase {
  var server: FakeStorageServer!
  var clients: [HTTPClient] = []
  var fs: BucketFileSystem!

  override func setUp() async throws {
    server = FakeStorageServer(bucket: "demo")
    try await server.start()
    // A deadline no loaded machine reaches with 9 MiB in a debug build; the
    // test of giving up sets its own.
    fs = try makeFileSystem(deadline: 60)
  }

  private func makeFileSystem(deadline: Double, uploads: UploadPolicy = UploadPolicy()) throws
    -> BucketFileSystem
  {
    var retry = RetryPolicy()
    retry.initialBackoff = 0.01
    retry.maxBackoff = 0.05
    retry.attemptTimeout = deadline
    retry.deadline = deadline
    let http = CloudStorageClient.makeHTTPClient(retry: retry)
    clients.append(http)
    let client = CloudStorageClient(
      bucket: "demo", endpoint: try Endpoint(server.endpoint), http: http, tokens: nil, retry: retry,
      uploads: uploads, logger: quietLogger)
    return makeWritingFileSystem(client)
  }

  override func tearDown() async throws {
    for http in clients { try await http.shutdown() }
    try await server?.stop()
  }

  /// 9 MiB: above the 8 MiB multipart threshold, so a resumable session.
  private let large = (0..<(9 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 12) }

  private func writeLarge(_ inode: UInt64, _ handle: UInt64) async throws {
    var offset = 0
    while offset < large.count {
      let end = min(offset + (1 << 20), large.count)
      let written = try await fs.writeBytes(inode, handle, at: UInt64(offset), Array(large[offset..<end]))
      XCTAssertEqual(written, end - offset)
      offset = end
    }
  }

  /// Opens big.bin for overwrite, writes 9 MiB, lets another writer store
  /// a generation, and checks that the flush is ESTALE.
  private func overwriteAfterAnotherWriter() async throws -> (UInt64, UInt64) {
    server.store.put("big.bin", data: [1, 2, 3])
    let inode = try await fs.inode(at: "big.bin")
    let handle = try await fs.open(inode: inode, flags: O_WRONLY | O_TRUNC).handle
    try await writeLarge(inode, handle)
    server.store.put("big.bin", data: bytes("theirs"))
    await XCTAssertErrno(.stale) { try await self.fs.flush(inode: inode, handle: handle) }
    return (inode, handle)
  }

  func testAResumableOverwriteNeverReplacesAGenerationItWasNotOpenedOn() async throws {
    let (inode, handle) = try await overwriteAfterAnotherWriter()
    XCTAssertEqual(server.requests(.uploadSession).count, 1, "resumable, where the emulator would not refuse")
    XCTAssertEqual(text(server.store.data("big.bin")), "theirs")
    fs.release(inode: inode, handle: handle)
  }

  func testANewLargeFileGoesUpResumableAndByteExactThroughTransientFaults() async throws {
    let (inode, handle) = try await fs.createFile("new.bin")
    try await writeLarge(inode, handle)
    server.injectFaults([.status(503), .resetConnection], for: .uploadChunk)
    try await fs.close(inode, handle)
    XCTAssertEqual(server.requests(.uploadSession).count, 1, "one resumable session")
    XCTAssertGreaterThanOrEqual(
      server.requests(.uploadChunk).count, 3, "two faulted chunk requests, then the rest")
    XCTAssertEqual(server.store.data("new.bin"), large)
    XCTAssertEqual(server.store.object("new.bin")?.contentType, "application/octet-stream")
  }

  func testAPersistentFaultFailsCloseWithEIOAndStoresNothing() async throws {
    fs = try makeFileSystem(deadline: 3)
    let (inode, handle) = try await fs.createFile("small.txt")
    try await fs.writeText(inode, handle, at: 0, "payload")
    server.injectFaults(Array(repeating: .status(503), count: 200), for: .upload)
    let started = BucketFileSystem.monotonicSeconds()
    await XCTAssertErrno(.io) { try await self.fs.flush(inode: inode, handle: handle) }
    XCTAssertLessThan(BucketFileSystem.monotonicSeconds() - started, 10, "within the retry deadline")
    XCTAssertNil(server.store.object("small.txt"))
    XCTAssertGreaterThan(server.requests(.upload).count, 1, "retried before giving up")
    fs.release(inode: inode, handle: handle)
  }

  /// Composite above 1 MiB in 1 MiB parts: the 9 MiB file is 9 parts and one compose.
  private func compositeFileSystem() throws -> BucketFileSystem {
    try makeFileSystem(
      deadline: 60,
      uploads: try UploadPolicy(
        threshold: 8 << 20, chunkSize: 8 << 20, compositeThreshold: 1 << 20, partSize: 1 << 20))
  }

  private var parts: [String] { server.store.names.filter { $0.hasPrefix(UploadPolicy.partDirectory) } }

  func testACompositeOverwriteCarriesTheMetadataInOneCompose() async throws {
    fs = try compositeFileSystem()
    let old = server.store.put(
      "big.bin", data: [1, 2, 3], contentType: "text/x-big", cacheControl: "no-cache",
      custom: ["firebaseStorageDownloadTokens": "tok", "k": "v"])
    let inode = try await fs.inode(at: "big.bin")
    let handle = try await fs.open(inode: inode, flags: O_WRONLY | O_TRUNC).handle
    try await writeLarge(inode, handle)
    try await fs.close(inode, handle)
    // Written in order, it streams: its parts as written (each in one request,
    // at most the upload threshold), then the object's one compose.
    let composes = server.requests(.compose).filter { $0.objectName == "big.bin" }
    XCTAssertEqual(composes.count, 1)
    XCTAssertEqual(composes.first?.query["ifGenerationMatch"], String(old.generation))
    XCTAssertEqual(server.requests(.uploadSession).count, 0)
    XCTAssertEqual(server.requests(.upload).count, 9)
    XCTAssertEqual(server.store.data("big.bin"), large)
    let meta = try XCTUnwrap(server.store.object("big.bin"))
    XCTAssertEqual(meta.contentType, "text/x-big")
    XCTAssertEqual(meta.cacheControl, "no-cache")
    XCTAssertEqual(meta.custom["firebaseStorageDownloadTokens"], "tok")
    XCTAssertEqual(meta.custom["k"], "v")
    XCTAssertNil(meta.md5Hash)
    XCTAssertEqual(parts, [])
  }

  func testACompositeOverwriteOfAChangedFileIsStaleAndLeavesNoParts() async throws {
    fs = try compositeFileSystem()
    let (inode, handle) = try await overwriteAfterAnotherWriter()
    XCTAssertEqual(server.requests(.compose).filter { $0.objectName == "big.bin" }.count, 1)
    XCTAssertEqual(text(server.store.data("big.bin")), "theirs")
    XCTAssertEqual(parts, [])
    fs.release(inode: inode, handle: handle)
  }
}

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

/// The filesystem over the real HTTP client over the fake service, with
/// faults injected at the HTTP level: transient ones are retried away,
/// persistent ones end in EIO within the deadline.
final class FaultTests: XCTestCase {
  var server: FakeStorageServer!
  var http: HTTPClient!
  var fs: BucketFileSystem!

  override func setUp() async throws {
    server = FakeStorageServer(bucket: "demo")
    try await server.start()
    var retry = RetryPolicy()
    retry.initialBackoff = 0.01
    retry.maxBackoff = 0.05
    retry.attemptTimeout = 1
    retry.deadline = 2
    http = CloudStorageClient.makeHTTPClient(retry: retry)
    let client = CloudStorageClient(
      bucket: "demo", endpoint: try Endpoint(server.endpoint), http: http, tokens: nil, retry: retry,
      logger: quietLogger)
    for i in 0..<5 { server.store.put("d/f\(i)", data: Array(repeating: UInt8(i), count: 1000)) }
    fs = makeFileSystem(client, pageSize: 2)
  }

  override func tearDown() async throws {
    try await http?.shutdown()
    try await server?.stop()
  }

  func testTransientFaultsAreRetried() async throws {
    let dir = try await fs.inode(at: "d")
    server.injectFaults([.status(503), .status(502), .resetConnection], for: .list)
    await XCTAssertEqualAsync(try await fs.names(of: dir), ["f0", "f1", "f2", "f3", "f4"])

    server.injectFaults([.status(429), .status(500)], for: .metadata)
    server.injectFaults([.status(503)], for: .list)
    let inode = try await fs.inode(at: "d/f3")
    let opened = try await fs.open(inode: inode, flags: O_RDONLY)
    server.injectFaults([.status(503), .resetConnection], for: .media)
    await XCTAssertEqualAsync(
      try await fs.read(inode: inode, handle: opened.handle, offset: 10, size: 5).array,
      Array(repeating: 3, count: 5))

    server.injectFaults([.status(503)], for: .patch)
    try await fs.setxattr(inode: inode, name: "user.custom.k", value: Array("v".utf8), flags: [])
    XCTAssertEqual(server.store.object("d/f3")?.custom["k"], "v")
  }

  func testPersistentFaultsGiveEIOWithinTheDeadline() async throws {
    let dir = try await fs.inode(at: "d")
    let inode = try await fs.inode(at: "d/f1")
    server.injectFaults(Array(repeating: .status(503), count: 1000), for: .list)
    let start = ContinuousClock.now
    await XCTAssertErrno(.io) { _ = try await self.fs.names(of: dir) }
    XCTAssertLessThan(ContinuousClock.now - start, .seconds(4))
    server.clearFaults()

    // A stalled server ends at the deadline too, and the mount stays usable.
    server.injectFaults(Array(repeating: .stall(.seconds(30)), count: 1000), for: .media)
    let opened = try await fs.open(inode: inode, flags: O_RDONLY)
    let stalled = ContinuousClock.now
    await XCTAssertErrno(.io) {
      _ = try await self.fs.read(inode: inode, handle: opened.handle, offset: 0, size: 10)
    }
    XCTAssertLessThan(ContinuousClock.now - stalled, .seconds(5))
    server.clearFaults()
    await XCTAssertEqualAsync(
      try await fs.read(inode: inode, handle: opened.handle, offset: 0, size: 10).array,
      Array(repeating: 1, count: 10))
    await XCTAssertEqualAsync(try await fs.names(of: dir).count, 5)
  }

  func testAccessDeniedAndMissingBucket() async throws {
    server.injectFaults([.status(403)], for: .list)
    await XCTAssertErrno(.accessDenied) { _ = try await self.fs.names(of: 1) }
  }

  // MARK: Malformed answers: an errno and a log line, never a crash or a hang

  func testMalformedMetadataOfALookupIsEIO() async throws {
    let answers = [
      #"{"name":"d/f1","generation":"7","metageneration":"1","size":"1180591620717411303424"}"#,  // 2^70
      #"{"name":"d/f1","generation":"9223372036854775808","metageneration":"1","size":"1000"}"#,
      #"{"name":"d/f1","generation":"7","metageneration":"1","size":"-1000"}"#,
      #"{"name":"d/f1","generation":"7","metageneration":"1"}"#,
      #"{"name":"d/f1","generation":7,"metageneration":"1","size":"1000","contentType":1}"#,
      #"{"name":"d/f1","generation":"7","metageneration":"1","size":"1"#,
    ]
    let dir = try await fs.inode(at: "d")
    // The lookup's one list call shows the object (docs/SEMANTICS.md#listing-lookup).
    for answer in answers {
      server.injectFaults([.raw(.json(#"{"items":["# + answer + "]}"))]) {
        $0.kind == .list && $0.query["prefix"] == "d/f1"
      }
      await XCTAssertErrno(.io) { _ = try await self.fs.lookup(parent: dir, name: "f1") }
    }
    await XCTAssertEqualAsync(try await fs.lookup(parent: dir, name: "f1").attributes?.size, 1000)
  }

  func testAListingWithAMalformedItemIsEIO() async throws {
    let items = [
      #"{"name":"d/f0","generation":"7","metageneration":"1","size":"-1"}"#,
      #"{"name":"d/f0","generation":"7","metageneration":"1","size":"1180591620717411303424"}"#,
      #"{"name":"d/f0","generation":"7","metageneration":"1"}"#,
      #"{"name":"d/f0","generation":"7","metageneration":"1","size":"1","metadata":{"k":["v"]}}"#,
      #"{"name":"d/f0","generation":"7","metageneration":"1","size":"1","acl":"#
        + String(repeating: "[", count: 200_000) + String(repeating: "]", count: 200_000) + "}",
    ]
    let dir = try await fs.inode(at: "d")
    for item in items {
      server.injectFaults([.raw(.json(#"{"items":["# + item + "]}"))]) {
        $0.kind == .list && $0.query["prefix"] == "d/" && $0.query["delimiter"] == "/"
      }
      await XCTAssertErrno(.io) { _ = try await self.fs.names(of: dir) }
    }
    await XCTAssertEqualAsync(try await fs.names(of: dir), ["f0", "f1", "f2", "f3", "f4"])
  }

  /// Page tokens that come back (the same one, or a cycle) would list the
  /// same pages forever: EIO after a few requests, and the next listing works.
  func testAListingWhoseTokensLoopIsEIO() async throws {
    let dir = try await fs.inode(at: "d")
    func page(_ names: [String], next: String) -> FakeStorageServer.ScriptedResponse {
      let items = names.map { #"{"name":"d/\#($0)","generation":"7","metageneration":"1","size":"1000"}"# }
      return .raw(.json(#"{"items":[\#(items.joined(separator: ","))],"nextPageToken":"\#(next)"}"#))
    }
    let cycles: [[String?: FakeStorageServer.ScriptedResponse]] = [
      [nil: page(["f0", "f1"], next: "A"), "A": page(["f2"], next: "A")],
      [
        nil: page(["f0", "f1"], next: "A"), "A": page(["f2", "f3"], next: "B"), "B": page(["f4"], next: "A"),
      ],
    ]
    for cycle in cycles {
      server.resetRequests()
      for (token, answer) in cycle {
        server.injectFaults(Array(repeating: answer, count: 500)) {
          $0.kind == .list && $0.query["prefix"] == "d/" && $0.query["delimiter"] == "/"
            && $0.query["pageToken"] == token
        }
      }
      await XCTAssertErrno(.io) { _ = try await self.fs.names(of: dir) }
      XCTAssertLessThan(server.requests(.list).count, 10, "stopped at the first token that came back")
      server.clearFaults()
      await XCTAssertEqualAsync(try await fs.names(of: dir), ["f0", "f1", "f2", "f3", "f4"])
    }
  }

  /// A 206 that cannot be checked against the range asked (no Content-Range,
  /// or one no object has) is EIO, never a short read the kernel takes as
  /// the end of the file. (The read-ahead part is fetched once more, alone,
  /// before the read fails: both answers are unusable here.)
  func testARangedAnswerWithoutAUsableContentRangeIsEIO() async throws {
    let inode = try await fs.inode(at: "d/f2")
    let opened = try await fs.open(inode: inode, flags: O_RDONLY)
    for contentRange in [nil, "bytes 500-509/-9223372036854775808", "bytes 500-509/505"] {
      let headers = contentRange.map { [("Content-Range", $0)] } ?? []
      let unusable = FakeStorageServer.ScriptedResponse.raw(
        .init(status: 206, headers: headers, body: Array(repeating: 2, count: 10)))
      server.injectFaults([unusable, unusable], for: .media)
      await XCTAssertErrno(.io) {
        _ = try await self.fs.read(inode: inode, handle: opened.handle, offset: 500, size: 100)
      }
    }
    await XCTAssertEqualAsync(
      try await fs.read(inode: inode, handle: opened.handle, offset: 500, size: 100).array,
      Array(repeating: 2, count: 100))
  }

  func testCancellationStopsTheRequest() async throws {
    let inode = try await fs.inode(at: "d/f1")
    let opened = try await fs.open(inode: inode, flags: O_RDONLY)
    server.injectFaults([.stall(.seconds(30))], for: .media)
    let fs = self.fs!
    let task = Task { try await fs.read(inode: inode, handle: opened.handle, offset: 0, size: 10) }
    try await Task.sleep(for: .milliseconds(200))
    let start = ContinuousClock.now
    task.cancel()
    do {
      _ = try await task.value
      XCTFail("expected an interruption")
    } catch let errno as Errno {
      XCTAssertEqual(errno, .interrupted)
    }
    XCTAssertLessThan(ContinuousClock.now - start, .seconds(1))
  }
}

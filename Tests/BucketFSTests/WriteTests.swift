import FUSE
import ObjectStore
import StorageFake
import Synchronization
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// Writing files: staging, read-your-writes, uploads on close
/// (docs/SEMANTICS.md#writes), against the exact in-process service.
final class WriteTests: XCTestCase {
  var store: InMemoryObjectStore!
  var fs: BucketFileSystem!
  var stages: String!

  override func setUp() async throws {
    store = InMemoryObjectStore(bucket: "demo")
    store.put("docs/readme.txt", data: bytes("hello world"), contentType: "text/plain")
    stages = makeStageDirectory()
    fs = makeWritingFileSystem(store, stageDirectory: stages)
  }

  func testCreateWriteCloseMakesOneObjectWithOneUploadAtGenerationZero() async throws {
    let (inode, handle) = try await fs.createFile("docs/new.txt")
    store.resetCalls()
    try await fs.writeText(inode, handle, at: 0, "first ")
    try await fs.writeText(inode, handle, at: 6, "line\n")
    XCTAssertNil(store.object("docs/new.txt"), "nothing is uploaded before close")
    XCTAssertEqual(store.calls, [])
    try await fs.close(inode, handle)
    XCTAssertEqual(store.calls, [.upload("docs/new.txt", ifGenerationMatch: 0)])
    XCTAssertEqual(text(store.data("docs/new.txt")), "first line\n")
    XCTAssertEqual(store.object("docs/new.txt")?.contentType, "text/plain")
    let removed = await eventually { filesIn(stages).filter { $0.hasPrefix("stage-") }.isEmpty }
    XCTAssertTrue(removed, "the stage goes once stored (apart from the release)")
    let attributes = try await fs.getattr(inode: inode).0
    XCTAssertEqual(attributes.size, 11)
    XCTAssertEqual(attributes.kind, .file)
  }

  func testAnEmptyNewFileIsStoredOnClose() async throws {
    let (inode, handle) = try await fs.createFile("empty.bin")
    try await fs.close(inode, handle)
    XCTAssertEqual(store.data("empty.bin"), [])
    XCTAssertEqual(store.object("empty.bin")?.contentType, "application/octet-stream")
  }

  func testCloseWithoutChangesUploadsNothing() async throws {
    let (inode, handle) = try await fs.openFile("docs/readme.txt", flags: O_RDWR)
    store.resetCalls()
    try await fs.close(inode, handle)
    XCTAssertEqual(store.calls, [])
  }

  func testTruncatingOpenNeverDownloadsAndReplacesTheOpenedGeneration() async throws {
    let generation = store.object("docs/readme.txt")!.generation
    let (inode, handle) = try await fs.openFile("docs/readme.txt", flags: O_WRONLY | O_TRUNC)
    store.resetCalls()
    await XCTAssertEqualAsync(try await fs.getattr(inode: inode).0.size, 0)
    try await fs.writeText(inode, handle, at: 0, "new")
    try await fs.close(inode, handle)
    XCTAssertEqual(store.calls, [.upload("docs/readme.txt", ifGenerationMatch: generation)])
    XCTAssertEqual(text(store.data("docs/readme.txt")), "new")
  }

  func testATruncatingOpenOfANonEmptyFileMovesItsMtime() async throws {
    // pjdfstest open/00.t 43: open(O_TRUNC) kept the replaced bytes' mtime.
    store.put("old.txt", data: bytes("old bytes"), custom: ["goog-reserved-file-mtime": "1000000000"])
    let before = Timestamp.wholeSecondsNow()
    let (inode, handle) = try await fs.openFile("old.txt", flags: O_WRONLY | O_TRUNC)
    let shown = try await fs.getattr(inode: inode).0.modificationTime
    XCTAssertGreaterThanOrEqual(shown.seconds, before.seconds, "stat shows the truncation's time")
    try await fs.close(inode, handle)
    let stored = Int(store.object("old.txt")?.custom["goog-reserved-file-mtime"] ?? "") ?? 0
    XCTAssertGreaterThanOrEqual(stored, before.seconds, "the upload stores it")
    XCTAssertEqual(store.data("old.txt"), [])
  }

  func testAWriteInsideAnExistingObjectDownloadsItOnceThenPatchesTheBytes() async throws {
    let (inode, handle) = try await fs.openFile("docs/readme.txt", flags: O_WRONLY)
    store.resetCalls()
    try await fs.writeText(inode, handle, at: 6, "WORLD")
    XCTAssertEqual(store.calls(.read).count, 1, "the bytes it does not overwrite are fetched")
    try await fs.writeText(inode, handle, at: 0, "H")
    XCTAssertEqual(store.calls(.read).count, 1, "once")
    try await fs.close(inode, handle)
    XCTAssertEqual(text(store.data("docs/readme.txt")), "Hello WORLD")
  }

  func testAWriteCoveringTheWholeObjectNeedsNoDownload() async throws {
    let (inode, handle) = try await fs.openFile("docs/readme.txt", flags: O_WRONLY)
    store.resetCalls()
    try await fs.writeText(inode, handle, at: 0, "HELLO WORLD, longer")
    XCTAssertEqual(store.calls(.read), [])
    try await fs.close(inode, handle)
    XCTAssertEqual(text(store.data("docs/readme.txt")), "HELLO WORLD, longer")
  }

  func testAppendAtTheEndKeepsTheOldBytes() async throws {
    // The kernel turns O_APPEND into writes at the size it knows.
    let (inode, handle) = try await fs.openFile("docs/readme.txt", flags: O_WRONLY | O_APPEND)
    let size = try await fs.getattr(inode: inode).0.size
    try await fs.writeText(inode, handle, at: size, "!\n")
    await XCTAssertEqualAsync(try await fs.getattr(inode: inode).0.size, 13)
    try await fs.close(inode, handle)
    XCTAssertEqual(text(store.data("docs/readme.txt")), "hello world!\n")
  }

  func testTruncateDownAndUpThroughAHandle() async throws {
    let (inode, handle) = try await fs.openFile("docs/readme.txt", flags: O_RDWR)
    store.resetCalls()
    _ = try await fs.setattr(inode: inode, handle: handle, changes: AttributeChanges(size: 5))
    XCTAssertEqual(store.calls(.read).first, .read("docs/readme.txt", 0..<5), "only the bytes kept")
    let grown = try await fs.setattr(inode: inode, handle: handle, changes: AttributeChanges(size: 8)).0
    XCTAssertEqual(grown.size, 8)
    await XCTAssertEqualAsync(try await fs.readAll(inode, handle), bytes("hello") + [0, 0, 0])
    try await fs.close(inode, handle)
    XCTAssertEqual(store.data("docs/readme.txt"), bytes("hello") + [0, 0, 0])
  }

  func testTruncateOfAFileNobodyHasOpenUploadsAtOnceAndToZeroDownloadsNothing() async throws {
    let inode = try await fs.inode(at: "docs/readme.txt")
    let generation = store.object("docs/readme.txt")!.generation
    store.resetCalls()
    let attributes = try await fs.setattr(inode: inode, handle: nil, changes: AttributeChanges(size: 0)).0
    XCTAssertEqual(attributes.size, 0)
    XCTAssertEqual(store.calls, [.upload("docs/readme.txt", ifGenerationMatch: generation)])
    XCTAssertEqual(store.data("docs/readme.txt"), [])
    XCTAssertEqual(store.object("docs/readme.txt")?.contentType, "text/plain", "metadata carried")
  }

  /// A write of no bytes changes nothing, wherever it is (write(2) of 0 bytes).
  func testAnEmptyWriteChangesNothing() async throws {
    let (inode, handle) = try await fs.openFile("docs/readme.txt", flags: O_WRONLY)
    store.resetCalls()
    await XCTAssertEqualAsync(try await fs.writeBytes(inode, handle, at: 1000, []), 0)
    await XCTAssertEqualAsync(try await fs.write(inode: inode, handle: handle, offset: 1000, data: []), 0)
    await XCTAssertEqualAsync(try await fs.getattr(inode: inode).0.size, 11)
    try await fs.close(inode, handle)
    XCTAssertEqual(store.calls, [], "nothing downloaded, nothing uploaded")
    XCTAssertEqual(text(store.data("docs/readme.txt")), "hello world")
  }

  /// No file grows past the largest object the service stores (5 TiB), by a
  /// write at any offset up to UInt64.max or by truncate: EFBIG, and the
  /// file is as it was and still uploads.
  func testWritesAndTruncatesPastTheLargestObjectAreEFBIG() async throws {
    let (inode, handle) = try await fs.createFile("docs/big.bin")
    try await fs.writeText(inode, handle, at: 0, "kept")
    let limit = Staging.maxObjectBytes
    for offset: UInt64 in [.max, .max - 2, UInt64(Int64.max), limit, limit - 3] {
      await XCTAssertErrno(Errno(EFBIG)) {
        _ = try await self.fs.writeBytes(inode, handle, at: offset, [1, 2, 3, 4])
      }
      await XCTAssertErrno(Errno(EFBIG)) {
        _ = try await self.fs.write(inode: inode, handle: handle, offset: offset, data: [1, 2, 3, 4])
      }
    }
    for size in [UInt64.max, UInt64(Int64.max) + 1, limit + 1] {
      await XCTAssertErrno(Errno(EFBIG)) {
        _ = try await self.fs.setattr(inode: inode, handle: handle, changes: AttributeChanges(size: size))
      }
      await XCTAssertErrno(Errno(EFBIG)) {
        _ = try await self.fs.setattr(inode: inode, handle: nil, changes: AttributeChanges(size: size))
      }
    }
    await XCTAssertEqualAsync(try await fs.getattr(inode: inode).0.size, 4)
    try await fs.close(inode, handle)
    XCTAssertEqual(text(store.data("docs/big.bin")), "kept")
  }

  func testHandlesShareTheStageAndStatShowsTheStagedSize() async throws {
    let (inode, writer) = try await fs.createFile("shared.txt")
    let reader = try await fs.open(inode: inode, flags: O_RDONLY).handle
    let second = try await fs.open(inode: inode, flags: O_WRONLY).handle
    try await fs.writeText(inode, writer, at: 0, "abc")
    try await fs.writeText(inode, second, at: 3, "def")
    await XCTAssertEqualAsync(text(try await fs.readAll(inode, reader)), "abcdef")
    await XCTAssertEqualAsync(try await fs.getattr(inode: inode).0.size, 6)
    let looked = try await fs.lookup(parent: 1, name: "shared.txt")
    XCTAssertEqual(looked.attributes?.size, 6, "a lookup finds the staged file, not yet stored")
    try await fs.close(inode, writer)
    XCTAssertEqual(text(store.data("shared.txt")), "abcdef")
    // The second writer's close has nothing new to store.
    store.resetCalls()
    try await fs.close(inode, second)
    try await fs.close(inode, reader)
    XCTAssertEqual(store.calls(.upload), [])
  }

  func testAReaderOpenedBeforeTheWriteSeesTheStagedBytes() async throws {
    let (inode, reader) = try await fs.openFile("docs/readme.txt", flags: O_RDONLY)
    let writer = try await fs.open(inode: inode, flags: O_WRONLY | O_TRUNC).handle
    try await fs.writeText(inode, writer, at: 0, "staged")
    await XCTAssertEqualAsync(text(try await fs.readAll(inode, reader)), "staged")
    try await fs.close(inode, writer)
    try await fs.close(inode, reader)
  }

  func testAReaderOpenedOnTheStageReadsOnAfterTheWriterCloses() async throws {
    // Found by tests/test_soak.py: the read failed with EBADF once the writer closed.
    let (inode, writer) = try await fs.openFile("docs/readme.txt", flags: O_WRONLY | O_TRUNC)
    try await fs.writeText(inode, writer, at: 0, "new")
    let reader = try await fs.open(inode: inode, flags: O_RDONLY).handle
    try await fs.close(inode, writer)
    XCTAssertEqual(text(store.data("docs/readme.txt")), "new")
    store.resetCalls()
    await XCTAssertEqualAsync(text(try await fs.readAll(inode, reader)), "new")
    XCTAssertEqual(store.calls, [], "read from the stage its writer left")
    XCTAssertFalse(
      filesIn(stages).filter { $0.hasPrefix("stage-") }.isEmpty, "the stage stays while its reader is open")
    try await fs.close(inode, reader)
    let removed = await eventually { filesIn(stages).filter { $0.hasPrefix("stage-") }.isEmpty }
    XCTAssertTrue(removed, "the reader's close removes it (apart from the release)")
  }

  func testFsyncUploadsAndTheNextCloseHasNothingToDo() async throws {
    let (inode, handle) = try await fs.createFile("synced.txt")
    try await fs.writeText(inode, handle, at: 0, "one")
    try await fs.fsync(inode: inode, handle: handle, dataOnly: false)
    XCTAssertEqual(text(store.data("synced.txt")), "one")
    let first = store.object("synced.txt")!.generation
    try await fs.writeText(inode, handle, at: 3, "two")
    store.resetCalls()
    try await fs.close(inode, handle)
    XCTAssertEqual(store.calls, [.upload("synced.txt", ifGenerationMatch: first)], "replaces its own upload")
    XCTAssertEqual(text(store.data("synced.txt")), "onetwo")
  }

  func testNamesThatBreakTheRulesFailBeforeAnyRequest() async throws {
    store.resetCalls()
    await XCTAssertErrno(.invalid) {
      _ = try await self.fs.create(parent: 1, name: "..", mode: 0o644, flags: O_WRONLY)
    }
    await XCTAssertErrno(.invalid) {
      _ = try await self.fs.create(parent: 1, name: "", mode: 0o644, flags: O_WRONLY)
    }
    let long = String(repeating: "x", count: 256)
    await XCTAssertErrno(.nameTooLong) {
      _ = try await self.fs.create(parent: 1, name: long, mode: 0o644, flags: O_WRONLY)
    }
    // Four components of 255 bytes make a key over 1024 bytes.
    let part = String(repeating: "d", count: 255)
    store.put("\(part)/\(part)/\(part)/\(part)/seed", data: [])
    let deep = try await fs.inode(at: "\(part)/\(part)/\(part)/\(part)")
    store.resetCalls()
    await XCTAssertErrno(.nameTooLong) {
      _ = try await self.fs.create(parent: deep, name: "file", mode: 0o644, flags: O_WRONLY)
    }
    XCTAssertEqual(store.calls, [])
  }

  func testReadOnlyMountRefusesEveryWrite() async throws {
    var configuration = Configuration()
    configuration.readOnly = true
    configuration.stageDirectory = stages
    let readOnly = BucketFileSystem(store: store, configuration: configuration, logger: quietLogger)
    let inode = try await readOnly.inode(at: "docs/readme.txt")
    await XCTAssertErrno(.readOnly) { _ = try await readOnly.open(inode: inode, flags: O_WRONLY) }
    await XCTAssertErrno(.readOnly) {
      _ = try await readOnly.create(parent: 1, name: "x", mode: 0o644, flags: O_WRONLY)
    }
    await XCTAssertErrno(.readOnly) {
      _ = try await readOnly.setattr(inode: inode, handle: nil, changes: AttributeChanges(size: 0))
    }
  }

  func testALocalWriteFailureIsThatErrnoAndNothingIsUploaded() async throws {
    let files = FailingStageFiles()
    let fs = makeWritingFileSystem(store, stageDirectory: stages, stageFiles: files)
    let (inode, handle) = try await fs.createFile("full.bin")
    try await fs.writeText(inode, handle, at: 0, "kept")
    files.fail([ENOSPC])
    await XCTAssertErrno(Errno(ENOSPC)) { _ = try await fs.writeBytes(inode, handle, at: 4, [1, 2, 3]) }
    await XCTAssertErrno(Errno(ENOSPC)) { try await fs.flush(inode: inode, handle: handle) }
    fs.release(inode: inode, handle: handle)
    XCTAssertNil(store.object("full.bin"), "nothing uploaded half")
    XCTAssertEqual(store.calls(.upload), [])
  }

  func testCreateInADirectoryListedCompleteNeedsNoLookupRequest() async throws {
    store.put("photos/a.jpg", data: bytes("a"))
    let photos = try await fs.inode(at: "photos")
    _ = try await fs.names(of: photos)
    store.resetCalls()
    let missing = try await fs.lookup(parent: photos, name: "b.jpg")
    XCTAssertNil(missing.attributes)
    let (inode, handle) = try await fs.createFile("photos/b.jpg")
    try await fs.writeText(inode, handle, at: 0, "b")
    try await fs.close(inode, handle)
    XCTAssertEqual(
      store.calls, [.upload("photos/b.jpg", ifGenerationMatch: 0)], "one upload and nothing else")
    XCTAssertEqual(store.object("photos/b.jpg")?.contentType, "image/jpeg")
    // Once stored, the name is no longer known absent.
    fs.forget(inode: inode, count: 1)
    let found = try await fs.lookup(parent: photos, name: "b.jpg")
    XCTAssertEqual(found.attributes?.size, 1)
  }
}

extension WriteTests {
  func testTruncatingDownThroughAHandleAloneIsAChange() async throws {
    let (inode, handle) = try await fs.openFile("docs/readme.txt", flags: O_WRONLY)
    _ = try await fs.setattr(inode: inode, handle: handle, changes: AttributeChanges(size: 5))
    try await fs.close(inode, handle)
    XCTAssertEqual(text(store.data("docs/readme.txt")), "hello")
  }

  func testANewFileShowsNoGenerationOrTimesUntilStored() async throws {
    let (inode, handle) = try await fs.createFile("fresh.txt")
    let names = try await fs.listxattr(inode: inode)
    XCTAssertFalse(names.contains("user.generation"))
    XCTAssertFalse(names.contains("user.timeCreated"))
    XCTAssertTrue(names.contains("user.contentType"))
    // rsync -X removes the names its source lacks: quietly ignored.
    try await fs.removexattr(inode: inode, name: "user.bucket")
    try await fs.close(inode, handle)
  }
}

extension WriteTests {
  func testManyFilesWrittenInParallelAreEachStoredOnce() async throws {
    let fs = self.fs!
    try await withThrowingTaskGroup(of: Void.self) { group in
      for i in 0..<40 {
        group.addTask {
          let (inode, handle) = try await fs.createFile("p\(i).txt")
          for chunk in 0..<4 {
            try await fs.writeText(inode, handle, at: UInt64(chunk * 3), "\(chunk)\(chunk)\(chunk)")
          }
          try await fs.close(inode, handle)
        }
      }
      try await group.waitForAll()
    }
    XCTAssertEqual(store.calls(.upload).count, 40)
    for i in 0..<40 { XCTAssertEqual(text(store.data("p\(i).txt")), "000111222333") }
  }

  func testConcurrentWritesThroughTwoHandlesWhileOneClosesLoseNothing() async throws {
    let (inode, first) = try await fs.openFile("docs/readme.txt", flags: O_RDWR)
    let second = try await fs.open(inode: inode, flags: O_RDWR).handle
    let fs = self.fs!
    // Writes past the start need the object's bytes: both wait for one download.
    async let a: Void = fs.writeText(inode, first, at: 11, "!")
    async let b: Void = fs.writeText(inode, second, at: 12, "?")
    _ = try await (a, b)
    async let closing: Void = fs.flush(inode: inode, handle: first)
    async let more: Void = fs.writeText(inode, second, at: 13, "\n")
    _ = try await (closing, more)
    fs.release(inode: inode, handle: first)
    try await fs.close(inode, second)
    XCTAssertEqual(store.calls(.read).count, 1)
    XCTAssertEqual(text(store.data("docs/readme.txt")), "hello world!?\n")
  }
}

extension WriteTests {
  func testOpensClosesAndWritesOfOneFileInParallelShareOneStage() async throws {
    store.put("many.txt", data: Array(repeating: UInt8(ascii: "."), count: 20))
    let inode = try await fs.inode(at: "many.txt")
    let fs = self.fs!
    try await withThrowingTaskGroup(of: Void.self) { group in
      for i in 0..<20 {
        group.addTask {
          let handle = try await fs.open(inode: inode, flags: O_WRONLY).handle
          _ = try await fs.writeBytes(inode, handle, at: UInt64(i), [UInt8(ascii: "a") + UInt8(i)])
          try await fs.close(inode, handle)
        }
      }
      try await group.waitForAll()
    }
    XCTAssertEqual(text(store.data("many.txt")), "abcdefghijklmnopqrst")
    XCTAssertEqual(fs.stagedInodes.count, 0, "every stage released")
  }
}

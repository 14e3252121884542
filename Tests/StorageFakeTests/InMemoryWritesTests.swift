import NIOCore
import ObjectStore
import XCTest

@testable import StorageFake

/// The in-memory model's uploads, deletes, copies and moves, with the
/// service's preconditions: 0 means "no live object", n "generation n is
/// live"; a mismatch is a 412 that changes nothing.
final class InMemoryWritesTests: XCTestCase {
  let attributes = ObjectAttributes(
    fields: [.contentType: "text/plain", .cacheControl: "no-store"],
    custom: ["firebaseStorageDownloadTokens": "t"])

  func testUploadPreconditions() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    let first = try await store.upload(
      "f", from: BytesSource([1]), attributes: attributes, ifGenerationMatch: 0)
    XCTAssertEqual(first.metageneration, 1)
    XCTAssertEqual(ObjectAttributes(of: first), attributes)
    await assertError(.preconditionFailed) {
      try await store.upload("f", from: BytesSource([2]), attributes: self.attributes, ifGenerationMatch: 0)
    }
    await assertError(.preconditionFailed) {
      try await store.upload(
        "f", from: BytesSource([2]), attributes: self.attributes, ifGenerationMatch: first.generation + 1)
    }
    await assertError(.preconditionFailed, "n on a missing name") {
      try await store.upload("g", from: BytesSource([2]), attributes: self.attributes, ifGenerationMatch: 5)
    }
    XCTAssertEqual(store.data("f"), [1])
    XCTAssertNil(store.object("g"))
    let second = try await store.upload(
      "f", from: BytesSource([3]), attributes: ObjectAttributes(), ifGenerationMatch: first.generation)
    XCTAssertGreaterThan(second.generation, first.generation)
    XCTAssertEqual(second.contentType, "application/octet-stream", "the service's default type")
    XCTAssertEqual(second.custom, [:], "an upload stores only what it is given")
    let blind = try await store.upload(
      "f", from: BytesSource([4]), attributes: attributes, ifGenerationMatch: nil)
    XCTAssertGreaterThan(blind.generation, second.generation)
    XCTAssertEqual(store.calls(.upload).count, 6)
  }

  /// `beforeNext` runs after the call starts and before its preconditions:
  /// another writer at the worst moment.
  func testBeforeNextHooksRunBeforeThePreconditions() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    store.beforeNext(.upload) { $0.put("f", data: Array("theirs".utf8)) }
    await assertError(.preconditionFailed) {
      try await store.upload("f", from: BytesSource([1]), attributes: self.attributes, ifGenerationMatch: 0)
    }
    XCTAssertEqual(store.data("f"), Array("theirs".utf8))
    // A hook runs once.
    let mine = try await store.upload(
      "g", from: BytesSource([1]), attributes: attributes, ifGenerationMatch: 0)
    XCTAssertEqual(mine.name, "g")

    let live = try XCTUnwrap(store.object("f"))
    store.beforeNext(.delete) { $0.put("f", data: [9]) }
    await assertError(.preconditionFailed) { try await store.delete("f", ifGenerationMatch: live.generation) }
    XCTAssertEqual(store.data("f"), [9])
  }

  func testSourceFailureStoresNothing() async throws {
    struct Broken: Error {}
    struct Failing: UploadSource {
      var size: Int64 { 3 << 20 }
      func read(at offset: Int64, count: Int) throws -> ByteBuffer {
        if offset > 0 { throw Broken() }
        return ByteBuffer(repeating: 0, count: count)
      }
    }
    let store = InMemoryObjectStore(bucket: "b")
    do {
      _ = try await store.upload("f", from: Failing(), attributes: attributes, ifGenerationMatch: 0)
      XCTFail("expected the source's error")
    } catch is Broken {}
    XCTAssertNil(store.object("f"))
  }

  func testDelete() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    await assertError(.notFound) { try await store.delete("f", ifGenerationMatch: nil) }
    let meta = store.put("f", data: [1])
    await assertError(.preconditionFailed) {
      try await store.delete("f", ifGenerationMatch: meta.generation + 1)
    }
    XCTAssertNotNil(store.object("f"))
    try await store.delete("f", ifGenerationMatch: meta.generation)
    XCTAssertNil(store.object("f"))
    XCTAssertEqual(store.names, [])
  }

  func testCopy() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    let source = store.put("a", data: [1, 2], contentType: "image/png", custom: ["k": "v"])
    let kept = try await store.copy(
      "a", sourceGeneration: source.generation, to: "b", attributes: nil, ifGenerationMatch: 0)
    XCTAssertEqual(
      ObjectAttributes(of: kept), ObjectAttributes(of: source), "nil keeps the source's metadata")
    XCTAssertNotEqual(kept.generation, source.generation)
    let replaced = try await store.copy(
      "a", sourceGeneration: source.generation, to: "c", attributes: attributes, ifGenerationMatch: 0)
    XCTAssertEqual(ObjectAttributes(of: replaced), attributes, "given attributes replace the source's")
    XCTAssertEqual(store.data("c"), [1, 2])
    await assertError(.preconditionFailed, "destination taken") {
      try await store.copy(
        "a", sourceGeneration: source.generation, to: "b", attributes: nil, ifGenerationMatch: 0)
    }
    await assertError(.notFound, "source generation gone") {
      try await store.copy(
        "a", sourceGeneration: source.generation + 1, to: "d", attributes: nil, ifGenerationMatch: 0)
    }
    await assertError(.notFound) {
      try await store.copy("zz", sourceGeneration: 1, to: "d", attributes: nil, ifGenerationMatch: nil)
    }
    let over = try await store.copy(
      "a", sourceGeneration: source.generation, to: "b", attributes: nil, ifGenerationMatch: kept.generation)
    XCTAssertGreaterThan(over.generation, kept.generation)
    XCTAssertNil(store.object("d"))
  }

  func testMove() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    let source = store.put("a", data: [1, 2], contentType: "text/csv", cacheControl: "x", custom: ["k": "v"])
    await assertError(.notFound, "no source") {
      try await store.move("zz", sourceGeneration: 1, to: "b", ifGenerationMatch: 0)
    }
    await assertError(.preconditionFailed, "another generation of the source") {
      try await store.move("a", sourceGeneration: source.generation + 1, to: "b", ifGenerationMatch: 0)
    }
    store.put("taken", data: [9])
    await assertError(.preconditionFailed, "destination taken") {
      try await store.move("a", sourceGeneration: source.generation, to: "taken", ifGenerationMatch: 0)
    }
    await assertError(.badRequest("Source and destination object names must differ.")) {
      try await store.move("a", sourceGeneration: source.generation, to: "a", ifGenerationMatch: nil)
    }
    XCTAssertEqual(store.data("a"), [1, 2])
    let moved = try await store.move("a", sourceGeneration: source.generation, to: "b", ifGenerationMatch: 0)
    XCTAssertEqual(ObjectAttributes(of: moved), ObjectAttributes(of: source), "the metadata comes along")
    XCTAssertEqual(moved.metageneration, 1)
    XCTAssertNil(store.object("a"))
    XCTAssertEqual(store.data("b"), [1, 2])
    XCTAssertEqual(store.names, ["b", "taken"])
  }

  func testMoveUnsupportedChangesNothing() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    store.supportsMove = false
    let source = store.put("a", data: [1])
    do {
      _ = try await store.move("a", sourceGeneration: source.generation, to: "b", ifGenerationMatch: 0)
      XCTFail("expected unsupported")
    } catch StorageError.unsupported {}
    XCTAssertEqual(store.names, ["a"])
  }

  func testInjectedFaultsComeFirst() async throws {
    let store = InMemoryObjectStore(bucket: "b")
    store.injectFaults([.unavailable("503")], for: .upload)
    await assertError(.unavailable("503")) {
      try await store.upload("f", from: BytesSource([1]), attributes: self.attributes, ifGenerationMatch: 0)
    }
    XCTAssertNil(store.object("f"))
    _ = try await store.upload("f", from: BytesSource([1]), attributes: attributes, ifGenerationMatch: 0)
    XCTAssertEqual(
      store.calls(.upload), [.upload("f", ifGenerationMatch: 0), .upload("f", ifGenerationMatch: 0)])
  }

  private func assertError<T>(
    _ expected: StorageError, _ message: String = "", file: StaticString = #filePath, line: UInt = #line,
    _ body: () async throws -> T
  ) async {
    do {
      _ = try await body()
      XCTFail("expected \(expected) \(message)", file: file, line: line)
    } catch let error as StorageError {
      XCTAssertEqual(error, expected, message, file: file, line: line)
    } catch {
      XCTFail("expected \(expected), got \(error) \(message)", file: file, line: line)
    }
  }
}

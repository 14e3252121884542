import NIOCore
import ObjectStore
import Synchronization
import XCTest

@testable import StorageFake

/// A wrapper on ``ForwardingObjectStore`` forwards every requirement to the
/// same requirement of its inner store, each overload on its own, and a
/// change it makes to reads or listings, routed as the base documents, is
/// not bypassed by the other overload.
final class ForwardingObjectStoreTests: XCTestCase {
  /// Changes nothing.
  struct Bare: ForwardingObjectStore {
    let inner: any ObjectStore
  }

  /// Changes only uploads (adds a custom field), as a wrapper of writes does.
  struct MarkingUploads: ForwardingObjectStore {
    let inner: any ObjectStore

    func upload(
      _ name: String, from source: any UploadSource, attributes: ObjectAttributes, ifGenerationMatch: Int64?
    ) async throws -> ObjectMetadata {
      var marked = attributes
      marked.custom["marked"] = "1"
      return try await inner.upload(
        name, from: source, attributes: marked, ifGenerationMatch: ifGenerationMatch)
    }
  }

  /// Changes the plain read and the list (counts them) and routes the other
  /// read through the plain one, as ``ForwardingObjectStore`` says.
  final class CountingReadsAndLists: ForwardingObjectStore {
    let inner: any ObjectStore
    let counts = Mutex((reads: 0, lists: 0))
    init(_ inner: any ObjectStore) { self.inner = inner }

    func read(_ name: String, generation: Int64, range: Range<Int64>, reusing spare: SpareBuffer?)
      async throws -> ByteBuffer
    {
      counts.withLock { $0.reads += 1 }
      return try await inner.read(name, generation: generation, range: range, reusing: spare)
    }

    func list(_ request: ListRequest) async throws -> ListPage {
      counts.withLock { $0.lists += 1 }
      return try await inner.list(request)
    }
  }

  func testEveryRequirementReachesTheSameRequirementOfInner() async throws {
    let recorder = RecordingStore(InMemoryObjectStore(bucket: "b"))
    let seen = try await recorder.callEveryRequirement(of: Bare(inner: recorder))
    XCTAssertEqual(seen, .unchanged)
    XCTAssertEqual(recorder.calls, RecordingStore.Requirement.allCases, "each once, overloads apart")
    XCTAssertEqual(recorder.base.readsIntoSpares, 1, "the spare reached the inner store")
  }

  func testAChangeElsewhereLeavesEveryOtherRequirementForwarded() async throws {
    let recorder = RecordingStore(InMemoryObjectStore(bucket: "b"))
    let seen = try await recorder.callEveryRequirement(of: MarkingUploads(inner: recorder))
    XCTAssertEqual(seen, .unchanged)
    XCTAssertEqual(recorder.calls, RecordingStore.Requirement.allCases)
    XCTAssertEqual(recorder.base.readsIntoSpares, 1)
    XCTAssertEqual(recorder.base.object("d/c")?.custom, ["marked": "1"], "the change applied")
  }

  func testAChangedReadOrListIsNotBypassedThroughTheOtherForm() async throws {
    let recorder = RecordingStore(InMemoryObjectStore(bucket: "b"))
    let wrapper = CountingReadsAndLists(recorder)
    let seen = try await recorder.callEveryRequirement(of: wrapper)
    XCTAssertEqual(seen, .unchanged)
    let counts = wrapper.counts.withLock { $0 }
    XCTAssertEqual(counts.reads, 2, "the read with a spare and without")
    XCTAssertEqual(counts.lists, 3, "every list, whatever its request carries")
    XCTAssertEqual(
      recorder.calls,
      [
        .bucket, .list, .listHandingToken, .listEnding, .metadata, .read, .readReusing, .patch, .upload,
        .delete, .copy, .move,
      ],
      "each list with all it carried; the read has one form, spare and all")
    XCTAssertEqual(recorder.base.readsIntoSpares, 1, "the changed read passes the spare on")
  }
}

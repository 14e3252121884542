import NIOCore
import ObjectStore
import StorageFake
import Synchronization

/// The wrapped store, except that a held call takes its answer at once and
/// delivers it only once released: a late answer to an early request, as when
/// a GET or a list page sent before a PATCH arrives after its answer. A lost
/// PATCH answer is applied and then answered 412, as the client's retry of
/// it is.
final class HeldAnswerStore: ForwardingObjectStore, Sendable {
  enum Kind: Sendable { case metadata, list, delete }
  let base: InMemoryObjectStore
  private struct Hold {
    var calls: Int
    var taken = 0
    var open = false
  }
  private let holds = Mutex<[Kind: Hold]>([:])
  private let lostPatches = Mutex(0)

  /// The next `count` patches are applied, then answered 412.
  func losePatchAnswers(_ count: Int = 1) { lostPatches.withLock { $0 = count } }

  init(_ base: InMemoryObjectStore) { self.base = base }

  var inner: any ObjectStore { base }

  /// Holds the next `calls` calls of `kind` until ``release(_:)``.
  func hold(_ kind: Kind, calls: Int = 1) {
    holds.withLock { $0[kind] = Hold(calls: calls) }
  }

  /// Held calls that have their answer and wait.
  func taken(_ kind: Kind) -> Int { holds.withLock { $0[kind]?.taken ?? 0 } }

  func release(_ kind: Kind) { holds.withLock { $0[kind]?.open = true } }

  private func deliver<T>(_ kind: Kind, _ answer: T) async -> T {
    let held = holds.withLock { holds -> Bool in
      guard var hold = holds[kind], hold.taken < hold.calls else { return false }
      hold.taken += 1
      holds[kind] = hold
      return true
    }
    guard held else { return answer }
    while !holds.withLock({ $0[kind]?.open ?? true }) { try? await Task.sleep(for: .milliseconds(2)) }
    return answer
  }

  /// The page's token too comes only once released: the taker is handed it
  /// after the held answer is delivered.
  func list(_ request: ListRequest) async throws -> ListPage {
    var plain = request
    plain.onNextPageToken = nil
    let page = await deliver(.list, try await base.list(plain))
    if let taker = request.onNextPageToken, let token = page.nextPageToken { taker(token) }
    return page
  }

  /// Applied at once; the answer waits while held.
  func delete(_ name: String, ifGenerationMatch: Int64?) async throws {
    try await base.delete(name, ifGenerationMatch: ifGenerationMatch)
    await deliver(.delete, ())
  }

  func metadata(of name: String) async throws -> ObjectMetadata {
    await deliver(.metadata, try await base.metadata(of: name))
  }

  func patch(
    _ name: String, _ patch: MetadataPatch, ifGenerationMatch: Int64?, ifMetagenerationMatch: Int64?
  ) async throws -> ObjectMetadata {
    let applied = try await base.patch(
      name, patch, ifGenerationMatch: ifGenerationMatch, ifMetagenerationMatch: ifMetagenerationMatch)
    let lost = lostPatches.withLock { count in
      defer { count = max(count - 1, 0) }
      return count > 0
    }
    if lost { throw StorageError.preconditionFailed }
    return applied
  }
}

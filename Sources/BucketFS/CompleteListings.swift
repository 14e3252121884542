import ObjectStore
import Synchronization

/// Directories this mount has seen listed fresh and complete (a readdir from
/// the first entry to the last, or a directory it just created): a name not
/// in one is known absent without a lookup request while the record is
/// younger than the negative TTL. Names this mount stores are added, so only
/// another client's new objects can be missed, for as long as the kernel's
/// own negative entries would miss them.
struct CompleteListings: Sendable {
  struct Listing {
    var names: Set<ObjectKey>
    var at: Double
  }
  private var byDirectory: [ObjectKey: Listing] = [:]
  private var order: [ObjectKey] = []
  /// readdir passes under way, by directory handle.
  private var passes: [UInt64: (directory: String, names: Set<ObjectKey>, at: Double)] = [:]
  static let capacity = 256
  /// Larger directories are not recorded (their names would cost memory).
  static let maxNames = 10_000

  func knownAbsent(directory: String, name: String, now: Double, ttl: Double) -> Bool {
    guard let listing = byDirectory[ObjectKey(directory)], now - listing.at < ttl else { return false }
    return !listing.names.contains(ObjectKey(name))
  }

  mutating func record(directory: String, names: Set<ObjectKey>, at time: Double) {
    guard names.count <= Self.maxNames else { return }
    if byDirectory.updateValue(Listing(names: names, at: time), forKey: ObjectKey(directory)) == nil {
      order.append(ObjectKey(directory))
    }
    if order.count > Self.capacity {
      let old = order.removeFirst()
      byDirectory[old] = nil
    }
  }

  /// A key this mount stored (a file, or a directory's `name/` placeholder):
  /// its name joins its directory's record, and each directory on its path
  /// joins its parent's (a directory renamed here has no placeholder).
  mutating func add(key: String) {
    guard !byDirectory.isEmpty else { return }
    var rest = Substring(key)
    if rest.hasSuffix("/") { rest = rest.dropLast() }
    while !rest.isEmpty {
      let cut = rest.lastIndex(of: "/").map { rest.index(after: $0) } ?? rest.startIndex
      byDirectory[ObjectKey(rest[..<cut])]?.names.insert(ObjectKey(rest[cut...]))
      rest = cut == rest.startIndex ? "" : rest[..<rest.index(before: cut)]
    }
  }

  /// A file this mount deleted or moved away: its name leaves its
  /// directory's record, so it is known absent at once. The callers made
  /// sure no directory of that name exists (unlink and rename answer
  /// EISDIR first). A placeholder (`name/`) changes nothing: the directory
  /// may live on in a file of the same name or in objects under it, and a
  /// name kept in a record only costs a lookup its request.
  mutating func remove(key: String) {
    guard !byDirectory.isEmpty, !key.hasSuffix("/") else { return }
    let cut = key.lastIndex(of: "/").map { key.index(after: $0) } ?? key.startIndex
    byDirectory[ObjectKey(key[..<cut])]?.names.remove(ObjectKey(key[cut...]))
  }

  mutating func startPass(handle: UInt64, directory: String, at time: Double) {
    passes[handle] = (directory, [], time)
  }

  /// A name the pass handed the kernel, from a page answered at `answeredAt`:
  /// the listing is as fresh as its oldest page.
  mutating func note(handle: UInt64, name: String, answeredAt: Double) {
    guard passes[handle] != nil else { return }
    passes[handle]!.names.insert(ObjectKey(name))
    passes[handle]!.at = min(passes[handle]!.at, answeredAt)
    if passes[handle]!.names.count > Self.maxNames { passes[handle] = nil }
  }

  mutating func finishPass(handle: UInt64) {
    guard let pass = passes.removeValue(forKey: handle) else { return }
    record(directory: pass.directory, names: pass.names, at: pass.at)
  }

  mutating func dropPass(handle: UInt64) {
    passes[handle] = nil
  }
}

/// The listings one mount shares between its lookups and its store.
final class SharedListings: Sendable {
  let state = Mutex(CompleteListings())

  func withLock<T>(_ body: (inout CompleteListings) -> T) -> T {
    state.withLock { body(&$0) }
  }
}

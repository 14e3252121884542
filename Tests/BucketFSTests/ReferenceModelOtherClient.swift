import FUSE
import Foundation
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// The reference model's second client (issue 19): between the mount's own
/// operations, another client of the bucket overwrites, deletes and creates
/// objects in the store directly, and the model says what the mount shows
/// (docs/SEMANTICS.md#consistency-other-clients). One `.elsewhere(seed:)`
/// step is one round; its seed picks the changes from the model's state
/// then, so a shrunk sequence still replays.
///
/// A round, on the manual clock (nothing sleeps):
/// 0. The mount is left to settle (tree-walk fetches end: a bounded poll)
///    and 6 s pass: the sibling prefetch window (5 s) ends, metadata stays
///    fresh.
/// 1. Handles are opened on some of the files about to change, and on one
///    file that will not (the control); what they start in the background
///    (a walk's fetch) ends before the change.
/// 2. The other client makes 1 to 3 changes.
/// 3. At once (no TTL has run out):
///    - a handle opened before the change reads ESTALE (`[]` if the old
///      version was empty: nothing to fetch), never the new bytes; after that
///      ESTALE the next open of the inode reads the new bytes (if deleted:
///      ESTALE, and the kernel's second lookup of the name finds it absent),
///      stat shows the new size, and keepCache is off. The control
///      reads its bytes.
///    - a lookup and a stat of each changed name show the old state or the
///      new one, nothing else; getfattr shows one version whole (once the
///      background work settled: it is several calls); an open of a
///      file a lookup shows succeeds and reads ESTALE, `[]` (an empty old
///      version) or the new bytes.
///    - setfattr of an overwritten file decides against the new version
///      (but see the known divergence at ``setxattrAtOnce``).
///    - a second later (past the moment in which an opendir takes the listing
///      its lookup fetched), a readdir of one changed directory, alone (not a
///      walk), shows exactly the bucket, sizes included.
/// 4. 11 s later (past the negative TTL of 5 s and the 10 s a walk's listing
///    is used, within the metadata TTL of 60 s): a new name is found by
///    lookup; another changed name shows old or new; a walk of the tree
///    (readdir) shows exactly the bucket, sizes included; after it, lookup,
///    stat, getfattr and read of a changed file show the new version (the
///    listing refreshed the cache).
/// 5. 61 s later (past every TTL): lookup, stat, getfattr and read of every
///    name show exactly the bucket; removed names and directories that
///    vanished are ENOENT; the handles opened in 1 still fail with ESTALE; a
///    walk shows exactly the bucket. The round ends as a kernel may, by
///    forgetting every inode (``OtherClientRound/forgetEverything()``).
///
/// An open's keepCache is checked whenever the round knows the generation
/// both it and the inode's previous open pinned: kept only when the same
/// (docs/SEMANTICS.md#reads-page-cache).
enum OtherClientChange: CustomStringConvertible {
  /// A new generation of a file, with its own bytes and properties.
  case overwrite(String, ModelFile)
  /// An object removed: a file, or a placeholder `dir/`.
  case delete(String)
  /// A new object: a file, or a placeholder `dir/` (a "Create folder").
  case create(String, ModelFile)

  var key: String {
    switch self {
    case .overwrite(let key, _), .delete(let key), .create(let key, _): key
    }
  }

  var description: String {
    switch self {
    case .overwrite(let key, let file): "overwrite \(key) with \(text(file.bytes)!.debugDescription) \(file)"
    case .delete(let key): "delete \(key)"
    case .create(let key, let file):
      key.hasSuffix("/")
        ? "create placeholder \(key)" : "create \(key) \(text(file.bytes)!.debugDescription) \(file)"
    }
  }

  func apply(to model: inout Model) {
    switch self {
    case .overwrite(let key, let file), .create(let key, let file):
      if key.hasSuffix("/") { model.placeholders.insert(key) } else { model.files[key] = file }
    case .delete(let key):
      if key.hasSuffix("/") { model.placeholders.remove(key) } else { model.files[key] = nil }
    }
    // What the other client wrote was set explicitly: nothing of it is inferred.
    model.inferred[key] = nil
  }

  func apply(to store: InMemoryObjectStore) {
    switch self {
    case .overwrite(let key, let file), .create(let key, let file):
      store.put(
        key, data: file.bytes, contentType: file.attributes.contentType,
        cacheControl: file.attributes.fields[.cacheControl], custom: file.attributes.custom)
    case .delete(let key): store.delete(key)
    }
  }
}

/// What a lookup of a path shows (or what the model says it should).
enum Shown: Equatable, CustomStringConvertible {
  case absent
  case directory
  case file(size: Int)
  /// A component on the way is a file.
  case notDirectory

  var description: String {
    switch self {
    case .absent: "absent"
    case .directory: "a directory"
    case .file(let size): "a file of \(size) bytes"
    case .notDirectory: "ENOTDIR"
    }
  }
}

/// What one read of a handle from offset 0 to the end gave.
enum ReadOutcome: Equatable, CustomStringConvertible {
  case bytes([UInt8])
  case failed(Errno)

  var description: String {
    switch self {
    case .bytes(let bytes): text(bytes)!.debugDescription
    case .failed(let errno): "\(errno)"
    }
  }
}

extension Model {
  /// What the mount shows at `path` when it agrees with the model: the
  /// directories it still holds after they vanished included.
  func shown(_ path: String) -> Shown {
    if path.isEmpty { return .directory }
    if let errno = resolveParent(path) { return errno == .notDirectory ? .notDirectory : .absent }
    switch kind(path) {
    case .directory: return .directory
    case .file: return .file(size: files[path]!.bytes.count)
    case nil: return vanished.contains(path) ? .directory : .absent
    }
  }

  /// Every path the model shows, directories without their `/`.
  var shownPaths: Set<String> {
    Set(visible.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 })
  }

  /// Every visible path with what a listing shows of it.
  var shownTree: [String: Shown] {
    var tree: [String: Shown] = [:]
    for path in visible {
      if path.hasSuffix("/") {
        tree[String(path.dropLast())] = .directory
      } else {
        tree[path] = .file(size: files[path]!.bytes.count)
      }
    }
    return tree
  }
}

/// A mismatch between the mount and the model within a round.
struct RoundMismatch: Error {
  let message: String
  init(_ message: String) { self.message = message }
}

/// One round of the other client, against one filesystem, store and model.
struct OtherClientRound {
  let fs: BucketFileSystem
  let store: InMemoryObjectStore
  let clock: ManualClock
  var generator: SplitMix64
  /// What the mount showed before the changes; the bucket after them.
  let before: Model
  var after: Model
  var changes: [OtherClientChange] = []
  /// Generations before and after the changes, by file (absent: no such object).
  var oldGenerations: [String: Int64] = [:]
  var newGenerations: [String: Int64] = [:]
  /// The generation each inode's last open in this round pinned, when known.
  var pinned: [UInt64: Int64] = [:]
  /// Where the round is, for messages.
  var phase = "before the change"

  enum Version { case before, after }

  /// Runs a round; the first mismatch, if any. `model` becomes the bucket's state.
  static func run(
    seed: UInt64, fs: BucketFileSystem, store: InMemoryObjectStore, clock: ManualClock, model: inout Model
  ) async -> String? {
    var round = OtherClientRound(
      fs: fs, store: store, clock: clock, generator: SplitMix64(seed: seed), before: model, after: model)
    do {
      try await round.play()
    } catch let mismatch as RoundMismatch {
      return "\(round.phase), after \(round.changes): \(mismatch.message)"
    } catch {
      return "\(round.phase), after \(round.changes): threw \(error)"
    }
    model = round.after
    return nil
  }

  // MARK: - Picking the changes

  /// 1 to 3 changes on distinct names. A name the mount shows never changes
  /// kind within a round (a resolved name may keep its kind until its entry
  /// expires, and what a kernel then does is not the mount's): new objects
  /// go where the mount shows nothing, and under no file.
  mutating func pickChanges() {
    var current = before
    var touched = Set<String>()
    for _ in 0..<Int.random(in: 1...3, using: &generator) {
      for _ in 0..<20 {
        guard let change = candidate(current, touched: touched) else { continue }
        change.apply(to: &current)
        touched.insert(change.key)
        changes.append(change)
        break
      }
    }
    after = current
  }

  private mutating func candidate(_ current: Model, touched: Set<String>) -> OtherClientChange? {
    switch Int.random(in: 0..<3, using: &generator) {
    case 0:
      let files = current.files.keys.filter { !touched.contains($0) }.sorted()
      guard let key = files.randomElement(using: &generator) else { return nil }
      return .overwrite(key, randomFile())
    case 1:
      let objects = (Array(current.files.keys) + current.placeholders).filter { !touched.contains($0) }
        .sorted()
      guard let key = objects.randomElement(using: &generator) else { return nil }
      return .delete(key)
    default:
      let path = ModelOperation.randomPath(using: &generator)
      let placeholder = Int.random(in: 0..<4, using: &generator) == 0
      let parts = path.split(separator: "/")
      let ancestors = parts.indices.dropLast().map { parts[...$0].joined(separator: "/") }
      guard before.shown(path) == .absent, current.kind(path) == nil,
        !touched.contains(path), !touched.contains(path + "/"),
        !ancestors.contains(where: { before.files[$0] != nil || current.files[$0] != nil })
      else { return nil }
      return placeholder
        ? .create(path + "/", ModelFile(bytes: [], attributes: ObjectAttributes()))
        : .create(path, randomFile())
    }
  }

  /// Bytes and properties another tool would write: letters the mount's
  /// operations never write, a content type always, sometimes more.
  private mutating func randomFile() -> ModelFile {
    let bytes = (0..<Int.random(in: 0...5, using: &generator)).map { _ in
      UInt8.random(in: 101...104, using: &generator)
    }
    var attributes = ObjectAttributes()
    attributes.contentType = ["text/plain", "image/png"].randomElement(using: &generator)!
    if Int.random(in: 0..<3, using: &generator) == 0 { attributes.fields[.cacheControl] = "no-cache" }
    if Bool.random(using: &generator) {
      attributes.custom["k"] = "w\(Int.random(in: 0..<9, using: &generator))"
    }
    return ModelFile(bytes: bytes, attributes: attributes)
  }

  // MARK: - The round

  mutating func play() async throws {
    // A tree walk's fetch still under way could keep a listing of the
    // bucket from before the change, dated after it.
    try await settle()
    // Past the sibling prefetch window (a file fetched ahead before the
    // change could be read instead of failing); metadata stays fresh.
    clock.advance(6)
    pickChanges()
    guard !changes.isEmpty else { return }

    // Handles opened before the change: on some of the files about to
    // change, and on one that will not.
    let changed = Set(changes.map(\.key))
    var early: [(path: String, inode: UInt64, handle: UInt64)] = []
    for path in before.files.keys.sorted() where changed.contains(path) {
      if Bool.random(using: &generator) { early.append(try await openEarly(path)) }
    }
    var control: (path: String, inode: UInt64, handle: UInt64)?
    let unchanged = before.files.keys.filter { !changed.contains($0) }.sorted()
    if let path = unchanged.randomElement(using: &generator) { control = try await openEarly(path) }
    // What those opens started (a walk's fetch) lands before the change,
    // not halfway through it; then the files whose old version the
    // mount fetched within the last second are known.
    try await settle()
    let fetchedJustBefore = Set(changes.map(\.key).filter(fetchedWithinConfirmation))

    for path in Set(before.files.keys).union(after.files.keys) {
      oldGenerations[path] = store.object(path)?.generation
    }
    for change in changes { change.apply(to: store) }
    for path in Set(before.files.keys).union(after.files.keys) {
      newGenerations[path] = store.object(path)?.generation
    }

    // The names whose view changes, each checked in a seeded order.
    let overwritten = changes.compactMap { change -> String? in
      if case .overwrite(let key, _) = change { key } else { nil }
    }
    let affected = before.shownPaths.union(after.shownPaths).filter { before.shown($0) != after.shown($0) }
      .union(overwritten).sorted().shuffled(using: &generator)

    phase = "at once"
    for (path, inode, handle) in early {
      try await expectEarlyRead(path, inode, handle)
      if !before.files[path]!.bytes.isEmpty { try await openAgain(path, inode) }
    }
    if let (path, inode, handle) = control {
      let read = await readAll(inode, handle)
      guard read == .bytes(after.files[path]!.bytes) else {
        throw RoundMismatch("the untouched \(path) read \(read)")
      }
    }
    for path in affected {
      let openIt = Bool.random(using: &generator)
      let probe = Int.random(in: 0..<4, using: &generator)
      guard let inode = try await expectOneOf(path, [before.shown(path), after.shown(path)]) else { continue }
      if overwritten.contains(path) {
        // getfattr -d is several calls: what the mount learns between them
        // (a stale read's refresh, a prefetch) would show in the later ones.
        try await settle()
        try await expectProperties(path, inode, oneOf: [.before, .after])
        if probe < 3 {
          try await setxattrAtOnce(
            path, inode, flags: [[], .create, .replace][probe],
            fetchedJustBefore: fetchedJustBefore.contains(path))
        }
      }
      if openIt { try await openShown(path, inode) }
    }
    // One directory listed by itself (nothing was read within the 5 s that
    // would make its opendir a walk's), a moment later: past the second in
    // which an opendir takes the listing its lookup fetched (the lookups of
    // step 1 came before the change).
    clock.advance(fs.directoryCache.followWindow)
    let parents = Set(
      changes.map { Model.parent($0.key.hasSuffix("/") ? String($0.key.dropLast()) : $0.key) })
    try await expectListing(parents.sorted().randomElement(using: &generator)!)

    phase = "past the negative TTL"
    clock.advance(11)
    for path in affected where before.shown(path) == .absent {
      try await expectOneOf(path, [after.shown(path)])
    }
    for path in affected where before.shown(path) != .absent {
      try await expectOneOf(path, [before.shown(path), after.shown(path)])
    }
    try await expectTree()
    phase = "past the negative TTL, after a listing"
    for path in after.files.keys.sorted() where changed.contains(path) {
      let inode = try await expectOneOf(path, [after.shown(path)])!
      try await expectProperties(path, inode, oneOf: [.after])
      try await expectRead(path, inode)
    }

    phase = "past the metadata TTL"
    clock.advance(61)
    // What the mount held is revalidated by lookup now: a directory that
    // vanished is absent.
    after.vanished = []
    let removed = before.shownPaths.union(before.vanished).subtracting(after.shownPaths)
    for path in removed.sorted() {
      try await expectOneOf(path, [after.shown(path)])
    }
    for path in after.shownPaths.sorted() {
      guard let inode = try await expectOneOf(path, [after.shown(path)]) else { continue }
      try await expectProperties(path, inode, oneOf: [.after])
      try await expectRead(path, inode)
    }
    for (path, inode, handle) in early {
      try await expectEarlyRead(path, inode, handle)
      fs.release(inode: inode, handle: handle)
    }
    if let (_, inode, handle) = control { fs.release(inode: inode, handle: handle) }
    try await expectTree()
    forgetEverything()
  }

  /// Waits (a bounded poll) for the mount's background fetches of metadata
  /// to end: tree walks' and the refreshes after stale reads. (Sibling
  /// prefetches fetch bytes of a generation already known, no metadata.)
  private func settle() async throws {
    let settled = await eventually {
      fs.directories.walks.fetchesUnderWay == 0 && fs.readService.staleReads.isIdle
    }
    guard settled else { throw RoundMismatch("the mount's background work never ended") }
  }

  /// The mount holds `path`'s version fetched less than a second ago, on
  /// which a setfattr that sends nothing decides (docs/SEMANTICS.md#xattrs-set).
  private func fetchedWithinConfirmation(_ path: String) -> Bool {
    guard let inode = fs.nodes.held(path), let node = try? fs.nodes.node(inode) else { return false }
    return clock.read() - node.fetchedAt <= ExtendedAttributes.confirmationAge
  }

  /// What a kernel may do at any time with inodes nothing uses (memory
  /// pressure, `drop_caches`), and does with those a lookup no longer
  /// confirms once their entries expired: forget them. Without it the
  /// mount would go on holding, say, a vanished directory that a kernel
  /// would have revalidated (ENOENT, the mount never asked) and let go.
  private func forgetEverything() {
    let held = fs.nodes.held(under: fs.configuration.rootPrefix)
    for (inode, node) in held { fs.forget(inode: inode, count: node.lookups) }
  }

  // MARK: - Opens and reads

  private mutating func openEarly(_ path: String) async throws -> (
    path: String, inode: UInt64, handle: UInt64
  ) {
    let inode = try await fs.inode(at: path)
    let handle = try await open(path, inode, generation: store.object(path)?.generation)
    return (path, inode, handle)
  }

  /// A handle opened before the change never reads the new version: its
  /// generation is gone (ESTALE), unless that was empty (end of file).
  private func expectEarlyRead(_ path: String, _ inode: UInt64, _ handle: UInt64) async throws {
    let read = await readAll(inode, handle)
    let expected: ReadOutcome = before.files[path]!.bytes.isEmpty ? .bytes([]) : .failed(.stale)
    guard read == expected else {
      throw RoundMismatch("a handle on \(path) opened before the change read \(read), expected \(expected)")
    }
  }

  /// Opens for reading; checks keepCache when the round knows what both
  /// this open and the inode's previous one pinned.
  private mutating func open(_ path: String, _ inode: UInt64, generation: Int64? = nil) async throws -> UInt64
  {
    let opened: OpenResult
    do {
      opened = try await fs.open(inode: inode, flags: O_RDONLY)
    } catch {
      throw RoundMismatch("open of \(path) threw \(error)")
    }
    try expectKeepCache(path, inode, opened, generation: generation ?? newGenerations[path])
    return opened.handle
  }

  private mutating func expectKeepCache(
    _ path: String, _ inode: UInt64, _ opened: OpenResult, generation: Int64?
  )
    throws
  {
    if let previous = pinned[inode], let generation, opened.keepCache != (previous == generation) {
      throw RoundMismatch(
        "open of \(path) (generation \(generation), the previous open's \(previous)): keepCache \(opened.keepCache)"
      )
    }
    pinned[inode] = generation
  }

  /// After a read found its generation gone, the next open pins the new
  /// version, and stat shows its size. If deleted, the open is ESTALE and
  /// the lookup the kernel then makes finds the name absent (so `cat` gets
  /// ENOENT, and O_CREAT creates it).
  private mutating func openAgain(_ path: String, _ inode: UInt64) async throws {
    guard let file = after.files[path] else {
      do {
        let handle = try await fs.open(inode: inode, flags: O_RDONLY).handle
        fs.release(inode: inode, handle: handle)
      } catch let errno as Errno where errno == .stale {
        let kind = try await fs.kind(at: path)
        guard kind == nil else {
          throw RoundMismatch("\(path) was deleted, but a lookup after an open's ESTALE shows a \(kind!)")
        }
        return
      }
      throw RoundMismatch("\(path) was deleted, but an open after a read failed with ESTALE succeeded")
    }
    try await expectRead(path, inode)
    let (attributes, _) = try await fs.getattr(inode: inode)
    guard attributes.size == UInt64(file.bytes.count) else {
      throw RoundMismatch(
        "\(path): stat after ESTALE shows \(attributes.size) bytes, not \(file.bytes.count)")
    }
  }

  /// An open of a file a lookup showed, before the TTLs: it succeeds (also
  /// for a deleted object: the lookup's metadata is fresh) and pins the old
  /// version (ESTALE, or `[]` when that was empty) or the new one.
  private mutating func openShown(_ path: String, _ inode: UInt64) async throws {
    let old = before.files[path]?.bytes
    let new = after.files[path]?.bytes
    let opened: OpenResult
    do {
      opened = try await fs.open(inode: inode, flags: O_RDONLY)
    } catch {
      throw RoundMismatch("\(path): an open of what a lookup showed threw \(error)")
    }
    let read = await readAll(inode, opened.handle)
    fs.release(inode: inode, handle: opened.handle)
    var allowed: [ReadOutcome] = []
    if let old { allowed.append(old.isEmpty ? .bytes([]) : .failed(.stale)) }
    if let new { allowed.append(.bytes(new)) }
    guard allowed.contains(read) else {
      throw RoundMismatch("\(path): an open of what a lookup showed read \(read), expected one of \(allowed)")
    }
    // Which version it pinned, when the read tells: the old one fails or is
    // empty; the new one is the only one left to read bytes from.
    let generation: Int64?
    switch (read, old, new) {
    case (.failed, _, _): generation = oldGenerations[path]
    case (.bytes(let bytes), let old?, let new) where old.isEmpty && bytes.isEmpty:
      generation = new?.isEmpty == true ? nil : oldGenerations[path]
    case (.bytes, _, _): generation = newGenerations[path]
    }
    try expectKeepCache(path, inode, opened, generation: generation)
    if read == .failed(.stale) { try await openAgain(path, inode) }
  }

  /// An open now reads exactly the bucket's bytes.
  private mutating func expectRead(_ path: String, _ inode: UInt64) async throws {
    let handle = try await open(path, inode)
    let read = await readAll(inode, handle)
    fs.release(inode: inode, handle: handle)
    guard read == .bytes(after.files[path]!.bytes) else {
      throw RoundMismatch(
        "\(path) read \(read), expected \(text(after.files[path]!.bytes)!.debugDescription)")
    }
  }

  private func readAll(_ inode: UInt64, _ handle: UInt64) async -> ReadOutcome {
    do {
      return .bytes(try await fs.readAll(inode, handle))
    } catch let errno as Errno {
      return .failed(errno)
    } catch {
      return .failed(.io)
    }
  }

  // MARK: - Metadata

  /// setfattr of user.custom.k right after the overwrite "always decides
  /// against the current version" (docs/SEMANTICS.md#consistency-other-clients):
  /// XATTR_CREATE is EEXIST when the new version has k, XATTR_REPLACE ENODATA
  /// when it has not, else k is set on the new version.
  /// (The PATCH carries ifGenerationMatch too, and a refusal is confirmed
  /// against metadata fetched within a second: ReferenceModelTests.
  /// testASetxattrRightAfterAnOverwriteElsewhereDecidesAgainstTheNewVersion.)
  /// The known divergence: a refusal, which sends nothing, is decided on
  /// metadata fetched less than a second ago (docs/SEMANTICS.md#xattrs-set),
  /// so when the mount fetched the old version just before the change
  /// (`fetchedJustBefore`: by an open in step 1, or what one started, such
  /// as a walk's fetch; the same instant on the manual clock),
  /// the old version's refusal may stand, and setting the value the old
  /// version had may send nothing.
  private mutating func setxattrAtOnce(
    _ path: String, _ inode: UInt64, flags: XattrFlags, fetchedJustBefore: Bool
  ) async throws {
    func refusal(_ version: Model) -> Errno? {
      let has = version.files[path]?.attributes.custom["k"] != nil
      return flags == .create && has ? .exists : flags == .replace && !has ? .noData : nil
    }
    let value = "m\(Int.random(in: 0..<9, using: &generator))"
    let expected = refusal(after)
    var got: Errno?
    do {
      try await fs.setxattr(inode: inode, name: "user.custom.k", value: Array(value.utf8), flags: flags)
    } catch let errno as Errno {
      got = errno
    }
    let named = flags == .create ? "XATTR_CREATE" : flags == .replace ? "XATTR_REPLACE" : "no flag"
    let stale = refusal(before)
    if fetchedJustBefore, let stale, got == stale { return }
    guard got == expected else {
      throw RoundMismatch(
        "setxattr user.custom.k=\(value) (\(named)) of \(path): \(got?.description ?? "success"), "
          + "expected \(expected?.description ?? "success")")
    }
    guard got == nil else { return }
    // Setting the value the old version had sends nothing, on the same grounds.
    let staleNoOp = fetchedJustBefore && before.files[path]?.attributes.custom["k"] == value
    if staleNoOp, store.object(path)?.custom["k"] != value { return }
    after.files[path]!.attributes.custom["k"] = value
  }

  static let xattrNames = [
    "user.contentType", "user.cacheControl", "user.custom.k", "user.custom.x", "user.size", "user.generation",
  ]

  static func properties(_ file: ModelFile, generation: Int64) -> [String: String] {
    var properties = ["user.size": "\(file.bytes.count)", "user.generation": "\(generation)"]
    properties["user.contentType"] = file.attributes.contentType
    properties["user.cacheControl"] = file.attributes.fields[.cacheControl]
    properties["user.custom.k"] = file.attributes.custom["k"]
    properties["user.custom.x"] = file.attributes.custom["x"]
    return properties
  }

  /// getfattr of the file shows one of `versions` whole: its properties,
  /// size and generation.
  private func expectProperties(_ path: String, _ inode: UInt64, oneOf versions: [Version]) async throws {
    var shown: [String: String] = [:]
    for name in Self.xattrNames {
      do {
        shown[name] = text(try await fs.getxattr(inode: inode, name: name))
      } catch let errno as Errno where errno == .noData {
        continue
      } catch {
        throw RoundMismatch("getfattr -n \(name) \(path) threw \(error)")
      }
    }
    let expected = versions.compactMap { version in
      switch version {
      case .before: before.files[path].map { Self.properties($0, generation: oldGenerations[path]!) }
      case .after: after.files[path].map { Self.properties($0, generation: newGenerations[path]!) }
      }
    }
    guard expected.contains(shown) else {
      throw RoundMismatch(
        "getfattr -d \(path) shows \(shown.sorted { $0.key < $1.key }), expected \(expected)")
    }
  }

  // MARK: - Lookups and listings

  /// Looks `path` up from the root as the kernel would, stats what it
  /// finds, and checks both against `allowed`; the file's inode, if one.
  @discardableResult
  private func expectOneOf(_ path: String, _ allowed: [Shown]) async throws -> UInt64? {
    let (found, inode) = try await lookUp(path)
    guard allowed.contains(found) else {
      throw RoundMismatch("a lookup of \(path) shows \(found), expected \(allowed.map(\.description))")
    }
    guard case .file = found else { return nil }
    let stat: FileAttributes
    do {
      stat = try await fs.getattr(inode: inode).0
    } catch {
      throw RoundMismatch("stat of \(path) threw \(error)")
    }
    guard allowed.contains(.file(size: Int(stat.size))) else {
      throw RoundMismatch("stat of \(path) shows \(stat.size) bytes, expected \(allowed.map(\.description))")
    }
    return inode
  }

  /// What a lookup of each component from the root shows, and the inode
  /// of the last one found.
  private func lookUp(_ path: String) async throws -> (Shown, UInt64) {
    var inode = InodeTable.rootInode
    var kind = FileAttributes.Kind.directory
    var size: UInt64 = 0
    for component in path.split(separator: "/") {
      guard kind == .directory else { return (.notDirectory, inode) }
      let entry: Entry
      do {
        entry = try await fs.lookup(parent: inode, name: String(component))
      } catch {
        throw RoundMismatch("lookup of \(component) on the way to \(path) threw \(error)")
      }
      guard let attributes = entry.attributes else { return (.absent, inode) }
      inode = attributes.inode
      kind = attributes.kind
      size = attributes.size
    }
    return (kind == .directory ? .directory : .file(size: Int(size)), inode)
  }

  /// A readdir of `directory` alone shows exactly the bucket's entries in
  /// it, at once: "in the next listing" (new, gone, the new size).
  private func expectListing(_ directory: String) async throws {
    let (shown, inode) = try await lookUp(directory)
    guard shown == .directory else { return }  // a new directory the mount does not show yet
    var listed: [String: Shown] = [:]
    do {
      for (name, entry) in try await fs.entries(of: inode, perCall: 3) {
        guard let attributes = entry.attributes else { continue }
        listed[name] = attributes.kind == .directory ? .directory : .file(size: Int(attributes.size))
      }
    } catch {
      throw RoundMismatch("a listing of /\(directory) threw \(error)")
    }
    let prefix = directory.isEmpty ? "" : directory + "/"
    var expected: [String: Shown] = [:]
    for (path, shown) in after.shownTree
    where path.hasPrefix(prefix) && !path.dropFirst(prefix.count).contains("/") {
      expected[String(path.dropFirst(prefix.count))] = shown
    }
    guard listed == expected else {
      throw RoundMismatch(
        "a listing of /\(directory) shows \(listed.sorted { $0.key < $1.key }), "
          + "expected \(expected.sorted { $0.key < $1.key })")
    }
  }

  /// A walk of the tree shows exactly the bucket: names, kinds and sizes.
  private func expectTree() async throws {
    try await settle()
    let shown: [String: Shown]
    do {
      shown = try await ModelRun.shownTree(of: fs)
    } catch {
      throw RoundMismatch("walking the tree threw \(error)")
    }
    let expected = after.shownTree
    guard shown == expected else {
      let wrong = Set(shown.keys).union(expected.keys).sorted().filter { shown[$0] != expected[$0] }
      throw RoundMismatch(
        "a walk shows "
          + wrong.map { path in
            "\(path): \(shown[path]?.description ?? "nothing") (expected \(expected[path]?.description ?? "nothing"))"
          }.joined(separator: ", "))
    }
  }
}

extension ModelRun {
  /// Every path a fresh walk of the tree shows, with what its readdir entries say.
  static func shownTree(of fs: BucketFileSystem) async throws -> [String: Shown] {
    var tree: [String: Shown] = [:]
    var pending: [(UInt64, String)] = [(InodeTable.rootInode, "")]
    while let (inode, prefix) = pending.popLast() {
      for (name, entry) in try await fs.entries(of: inode, perCall: 3) {
        guard let attributes = entry.attributes else { continue }
        if attributes.kind == .directory {
          tree[prefix + name] = .directory
          pending.append((attributes.inode, prefix + name + "/"))
        } else {
          tree[prefix + name] = .file(size: Int(attributes.size))
        }
      }
    }
    return tree
  }
}

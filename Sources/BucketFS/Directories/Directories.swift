import FUSE
import ObjectStore
import Synchronization

/// The names a readdir pass gave since the first entry, which become its
/// directory's complete set when it reaches the end (``DirectoryCache``).
struct ReaddirPass {
  /// Nil: the pass began elsewhere, ended, or grew past ``DirectoryCache/maxNames``.
  private var names: Set<ObjectKey>?
  /// The oldest page's time: the listing is as fresh as that.
  private var at: Double

  /// A pass that began at no first entry: it records nothing.
  init() {
    names = nil
    at = 0
  }

  /// A pass from the first entry, begun at `now`.
  init(startedAt now: Double) {
    names = []
    at = now
  }

  /// Names handed the kernel, each from a page answered at its time. With
  /// `complete` (the end reached): the names since the first entry and
  /// their time, once.
  mutating func note(_ listed: [(String, Double)], complete: Bool) -> (names: Set<ObjectKey>, at: Double)? {
    guard var known = names else { return nil }
    for (name, answeredAt) in listed {
      known.insert(ObjectKey(name))
      at = min(at, answeredAt)
    }
    names = known.count > DirectoryCache.maxNames ? nil : known
    guard complete, let whole = names else { return nil }
    names = nil
    return (whole, at)
  }
}

/// One open directory (a ``Handle/directory(_:)``): its listing, then the
/// files created in it and not stored yet, which a pass shows after the
/// listed entries, and its ``ReaddirPass``.
final class OpenDirectory: Sendable {
  let stream: DirectoryStream
  /// Whether its opendir was told to the walks (one that the kernel answers from its own cache is not).
  let walked: Bool
  private struct Pass {
    var inFlight: [FileInFlight]
    /// The index of the first in-flight file: the listing's length, once a pass reached its end.
    var end: Int?
    var names = ReaddirPass()
  }
  private let pass: Mutex<Pass>

  init(stream: DirectoryStream, inFlight: [FileInFlight], walked: Bool) {
    self.stream = stream
    self.walked = walked
    self.pass = Mutex(Pass(inFlight: inFlight))
  }

  /// A pass starts again from the first entry at `now`, with the files in flight now.
  func restart(inFlight: [FileInFlight], at now: Double) {
    pass.withLock { $0 = Pass(inFlight: inFlight, names: ReaddirPass(startedAt: now)) }
  }

  /// ``ReaddirPass/note(_:complete:)`` of this handle's pass.
  func noteListed(_ names: [(String, Double)], complete: Bool) -> (names: Set<ObjectKey>, at: Double)? {
    pass.withLock { $0.names.note(names, complete: complete) }
  }

  /// Where the in-flight files start (`index`, if this pass is the first to
  /// reach the listing's end), and which they are.
  func inFlight(fromEndAt index: Int) -> (end: Int, files: [FileInFlight]) {
    pass.withLock { pass in
      if pass.end == nil { pass.end = index }
      return (pass.end ?? index, pass.inFlight)
    }
  }
}

/// Directory handles over ``DirectoryStream``s: what each readdir pass
/// shows, and what it tells the walks and the directory cache.
struct Directories: MountComponent, Sendable {
  let context: MountContext
  let nodes: NodeTable
  let entries: AttributeBuilder
  let handles: HandleTable
  /// Tree walks and the listings they fetch ahead (SubtreeWalk.swift).
  let walks: SubtreeWalks
  let directoryCache: DirectoryCache
  let kernelListings: KernelListings

  func opendir(inode: UInt64) async throws -> OpenResult {
    let key = try nodes.node(inode, kind: .directory).key
    let opening = kernelListings.opening(key)
    // The kernel answers from what it kept: nothing to fetch for a walk.
    let walked = opening != .keep
    let listed =
      walked
      ? await walks.opened(key, parent: SubtreeWalks.parent(of: key, root: configuration.rootPrefix)) : nil
    let stream = DirectoryStream(
      prefix: key, context: context, pageSize: configuration.pageSize, listed: listed,
      placeholders: configuration.posixAttributes)
    let inFlight = directoryCache.filesInFlight(in: key)
    let handle = handles.put(.directory(OpenDirectory(stream: stream, inFlight: inFlight, walked: walked)))
    return OpenResult(handle: handle, keepCache: opening == .keep, cacheDirectory: opening != nil)
  }

  func readdir(inode: UInt64, handle: UInt64, offset: UInt64, into buffer: DirectoryBuffer) async throws {
    guard case .directory(let directory) = handles.find(handle) else { throw Errno.badHandle }
    let stream = directory.stream
    diagnostics.logger.trace("readdir \(stream.prefix) handle \(handle) offset \(offset)")
    if offset == 0 {
      await stream.rewind()
      directory.restart(inFlight: directoryCache.filesInFlight(in: stream.prefix), at: clock())
    }
    var listedNames: [(String, Double)] = []
    defer { _ = directory.noteListed(listedNames, complete: false) }
    let own = entries.attributes(inode: inode, kind: .directory, facts: nil)
    let dot = Entry(attributes: own, entryTimeout: 0, attributeTimeout: 0)
    if offset == 0, !buffer.add(name: ".", entry: dot, nextOffset: 1) { return }
    if offset <= 1, !buffer.add(name: "..", entry: dot, nextOffset: 2) { return }
    // An offset no readdir gave (a garbage seekdir) is an index like any
    // other, clamped: past the end it lists nothing.
    var index = Int(clamping: max(offset, 2) - 2)
    var added = false
    var subdirectories: [String] = []
    var files: [SiblingPrefetch.File] = []
    var unheld: [ListedEntry] = []
    defer {
      walks.read(stream.prefix)
      directoryCache.readdirGave(stream.prefix, files: files, subdirectories: subdirectories, unheld: unheld)
    }
    while true {
      let batch: ArraySlice<ListedEntry>
      do {
        // Once some entries are packed, send them rather than wait for a page.
        batch = try await stream.entries(from: index, fetch: !added)
      } catch {
        let failure = diagnostics.failure(error, operation: "list", key: stream.prefix)
        // Entries already packed are worth sending; the next call retries.
        if added {
          diagnostics.log(failure, during: "readdir")
          return
        }
        throw failure
      }
      if batch.isEmpty {
        if let whole = directory.noteListed(listedNames, complete: true) {
          directoryCache.listedWhole(stream.prefix, names: whole.names, at: whole.at)
        }
        listedNames = []
        addInFlight(directory, from: index, into: buffer)
        return
      }
      for listed in batch {
        // Fresh from when the page was answered, however long the reader paused.
        let now = listed.answeredAt
        // The kernel makes a pass's first call a readdirplus whether or not
        // the names will be stat-ed (READDIRPLUS_AUTO): its files go without
        // nodes, so a walk holds none of them, and a stat of one is a lookup
        // answered from this page. Later readdirplus calls come after a
        // lookup in the directory (`ls -l`), and hold what they give.
        let held = buffer.isPlus && (offset > 0 || listed.kind == .directory)
        // Only an entry the kernel holds shows facts: the rest show a dirent.
        let facts = held ? listed.metadata.map(FileFacts.init) : nil
        // The held node's kind and facts when newer than the page's.
        let (inode, kind, shown) = nodes.shown(
          listed.key, kind: listed.kind, metadata: listed.metadata, facts: facts, at: now,
          counting: held)
        let next = UInt64(index) + 3
        let entry =
          held
          ? entries.entry(inode: inode, kind: kind, facts: shown, answeredAt: now)
          : entries.dirent(inode: inode, kind: kind, metadata: listed.metadata)
        guard buffer.add(name: listed.name, entry: entry, nextOffset: next, held: held) else {
          if held { nodes.forget(inode: inode, count: 1) }
          return
        }
        added = true
        if buffer.isPlus, !held { unheld.append(listed) }
        listedNames.append((listed.name, listed.answeredAt))
        index += 1
        if listed.kind == .directory { subdirectories.append(listed.key) }
        // A dirent's facts were not parsed: its size and generation are the page's.
        if kind == .file, let size = shown?.size ?? listed.metadata.map({ UInt64(max($0.size, 0)) }),
          let generation = shown?.generation ?? listed.metadata?.generation
        {
          files.append(.init(key: listed.key, inode: inode, size: size, generation: generation))
        }
      }
    }
  }

  /// The files in flight, after the listing's `end` (known once a pass gets
  /// there); one stored meanwhile is in the listing, or in the next pass.
  private func addInFlight(_ directory: OpenDirectory, from index: Int, into buffer: DirectoryBuffer) {
    let (end, inFlight) = directory.inFlight(fromEndAt: index)
    guard index >= end else { return }
    for (position, file) in inFlight.enumerated().dropFirst(index - end)
    where directoryCache.isInFlight(directory.stream.prefix + file.name, inode: file.inode) {
      if buffer.isPlus { nodes.retain(file.inode) }
      let nextOffset = UInt64(end + position) + 3
      guard buffer.add(name: file.name, entry: entries.staged(file.inode), nextOffset: nextOffset) else {
        if buffer.isPlus { nodes.forget(inode: file.inode, count: 1) }
        return
      }
    }
  }

  /// Handle `handle`, taken from the table by its release, closed.
  func released(_ directory: OpenDirectory, handle: UInt64) {
    if directory.walked { walks.released(directory.stream.prefix) }
  }
}

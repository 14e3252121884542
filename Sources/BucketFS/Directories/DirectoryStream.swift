import ObjectStore

extension ObjectMetadata {
  /// What a listing shows of directory `key` that has no placeholder:
  /// generation 0, no keys (its stat shows the mount's defaults).
  static func noPlaceholder(_ key: String) -> ObjectMetadata {
    ObjectMetadata(
      bucket: "", name: key, size: 0, generation: 0, metageneration: 0, timeCreated: "", updated: "")
  }
}

/// One entry of a directory listing.
struct ListedEntry: Sendable {
  let name: String
  let kind: Node.Kind
  /// The object name (file, link) or prefix ending in `/` (directory).
  let key: String
  let metadata: ObjectMetadata?
  /// When the service answered the page it came from.
  let answeredAt: Double
}

/// Streams one directory from paged list calls (docs/SEMANTICS.md#listing-paging): the first page is
/// fetched when the reader asks for it, so `ls -f | head` costs one call; a
/// reader that gets past it is reading the whole directory, and from then on
/// the next page is fetched while it consumes the current one — asked for as
/// soon as the current page's token is known, while the reader waits for that
/// page to be decoded. At most two pages are held, however large the
/// directory is.
actor DirectoryStream: MountComponent {
  let prefix: String
  nonisolated let context: MountContext
  private let pageSize: Int
  /// Lists with includeTrailingDelimiter: each subdirectory's placeholder
  /// comes with its prefix, so its stored mode and owner (or that it has
  /// none) are known from the listing (docs/SEMANTICS.md#attributes-modes).
  private let placeholders: Bool

  /// The current page's entries and the listing index of the first one.
  private var entries: [ListedEntry] = []
  private var base = 0
  private var nextPageToken: String?
  private var started = false
  /// Files that may yet turn out to be shadowed by a directory of the same
  /// name on a later page (the directory wins, docs/SEMANTICS.md#listing-conflicts).
  private var deferred: [ListedEntry] = []
  /// Placeholders that came at the end of a page without their prefix (the
  /// service puts both on one page, but its reference does not promise it).
  private var unmatched: [String: ObjectMetadata] = [:]
  /// Pages fetched since the start, and the next one when already under way.
  private var pagesFetched = 0
  private var pageAhead: Task<DatedPage, any Error>?
  /// The page token `pageAhead` was asked for with.
  private var pageAheadToken: String?
  /// The number of the page the reader is waiting for, if any.
  private var awaited: Int?
  /// Counts restarts, so that a token from an abandoned pass is ignored.
  private var pass = 0
  /// A listing given at init that no reader has asked for yet.
  private var unread = false
  /// Page tokens of this pass: one coming back would list the same pages forever.
  private var tokens = Set<String>()

  /// `listed`: the whole listing, already known (a tree walk's flat pages
  /// made it); a rewind lists again.
  init(
    prefix: String, context: MountContext, pageSize: Int, listed: [ListedEntry]? = nil,
    placeholders: Bool = true
  ) {
    self.prefix = prefix
    self.context = context
    self.pageSize = pageSize
    self.placeholders = placeholders
    if let listed {
      entries = listed
      started = true
      unread = true
    }
  }

  /// The entries from listing position `index` to the end of the page that
  /// holds it; empty past the end. Going back before the current page lists
  /// again from the start. Without `fetch`, also empty when that page has not
  /// been fetched: a reader with entries in hand replies with them first.
  func entries(from index: Int, fetch: Bool = true) async throws -> ArraySlice<ListedEntry> {
    unread = false
    if index < base { restart() }
    while index >= base + entries.count {
      if started && nextPageToken == nil { return [] }
      guard fetch else { return [] }
      try await fetchNextPage()
    }
    return entries[(index - base)...]
  }

  /// Starts the listing again (a rewind to offset 0).
  func rewind() {
    if started && !unread { restart() }
  }

  deinit {
    pageAhead?.cancel()
  }

  private func restart() {
    cancelPageAhead()
    pass += 1
    pagesFetched = 0
    entries = []
    base = 0
    nextPageToken = nil
    started = false
    deferred = []
    unmatched = [:]
    tokens = []
  }

  private func fetchNextPage() async throws {
    let number = pagesFetched + 1
    awaited = number
    defer { awaited = nil }
    let page: DatedPage
    do {
      if let ahead = pageAhead {
        pageAhead = nil
        pageAheadToken = nil
        page = try await withTaskCancellationHandler {
          try await ahead.value
        } onCancel: {
          ahead.cancel()
        }
      } else {
        page = try await list(started ? nextPageToken : nil, number: number)
      }
    } catch {
      // A page started early from this one's token must not stand in for it.
      cancelPageAhead()
      throw error
    }
    if let token = page.page.nextPageToken, !tokens.insert(token).inserted {
      cancelPageAhead()
      throw StorageError.invalidResponse("list \(prefix): page token \(token) came back; the listing loops")
    }
    base += entries.count
    entries = absorb(page.page, answeredAt: page.answeredAt)
    nextPageToken = page.page.nextPageToken
    started = true
    pagesFetched += 1
    if let token = nextPageToken, pageAheadToken != token {
      cancelPageAhead()
      if pagesFetched >= 2 { startPageAhead(token, number: number + 1) }
    }
  }

  /// A page's token is known (only past the first page): if the reader is
  /// waiting for that page, the next page is asked for now.
  private func tokenArrived(_ token: String, page number: Int, pass: Int) {
    guard pass == self.pass, awaited == number, pageAhead == nil else { return }
    startPageAhead(token, number: number + 1)
  }

  private func startPageAhead(_ token: String, number: Int) {
    let list = lister()
    pageAheadToken = token
    pageAhead = tasks.start(.cancel) { try await list(token, number) }
  }

  private func cancelPageAhead() {
    pageAhead?.cancel()
    pageAhead = nil
    pageAheadToken = nil
  }

  private func list(_ token: String?, number: Int) async throws -> DatedPage {
    try await lister()(token, number)
  }

  /// Holds the stream weakly, so that dropping it cancels the page asked ahead.
  private func lister() -> @Sendable (String?, Int) async throws -> DatedPage {
    let (store, prefix, pageSize, pass, clock, trailing) = (
      self.store, self.prefix, self.pageSize, self.pass, self.clock, self.placeholders
    )
    let stream = WeakStream(self)
    let tasks = self.tasks
    return { token, number in
      // The first page's token is never used early (goal: one call for a reader that stops there).
      var request = ListRequest(
        prefix: prefix, delimiter: "/", includeTrailingDelimiter: trailing, pageSize: pageSize,
        pageToken: token)
      if number >= 2 {
        request.onNextPageToken = { next in
          tasks.start(.cancel) { await stream.value?.tokenArrived(next, page: number, pass: pass) }
        }
      }
      let page = try await store.list(request)
      return DatedPage(page: page, answeredAt: clock())
    }
  }

  private final class WeakStream: Sendable {
    weak let value: DirectoryStream?
    init(_ value: DirectoryStream) { self.value = value }
  }

  /// Turns a page into entries in the service's order: invalid names and the
  /// directory's own placeholder dropped, files shadowed by a directory dropped.
  /// Subdirectories' placeholders (items ending in `/`) are never files: they
  /// are the metadata of their directory's entry.
  private func absorb(_ page: ListPage, answeredAt: Double) -> [ListedEntry] {
    let hasMore = page.nextPageToken != nil
    let lastKey = [page.items.last?.name, page.prefixes.last].compactMap { $0 }.max(by: Names.precedes)
    var found = unmatched
    unmatched = [:]
    if placeholders {
      for item in page.items where Names.directoryComponent(listed: item.name, under: prefix) != nil {
        found[item.name] = item
      }
    }
    var directories: [ListedEntry] = []
    var names = Set<ObjectKey>()
    for listed in page.prefixes {
      guard let name = Names.directoryComponent(listed: listed, under: prefix) else { continue }
      names.insert(ObjectKey(name))
      directories.append(
        ListedEntry(
          name: String(name), kind: .directory, key: listed,
          metadata: placeholder(of: listed, in: &found, hasMore: hasMore, lastKey: lastKey),
          answeredAt: answeredAt))
    }
    // Only a placeholder at the page's end can be waiting for its prefix.
    if hasMore, let lastKey { unmatched = found.filter { !Names.precedes($0.key, lastKey) } }
    var files: [ListedEntry] = []
    let carried = deferred
    deferred = []
    for item in page.items {
      guard let name = Names.fileComponent(item: item.name, under: prefix) else { continue }
      files.append(
        ListedEntry(
          name: String(name), kind: Node.Kind(object: item), key: item.name, metadata: item,
          answeredAt: answeredAt))
    }
    // Files from earlier pages sort before everything on this one.
    var result: [ListedEntry] = []
    result.reserveCapacity(carried.count + directories.count + files.count)
    var fileIndex = 0
    var directoryIndex = 0
    for file in carried where keep(file, names: names, hasMore: hasMore, lastKey: lastKey) {
      result.append(file)
    }
    while fileIndex < files.count || directoryIndex < directories.count {
      if directoryIndex == directories.count
        || (fileIndex < files.count && Names.precedes(files[fileIndex].key, directories[directoryIndex].key))
      {
        let file = files[fileIndex]
        fileIndex += 1
        if keep(file, names: names, hasMore: hasMore, lastKey: lastKey) { result.append(file) }
      } else {
        result.append(directories[directoryIndex])
        directoryIndex += 1
      }
    }
    return result
  }

  /// A subdirectory's placeholder from the page; one of generation 0 when
  /// the listing shows it has none; nil when not known (not asked for, or
  /// the page ends with the prefix: then stat reads it).
  private func placeholder(
    of listed: String, in found: inout [String: ObjectMetadata], hasMore: Bool, lastKey: String?
  ) -> ObjectMetadata? {
    guard placeholders else { return nil }
    if let item = found.removeValue(forKey: listed) { return item }
    // The service pages one sequence of items and prefixes in name order
    // (maxResults counts both), and a placeholder sorts first under its
    // prefix: anything listed after the prefix, or the listing's end, means
    // there is none. Only at the page's end could it still come next.
    guard !hasMore || lastKey.map({ Names.precedes(listed, $0) }) == true else { return nil }
    return .noPlaceholder(listed)
  }

  /// Whether a file is shown now; a file whose directory twin could still
  /// come on a later page (it would sort after this page) is deferred.
  private func keep(_ file: ListedEntry, names: Set<ObjectKey>, hasMore: Bool, lastKey: String?) -> Bool {
    if names.contains(ObjectKey(file.name)) {
      diagnostics.warnConflict(file.key)
      return false
    }
    if hasMore, let lastKey, Names.precedes(lastKey, file.key + "/") {
      deferred.append(file)
      return false
    }
    return true
  }
}

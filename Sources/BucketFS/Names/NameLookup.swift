import FUSE
import ObjectStore
import Synchronization

/// Lookups of names: from what the mount holds, from what the
/// ``DirectoryCache`` knows of the parent (a complete listing's absence, a
/// kept listing's entry), from a list call a burst of lookups in one
/// directory shares, or from one list call that shows the object and its
/// subtree (flat, one page, which fills the cache).
struct NameLookup: MountComponent, Sendable {
  /// A lookup that finds this many others under way in its directory joins
  /// one shared list call instead of making two requests of its own: fifty
  /// parallel `stat`s of cold files then cost about one request's time.
  static let burstSize = 3

  let context: MountContext
  /// The node and full metadata of each inode.
  let inodes: KnownInodes
  let entries: AttributeBuilder
  /// What is known of each directory: lookups are answered from it and fill it.
  let directoryCache: DirectoryCache

  func lookup(parent: UInt64, name: String) async throws -> Entry {
    let parentKey = try inodes.node(parent, kind: .directory).key
    let fileKey = try Names.key(name, under: parentKey, for: .existing)
    let directoryKey = fileKey + "/"
    if let entry = entries.cached(directoryKey) ?? entries.cached(fileKey) ?? entries.staged(key: fileKey) {
      return entry
    }
    let now = clock()
    if let entry = fromUnheld(fileKey: fileKey, directoryKey: directoryKey, now: now) { return entry }
    if directoryCache.knownAbsent(directory: parentKey, name: name, now: now, ttl: configuration.negativeTTL)
    {
      return .negative(timeout: configuration.negativeTTL)
    }
    if let entry = fromKept(name, in: parentKey, fileKey: fileKey, directoryKey: directoryKey, now: now) {
      return entry
    }

    let shared = join(parentKey)
    defer { leave(parentKey) }
    if let shared, let page = try? await shared.valueUnlessCancelled(),
      let entry = resolve(fileKey: fileKey, directoryKey: directoryKey, from: page)
    {
      return entry
    }

    if directoryCache.isCrowded(directoryKey, now: now) {
      return try await askApart(fileKey: fileKey, directoryKey: directoryKey)
    }
    return try await ask(fileKey: fileKey, directoryKey: directoryKey)
  }

  /// One list call from `name` up to `name0` (`0` follows `/`): the object
  /// `name` sorts first, then names that go on with a byte below `/`
  /// (`name-x`, `name.txt`, and what is under them), then the subtree
  /// `name/…`. Flat, one page (kept by the ``DirectoryCache``), unless the subtree was found larger lately: then by
  /// delimiter, where `name/` is one prefix. Only when those other names
  /// fill the page before it shows whether `name/` exists is the name asked
  /// for again, the object and its prefix apart (docs/SEMANTICS.md#listing-lookup).
  private func ask(fileKey: String, directoryKey: String) async throws -> Entry {
    let flat = directoryCache.flatLookup(of: directoryKey)
    let page: ListPage
    do {
      page = try await store.list(
        ListRequest(
          prefix: fileKey, delimiter: flat == nil ? "/" : nil, pageSize: configuration.pageSize,
          endOffset: fileKey + "0"))
    } catch {
      throw diagnostics.failure(error, operation: "list", key: fileKey)
    }
    let answeredAt = clock()
    let under = page.items.filter { $0.name.utf8.starts(with: directoryKey.utf8) }
    let isDirectory = !under.isEmpty || page.prefixes.contains { Names.same($0, directoryKey) }
    guard isDirectory || page.nextPageToken == nil else {
      directoryCache.noteCrowded(directoryKey, at: answeredAt)
      return try await askApart(fileKey: fileKey, directoryKey: directoryKey)
    }
    if let flat, isDirectory {
      let subtree = ListPage(items: under, prefixes: [], nextPageToken: page.nextPageToken)
      directoryCache.keep(lookedUp: directoryKey, page: subtree, answeredAt: answeredAt, flat: flat)
    }
    let metadata = page.items.first { Names.same($0.name, fileKey) }
    return answer(
      fileKey: fileKey, directoryKey: directoryKey, isDirectory, metadata,
      placeholder: Self.placeholder(of: directoryKey, first: under.first, flat: flat != nil), at: answeredAt)
  }

  /// The object and what is under its prefix, asked for at once: a page of
  /// the subtree, flat, unless it was found larger.
  private func askApart(fileKey: String, directoryKey: String) async throws -> Entry {
    let flat = directoryCache.flatLookup(of: directoryKey)
    async let object = inodes.metadata.fetchIfPresent(fileKey)
    async let children = store.list(
      ListRequest(
        prefix: directoryKey, delimiter: flat == nil ? "/" : nil, pageSize: flat?.size ?? 1))
    let isDirectory: Bool
    let placeholder: ObjectMetadata?
    do {
      let page = try await children
      isDirectory = !page.items.isEmpty || !page.prefixes.isEmpty
      placeholder = Self.placeholder(of: directoryKey, first: page.items.first, flat: flat != nil)
      if let flat, isDirectory {
        directoryCache.keep(lookedUp: directoryKey, page: page, answeredAt: clock(), flat: flat)
      }
    } catch {
      throw diagnostics.failure(error, operation: "list", key: directoryKey)
    }
    let metadata = try await object
    return answer(
      fileKey: fileKey, directoryKey: directoryKey, isDirectory, metadata, placeholder: placeholder,
      at: clock())
  }

  /// The placeholder sorts first under its prefix: its stored mode and owner
  /// come free. A flat page holds objects only, in order: a first object
  /// under the prefix that is not the placeholder means it has none (told by
  /// generation 0); a delimiter page does not tell.
  private static func placeholder(of directoryKey: String, first item: ObjectMetadata?, flat: Bool)
    -> ObjectMetadata?
  {
    guard let item else { return nil }
    if Names.same(item.name, directoryKey) { return item }
    guard flat else { return nil }
    return .noPlaceholder(directoryKey)
  }

  /// Counts a lookup of directory `key`, answered at `at`, with its
  /// placeholder when the answer showed it (its stored mode and owner).
  private func directory(_ key: String, placeholder: ObjectMetadata?, at now: Double) -> Entry {
    let facts = placeholder.flatMap { Names.same($0.name, key) ? FileFacts($0) : nil }
    return entries.directory(
      inodes.nodes.shown(key, kind: .directory, metadata: nil, facts: facts, at: now).inode)
  }

  /// The directory wins over an object of the same name.
  private func answer(
    fileKey: String, directoryKey: String, _ isDirectory: Bool, _ metadata: ObjectMetadata?,
    placeholder: ObjectMetadata?, at answeredAt: Double
  ) -> Entry {
    if isDirectory {
      if metadata != nil { diagnostics.warnConflict(fileKey) }
      return directory(directoryKey, placeholder: placeholder, at: answeredAt)
    }
    guard let metadata else { return .negative(timeout: configuration.negativeTTL) }
    return entries.object(fileKey, metadata, at: answeredAt)
  }

  /// The answer of the entry a readdirplus gave without a node (taken
  /// either way), while younger than the metadata TTL and unless the mount
  /// holds a node of the name, which may know better.
  private func fromUnheld(fileKey: String, directoryKey: String, now: Double) -> Entry? {
    guard let listed = directoryCache.takeUnheld(fileKey), let metadata = listed.metadata,
      now - listed.answeredAt < configuration.metadataTTL,
      inodes.nodes.held(fileKey: fileKey, directoryKey: directoryKey).inode == nil
    else { return nil }
    return entries.object(fileKey, metadata, at: listed.answeredAt)
  }

  /// The answer the cache's kept listing of the parent gives: the entry as
  /// listed, or "absent" while the listing is younger than the negative TTL.
  private func fromKept(
    _ name: String, in parentKey: String, fileKey: String, directoryKey: String, now: Double
  )
    -> Entry?
  {
    // A node the mount holds past its TTL, or found gone by a read, may know
    // better than a listing answered before: ask the service.
    if inodes.nodes.held(fileKey: fileKey, directoryKey: directoryKey).inode != nil { return nil }
    switch directoryCache.known(name, in: parentKey) {
    case .listed(let listed)?:
      if listed.kind == .directory {
        return directory(directoryKey, placeholder: listed.metadata, at: listed.answeredAt)
      }
      return listed.metadata.map { entries.object(fileKey, $0, at: listed.answeredAt) }
    case .absent(let since)? where now - since < configuration.negativeTTL:
      return .negative(timeout: configuration.negativeTTL)
    case .absent?, nil:
      return nil
    }
  }

  private func join(_ parentKey: String) -> Task<DatedPage, any Error>? {
    let now = clock()
    // A name missing from the page is answered ENOENT: the page may be no
    // older than a negative answer may be remembered.
    let maxAge = min(configuration.metadataTTL, configuration.negativeTTL)
    let (store, pageSize, clock) = (self.store, configuration.pageSize, self.clock)
    let trailing = configuration.posixAttributes
    return directoryCache.joinBurst(parentKey, now: now, maxAge: maxAge, size: Self.burstSize) {
      tasks.start(.cancel) {
        // With the subdirectories' placeholders: their stored modes come free.
        let page = try await store.list(
          ListRequest(
            prefix: parentKey, delimiter: "/", includeTrailingDelimiter: trailing, pageSize: pageSize))
        return DatedPage(page: page, answeredAt: clock())
      }
    }
  }

  private func leave(_ parentKey: String) {
    directoryCache.leaveBurst(parentKey)
  }

  /// The directory's placeholder as the page (asked with
  /// includeTrailingDelimiter, one that tells) shows it: the item, or one of
  /// generation 0 when it has none; the page lists past the prefix (resolve).
  private func placeholder(_ directoryKey: String, in page: ListPage) -> ObjectMetadata? {
    guard configuration.posixAttributes else { return nil }
    if let item = page.items.first(where: { Names.same($0.name, directoryKey) }) { return item }
    return .noPlaceholder(directoryKey)
  }

  /// The answer to a lookup from the first page of its directory's listing,
  /// when that page is enough to tell; nil when the name may be further on.
  private func resolve(fileKey: String, directoryKey: String, from answered: DatedPage) -> Entry? {
    let page = answered.page
    if page.nextPageToken != nil {
      let last = [page.items.last?.name, page.prefixes.last].compactMap { $0 }.max(by: Names.precedes)
      guard let last, Names.precedes(directoryKey, last) else { return nil }
    }
    let now = answered.answeredAt
    let metadata = page.items.first { Names.same($0.name, fileKey) }
    if page.prefixes.contains(where: { Names.same($0, directoryKey) }) {
      if metadata != nil { diagnostics.warnConflict(fileKey) }
      return directory(directoryKey, placeholder: placeholder(directoryKey, in: page), at: now)
    }
    guard let metadata else { return .negative(timeout: configuration.negativeTTL) }
    return entries.object(fileKey, metadata, at: now)
  }
}

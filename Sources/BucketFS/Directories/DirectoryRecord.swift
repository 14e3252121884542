import ObjectStore

/// Everything this mount knows of one directory's contents, in one record:
/// held by the ``DirectoryCache``, under its lock, and changed only by it.
struct DirectoryRecord {
  /// A set of names known to be the whole directory, as of `at`.
  struct NameSet {
    var names: Set<ObjectKey>
    var at: Double
  }
  /// A listing of the directory with its children's facts, as of `at`.
  struct Kept {
    let entries: [ListedEntry]
    let at: Double
  }
  /// Lookups under way in the directory, and the listing a burst of them shares.
  struct Burst {
    var lookups = 0
    var page: Task<DatedPage, any Error>?
    /// When `page` was asked for: lookups that keep a burst alive must not
    /// answer from one page forever.
    var pageAskedAt: Double = 0
  }

  /// Its complete name set, when it was seen listed fresh and whole (or was
  /// just created here).
  var complete: NameSet?
  /// A listing kept for its next `opendir`, and for lookups in it.
  var kept: Kept?
  /// When a lookup found its subtree over a page: lookups list it by delimiter.
  var foundLargeAt: Double?
  /// When a lookup's list call from its name was filled by other names
  /// before it showed the subtree: the name and the subtree are asked apart.
  var crowdedAt: Double?
  /// When a lookup of it kept its listing, for its own `opendir` to take.
  var lookedUpAt: Double?
  /// The files readdir gave of it lately, in listing order (sibling prefetch).
  var filesRead: [DirectoryCache.ListedFile]?
  /// The subdirectories readdir gave of it, in order, the latest ones (a
  /// walk's look-ahead).
  var subdirectories: [String]?
  var burst: Burst?
  /// The files created in it and not stored yet (name → inode): they are
  /// in it, listed after the stored entries.
  var writing: [ObjectKey: UInt64] = [:]
  /// Files in flight anywhere under it, its own included: it is not empty.
  var writingBelow = 0

  /// Nothing is known: the record goes.
  var isEmpty: Bool {
    complete == nil && kept == nil && foundLargeAt == nil && crowdedAt == nil && lookedUpAt == nil
      && filesRead == nil && subdirectories == nil && burst == nil && writingBelow == 0
  }

  /// Whether the directory is known not to hold `name`, by a complete set
  /// younger than `ttl`. A file in flight is a name it holds.
  func lacks(_ name: String, now: Double, ttl: Double) -> Bool {
    guard let complete, now - complete.at < ttl else { return false }
    return !complete.names.contains(ObjectKey(name))
  }

  /// The files in flight in it, in the order the service lists names.
  var filesInFlight: [FileInFlight] {
    writing.map { FileInFlight(name: $0.key.name, inode: $0.value) }.sorted {
      Names.precedes($0.name, $1.name)
    }
  }

  /// `files` join the ones read before, each once, at most twice `limit` (the latest).
  mutating func noteRead(_ files: [DirectoryCache.ListedFile], limit: Int) {
    guard let first = files.first else { return }
    // Taken out, so the appends below grow the one copy in place.
    var known = filesRead ?? []
    filesRead = nil
    if let last = known.last, !Names.precedes(last.key, first.key) {
      // A directory listed again (`ls`, then the shell's glob) gives the same names again.
      var seen = Set(known.lazy.map { ObjectKey($0.key) })
      for file in files where seen.insert(ObjectKey(file.key)).inserted { known.append(file) }
    } else {
      // The next entries of the same pass: in order after the last, none seen.
      known += files
    }
    // Cut back to `limit` once past twice it: a pass of a large directory
    // moves the list once every `limit` files, not at every call.
    if known.count > 2 * limit { known.removeFirst(known.count - limit) }
    filesRead = known
  }

  /// A lookup joins the burst; it starts the shared page (`start`) once
  /// `size` lookups are under way, and a page older than `maxAge` is asked again.
  mutating func joinBurst(
    now: Double, maxAge: Double, size: Int, start: () -> Task<DatedPage, any Error>
  ) -> Task<DatedPage, any Error>? {
    var burst = burst ?? Burst()
    burst.lookups += 1
    if burst.page != nil, now - burst.pageAskedAt > maxAge { burst.page = nil }
    if burst.page == nil, burst.lookups >= size {
      burst.pageAskedAt = now
      burst.page = start()
    }
    self.burst = burst
    return burst.page
  }

  mutating func leaveBurst() {
    guard var burst else { return }
    burst.lookups -= 1
    self.burst = burst.lookups > 0 ? burst : nil
  }
}

/// A file created through the mount and not stored yet, in its directory.
struct FileInFlight: Sendable, Equatable {
  let name: String
  let inode: UInt64
}

/// What ``DirectoryCache`` is told and what it answers with.
extension DirectoryCache {
  /// A change that can make what is kept wrong.
  enum Change {
    /// This mount stored `key` (a file, or a `dir/` placeholder): it joins its
    /// directory's complete set, and each directory on its path joins its
    /// parent's; kept listings it could make wrong are dropped. A file in
    /// flight at `key` is in flight no more.
    case stored(String)
    /// This mount created the placeholder `dir/` where nothing was, having
    /// asked at `since`: it is also a complete, empty listing.
    case createdDirectory(String, since: Double)
    /// This mount deleted or moved away file `key`: it leaves its directory's
    /// complete set (a `dir/` placeholder changes no set: the directory may
    /// live on). Kept listings it could make wrong are dropped.
    case removed(String)
    /// A write of `key` failed, or the bucket was asked about it afresh:
    /// the kept listings that show it may be older than what the service
    /// holds (another client's change) and are dropped; nothing else changes.
    case touched(String)
    /// File `inode` was created here at `key` and is not stored yet: it is
    /// in flight, and its name joins its directory's complete set.
    case createdInFlight(String, inode: UInt64)
    /// File `inode` at `key` is in flight no more without being stored
    /// (unlinked, or its last writer closed).
    case endedInFlight(String, inode: UInt64)
  }

  /// A file a readdir gave, with what sibling prefetch orders and fetches by.
  struct ListedFile: Sendable {
    let key: String
    let inode: UInt64
    let size: UInt64
    let generation: Int64
  }

  enum Known {
    case listed(ListedEntry)
    /// Not in the kept listing of its directory, answered at this time.
    case absent(since: Double)
  }

  /// How a lookup lists a directory's subtree: one flat page of `size`
  /// entries; `epoch` is handed back to ``keep(lookedUp:page:answeredAt:flat:)``.
  struct FlatLookup {
    let size: Int
    let epoch: Int
  }
}

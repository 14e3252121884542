import ObjectStore

/// Directory listings derived from a flat listing (no delimiter) of a
/// subtree, by the rules the delimiter listings of ``DirectoryStream`` follow
/// (SPEC §1): placeholders (`dir/`) make a directory but are not an entry of
/// it, an invalid component (empty, `.`, `..`, over 255 bytes) hides its
/// entry and everything under it, and a directory shadows a file of the same
/// name.
///
/// A flat listing is in byte order, which is the order of a depth-first walk:
/// a directory's keys are contiguous and its prefix `dir/` sorts before all
/// of them and exactly where the delimiter listing of its parent puts it. So
/// the objects fill a stack of open directories, and a directory is complete
/// as soon as a key outside it arrives. Only the open directories are held.
struct TreeListing {
  typealias Listing = (key: String, entries: [ListedEntry])

  private struct Open {
    let key: String
    /// Reachable from the root through valid components only.
    let visible: Bool
    var entries: [ListedEntry] = []
  }

  private var stack: [Open]
  /// Entries held in directories not yet complete.
  private(set) var held = 0
  private let onConflict: (String) -> Void

  init(root: String, onConflict: @escaping (String) -> Void = { _ in }) {
    stack = [Open(key: root, visible: true)]
    self.onConflict = onConflict
  }

  /// Takes the next object of the flat listing of the root prefix (in the
  /// service's order), from a page answered at `answeredAt`; returns the
  /// listings it completes, deepest first.
  mutating func add(_ item: ObjectMetadata, answeredAt: Double) -> [Listing] {
    let name = item.name
    var done: [Listing] = []
    while stack.count > 1, !name.utf8.starts(with: stack[stack.count - 1].key.utf8) {
      if let listing = pop() { done.append(listing) }
    }
    // A name outside the root (the service never sends one) is ignored.
    guard name.utf8.starts(with: stack[stack.count - 1].key.utf8) else { return done }
    let bytes = name.utf8
    var start = bytes.index(bytes.startIndex, offsetBy: stack[stack.count - 1].key.utf8.count)
    var cursor = start
    while cursor != bytes.endIndex {
      if bytes[cursor] == UInt8(ascii: "/") {
        let end = bytes.index(after: cursor)
        let component = Substring(bytes[start..<cursor])
        let parent = stack.count - 1
        let visible = stack[parent].visible && Names.isValidComponent(component)
        let key = String(Substring(bytes[bytes.startIndex..<end]))
        if visible {
          // Its placeholder sorts first under it: this item, or it has none.
          // Either way its stored mode and owner are known (PosixAttributes.swift).
          let placeholder =
            end == bytes.endIndex
            ? item : .noPlaceholder(key)
          stack[parent].entries.append(
            ListedEntry(
              name: String(component), kind: .directory, key: key, metadata: placeholder,
              answeredAt: answeredAt))
          held += 1
        }
        stack.append(Open(key: key, visible: visible))
        start = end
      }
      cursor = bytes.index(after: cursor)
    }
    let component = Substring(bytes[start...])
    if stack[stack.count - 1].visible, Names.isValidComponent(component) {
      stack[stack.count - 1].entries.append(
        ListedEntry(
          name: String(component), kind: Node.Kind(object: item), key: name, metadata: item,
          answeredAt: answeredAt))
      held += 1
    }
    return done
  }

  /// The end of the listing: every open directory is complete, the root last.
  mutating func finish() -> [Listing] {
    var done: [Listing] = []
    while !stack.isEmpty {
      if let listing = pop() { done.append(listing) }
    }
    return done
  }

  private mutating func pop() -> Listing? {
    let open = stack.removeLast()
    held -= open.entries.count
    guard open.visible else { return nil }
    let directories = Set(open.entries.lazy.filter { $0.kind == .directory }.map { ObjectKey($0.name) })
    guard !directories.isEmpty else { return (open.key, open.entries) }
    let entries = open.entries.filter { entry in
      guard entry.kind != .directory, directories.contains(ObjectKey(entry.name)) else { return true }
      onConflict(entry.key)
      return false
    }
    return (open.key, entries)
  }
}

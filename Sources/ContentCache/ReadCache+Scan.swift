extension ReadCache {
  /// Builds the index from the entries the directory holds (an earlier
  /// mount's), oldest use first, and deletes what cannot be trusted: maps
  /// that do not decode, data files without a map, temporary files of an
  /// interrupted write. Then trims to the limit, which may have shrunk.
  func load() {
    var maps: [String: Int64] = [:]
    var data: Set<String> = []
    for (name, modified) in disk.list(directory.path) {
      if name.hasSuffix(".map") {
        maps[String(name.dropLast(4))] = modified
      } else if name.hasSuffix(".data") {
        data.insert(String(name.dropLast(5)))
      } else if name.hasSuffix(".tmp") {
        disk.remove(directory.path + "/" + name)
      }
    }
    for base in data where maps[base] == nil { disk.remove(directory.path + "/" + base + ".data") }
    var found: [(entry: CacheEntry, bytes: Int64, modified: Int64)] = []
    for (base, modified) in maps {
      let path = directory.path + "/" + base
      guard let bytes = try? disk.contents(path + ".map"), let map = BlockMap(decoding: bytes),
        map.blockSize == Int(Self.blockSize),
        directory.entryPath(name: map.name, generation: map.generation) == path,
        data.contains(base) || map.blocks.isEmpty
      else {
        logger.info("read cache: removing unreadable entry \(path)")
        disk.remove(path + ".map")
        disk.remove(path + ".data")
        continue
      }
      let key = EntryKey(name: map.name, generation: map.generation)
      found.append((CacheEntry(key: key, path: path, map: map), map.storedBytes, modified))
    }
    found.sort { $0.modified < $1.modified }
    index.load(found.map { ($0.entry, $0.bytes) })
    delete(index.trim())
    metrics.stored(index.used)
  }
}

import NIOCore
import ObjectStore

// Uploads: the bytes this mount just stored become the new generation's entry.
extension ReadCache {
  /// An entry for the object this mount just stored from `source`, with its
  /// disk reserved, when it fits; its data file is the source's own file
  /// (a hard link), else it is empty. ``finish(upload:from:linked:crc:)``
  /// then lists its blocks. Nil when there is nothing to keep.
  func adopt(upload object: ObjectMetadata, from source: any UploadSource) -> (
    entry: CacheEntry, linked: Bool, crc: UInt32
  )? {
    guard object.size > 0, object.size <= index.limit, source.size == object.size,
      let crc = object.crc32c.flatMap({ CRC32C.value(base64: $0) })
    else { return nil }
    let key = EntryKey(name: object.name, generation: object.generation)
    var made = false
    let entry = index.entry(key) {
      made = true
      var map = BlockMap(name: key.name, generation: key.generation, blockSize: Int(Self.blockSize))
      map.size = object.size
      map.objectCRC = crc
      return CacheEntry(
        key: key, path: directory.entryPath(name: key.name, generation: key.generation), map: map,
        handingOver: true)
    }
    guard made else { return nil }
    guard let victims = index.reserve(object.size, for: entry) else {
      index.remove(entry)
      return nil
    }
    delete(victims)
    disk.remove(entry.dataPath)  // a leftover of an entry removed before
    return (entry, source.link(to: entry.dataPath), crc)
  }

  /// Lists the blocks of an adopted upload's entry: reads its data file
  /// (`linked`) or copies the source into it, summing each block, and
  /// keeps it only when the whole matches the object's CRC-32C (the bytes
  /// may have changed since they were stored). Blocking disk work.
  func finish(upload entry: CacheEntry, from source: any UploadSource, linked: Bool, crc: UInt32) {
    let size = source.size
    var sums: [Int64: UInt32] = [:]
    var whole: UInt32 = 0
    var offset: Int64 = 0
    var buffer = ByteBufferAllocator().buffer(capacity: Self.copyChunk)
    do {
      while offset < size {
        let chunk: ByteBuffer
        if linked {
          buffer.clear()
          let length = Int(min(Int64(Self.copyChunk), size - offset))
          let count = try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { raw in
            try disk.read(
              entry.dataPath, at: offset, into: UnsafeMutableRawBufferPointer(rebasing: raw[0..<length]))
          }
          guard count == length else { break }
          chunk = buffer
        } else {
          chunk = try source.read(at: offset, count: Self.copyChunk)
          guard chunk.readableBytes > 0 else { break }
          try chunk.withUnsafeReadableBytes { raw throws(DiskError) in
            try disk.write(entry.dataPath, at: offset, raw)
          }
        }
        whole = CRC32C.update(whole, chunk)
        var at = 0
        while at < chunk.readableBytes {
          let length = min(Int(Self.blockSize), chunk.readableBytes - at)
          if let block = chunk.getSlice(at: chunk.readerIndex + at, length: length) {
            sums[(offset + Int64(at)) / Self.blockSize] = CRC32C.update(0, block)
          }
          at += length
        }
        offset += Int64(chunk.readableBytes)
      }
    } catch let error as DiskError where !linked {
      writeFailed(entry, error)
      return
    } catch {
      logger.debug("read cache: not keeping \(entry.key.name) (its staged bytes: \(error))")
      forget(entry)
      return
    }
    guard offset == size, whole == crc else {
      logger.debug("read cache: not keeping \(entry.key.name): its staged bytes are not what was stored")
      forget(entry)
      return
    }
    _ = persist(entry) { map in
      map.blocks = sums
      map.verified = true
    }
    entry.endHandover()
    metrics.stored(index.used)
  }
}

import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// Ends the session once the mount has left this process's mount namespace
/// while the kernel still keeps its connection.
///
/// An unmount ends the FUSE loop only when the kernel drops the superblock.
/// A mount namespace made while the mount was live (`unshare -m`, a
/// container, a systemd service with PrivateTmp) holds a copy of it, and
/// keeps the superblock, so after `bucketfs unmount` the loop would run on,
/// holding the cache directory, until that namespace ends: minutes or never.
/// This thread sees the mount go from /proc/self/mountinfo (polled with
/// POLLPRI, which the kernel raises on every change of the table, and every
/// second besides) and, once the loop has not ended a second later and no
/// file or directory is open, asks it to. The copy in the other namespace
/// then answers ENOTCONN. Open handles keep it serving: after a lazy unmount
/// (`umount -l`) the files still open through the detached mount work until
/// they are closed, as the kernel itself would have it.
final class MountWatch: Sendable {
  private let identity: MountTable.Entry
  private let isIdle: @Sendable () -> Bool
  private let onLingering: @Sendable () -> Void
  private let stopped = Atomic<Bool>(false)

  private init(
    identity: MountTable.Entry, isIdle: @escaping @Sendable () -> Bool,
    onLingering: @escaping @Sendable () -> Void
  ) {
    self.identity = identity
    self.isIdle = isIdle
    self.onLingering = onLingering
  }

  /// Watches the mount at `path` (an absolute path without symlinks, taken
  /// before the mount: resolving it after would ask the mount itself);
  /// nil when it is not in the table. `onLingering` runs once, on the
  /// watcher's thread, if the mount leaves and ``stop()`` has not been called
  /// a second later, at the first check (every second) where `isIdle` holds.
  static func start(
    path: String, isIdle: @escaping @Sendable () -> Bool, onLingering: @escaping @Sendable () -> Void
  ) -> MountWatch? {
    guard let identity = MountTable.entries().last(where: { $0.mountpoint == path }) else { return nil }
    let watch = MountWatch(identity: identity, isIdle: isIdle, onLingering: onLingering)
    var thread = pthread_t()
    let context = Unmanaged.passRetained(watch).toOpaque()
    let created = pthread_create(
      &thread, nil,
      { context in
        let watch = Unmanaged<MountWatch>.fromOpaque(context!).takeRetainedValue()
        watch.watch()
        return nil
      }, context)
    guard created == 0 else {
      Unmanaged<MountWatch>.fromOpaque(context).release()
      return nil
    }
    pthread_detach(thread)
    return watch
  }

  /// The loop has ended: nothing more to do.
  func stop() {
    stopped.store(true, ordering: .sequentiallyConsistent)
  }

  private var isStopped: Bool { stopped.load(ordering: .sequentiallyConsistent) }

  private func watch() {
    let fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC)
    defer { if fd >= 0 { close(fd) } }
    while !isStopped {
      var event = pollfd(fd: fd, events: Int16(POLLPRI), revents: 0)
      _ = poll(&event, 1, 1000)  // fd < 0: poll ignores it and times out
      if isStopped { return }
      // By ID and device, not place: a mount moved elsewhere is still this one.
      let present = MountTable.entries().contains { $0.id == identity.id && $0.device == identity.device }
      guard !present else { continue }
      // A plain unmount ends the loop at the same moment: give it a second,
      // then as long as a handle is open (a lazy unmount's files).
      repeat {
        for _ in 0..<100 where !isStopped { usleep(10_000) }
      } while !isStopped && !isIdle()
      if !isStopped { onLingering() }
      return
    }
  }
}

extension MountTable {
  /// One line of /proc/self/mountinfo: the mount's ID, its device, and where it is mounted.
  struct Entry: Sendable {
    let id: String
    let device: String
    let mountpoint: String
  }

  /// The mounts of this process's mount namespace now.
  static func entries() -> [Entry] {
    guard let file = fopen("/proc/self/mountinfo", "r") else { return [] }
    defer { fclose(file) }
    var line: UnsafeMutablePointer<CChar>?
    var capacity = 0
    defer { free(line) }
    var entries: [Entry] = []
    while getline(&line, &capacity, file) > 0, let line {
      let fields = String(cString: line).split(separator: " ")
      guard fields.count > 4 else { continue }
      entries.append(Entry(id: String(fields[0]), device: String(fields[2]), mountpoint: unescape(fields[4])))
    }
    return entries
  }
}

import FUSE
import Foundation
import ObjectStore
import StorageFake
import XCTest

@testable import BucketFS

#if canImport(Glibc)
  import Glibc
#endif

/// Random sequences of namespace and metadata operations, applied both to
/// BucketFileSystem over the in-memory store and to a small model of the
/// expected tree; after each step the errno, the visible tree and the
/// store's objects must agree (mountpoint-s3 has such a test).
///
/// CI runs fixed seeds. `BUCKETFS_MODEL_SEEDS=200` runs seeds 0..<200 by
/// hand (`BUCKETFS_MODEL_STEPS` sets the sequence length). A failure is
/// shrunk to the shortest sequence found that still fails, and printed.
///
/// A second test mixes in another client of the bucket (issue 19,
/// ReferenceModelOtherClient.swift), seeded by `BUCKETFS_TEST_SEED`.
final class ReferenceModelTests: XCTestCase {
  func testRandomSequencesAgreeWithTheModel() async throws {
    let environment = ProcessInfo.processInfo.environment
    let seeds = environment["BUCKETFS_MODEL_SEEDS"].flatMap(Int.init).map { Array(0..<$0) } ?? [1, 2, 3, 4]
    let steps = environment["BUCKETFS_MODEL_STEPS"].flatMap(Int.init) ?? 60
    print(
      "ReferenceModelTests: seeds \(seeds.first!)...\(seeds.last!), \(steps) steps (BUCKETFS_MODEL_SEEDS=n runs 0..<n)"
    )
    for seed in seeds {
      var generator = SplitMix64(seed: UInt64(seed))
      let start = ModelStart.random(using: &generator)
      let operations = (0..<steps).map { _ in ModelOperation.random(using: &generator) }
      guard let failure = await ModelRun.run(start, operations) else { continue }
      await report(failure, "seed \(seed)", start, operations)
      return
    }
  }

  /// The mount's operations with another client's changes between them: an
  /// overwrite, a delete or a new object, made in the store directly. The
  /// model says what the mount shows at once, past the negative TTL and past
  /// the metadata TTL (``OtherClientRound``), on a manual clock.
  /// `BUCKETFS_TEST_SEED=n` replays a seed; `BUCKETFS_MODEL_STEPS` sets the
  /// sequence length.
  func testAnotherClientsChangesShowAsSemanticsSays() async throws {
    let environment = ProcessInfo.processInfo.environment
    let seed = environment["BUCKETFS_TEST_SEED"].flatMap(UInt64.init) ?? 19
    var generator = SplitMix64.forTest(seed: seed)
    let steps = environment["BUCKETFS_MODEL_STEPS"].flatMap(Int.init) ?? 60
    for sequence in 0..<4 {
      let start = ModelStart.random(using: &generator)
      let operations = (0..<steps).map { _ in ModelOperation.random(using: &generator, otherClient: true) }
      guard let failure = await ModelRun.run(start, operations) else { continue }
      await report(failure, "BUCKETFS_TEST_SEED=\(seed), sequence \(sequence)", start, operations)
      return
    }
  }

  /// Found by the second client: docs/SEMANTICS.md#consistency-other-clients,
  /// "a setfattr always decides against the current version". Another
  /// client's overwrite makes a new generation whose metageneration starts
  /// at 1 again, so the PATCH carries ifGenerationMatch as well, and a 412
  /// makes the mount read the object again and decide again.
  func testASetxattrRightAfterAnOverwriteElsewhereDecidesAgainstTheNewVersion() async throws {
    let store = InMemoryObjectStore(bucket: "model")
    store.put("f", data: bytes("old"), contentType: "text/plain")
    let fs = makeFileSystem(store, clock: ManualClock())
    let inode = try await fs.inode(at: "f")
    // Another client, within the metadata TTL of that lookup.
    store.put("f", data: bytes("new"), contentType: "text/plain", custom: ["k": "theirs"])
    var got: Errno?
    do {
      try await fs.setxattr(inode: inode, name: "user.custom.k", value: bytes("mine"), flags: .create)
    } catch let errno as Errno {
      got = errno
    }
    let stored = store.object("f")!.custom["k"]
    XCTAssertEqual(got, .exists)
    XCTAssertEqual(stored, "theirs")
  }

  /// Shrinks a failing sequence and fails with it.
  private func report(
    _ failure: ModelFailure, _ replay: String, _ start: ModelStart, _ operations: [ModelOperation]
  ) async {
    let shrunk = await ModelRun.shrink(start, Array(operations.prefix(failure.step + 1)))
    XCTFail(
      """
      \(replay): \(failure.message)
      shortest failing sequence found (\(shrunk.operations.count) steps), from \(start):
      \(shrunk.operations.enumerated().map { "  \($0.offset): \($0.element)" }.joined(separator: "\n"))
      fails with: \(shrunk.message)
      """)
  }

  /// The model itself must catch what it is meant to catch: a filesystem
  /// whose rename forgot the atomic-save rule would differ from it.
  func testTheModelTellsAnAtomicSaveThatLosesMetadata() async throws {
    let start = ModelStart(files: [
      "doc": ModelFile(bytes: bytes("old"), attributes: ObjectAttributes(custom: ["token": "t"])),
      "tmp": ModelFile(bytes: bytes("new"), attributes: ObjectAttributes()),
    ])
    let fine = await ModelRun.run(start, [.rename("tmp", "doc", noReplace: false)])
    XCTAssertNil(fine?.message)
    // Replay the same through the store alone, the way a careless mount would.
    var model = Model(start)
    _ = model.apply(.rename("tmp", "doc", noReplace: false))
    let store = InMemoryObjectStore(bucket: "model")
    store.put("doc", data: bytes("new"))
    XCTAssertNotNil(model.difference(fromObjectsOf: store))
  }
}

// MARK: - The model

struct ModelFile: Equatable, CustomStringConvertible {
  var bytes: [UInt8]
  var attributes: ObjectAttributes
  var description: String {
    "\(bytes.count) bytes \(attributes.fields.mapKeys(\.rawValue)) \(attributes.custom)"
  }
}

extension Dictionary {
  fileprivate func mapKeys<K: Hashable>(_ transform: (Key) -> K) -> [K: Value] {
    Dictionary<K, Value>(uniqueKeysWithValues: map { (transform($0.key), $0.value) })
  }
}

/// The tree a sequence starts from: files and directory placeholders.
struct ModelStart: CustomStringConvertible {
  var files: [String: ModelFile]
  var placeholders: Set<String> = []

  static let names = ["a", "b", "c"]

  static func random(using generator: inout some RandomNumberGenerator) -> ModelStart {
    var start = ModelStart(files: [:])
    for _ in 0..<Int.random(in: 2...6, using: &generator) {
      let depth = Int.random(in: 1...3, using: &generator)
      let path = (0..<depth).map { _ in names.randomElement(using: &generator)! }.joined(separator: "/")
      // A name already a directory (or under a file) is not made a file.
      if start.files.keys.contains(where: { $0.hasPrefix(path + "/") || path.hasPrefix($0 + "/") }) {
        continue
      }
      if start.placeholders.contains(where: { $0.hasPrefix(path + "/") }) { continue }
      if Bool.random(using: &generator) {
        start.placeholders.insert(path + "/")
      } else {
        var attributes = ObjectAttributes()
        if Bool.random(using: &generator) { attributes.contentType = "text/plain" }
        if Bool.random(using: &generator) {
          attributes.custom["k"] = "v\(Int.random(in: 0..<9, using: &generator))"
        }
        start.files[path] = ModelFile(bytes: Array(path.utf8), attributes: attributes)
      }
    }
    start.placeholders = start.placeholders.filter { dir in
      !start.files.keys.contains { dir.hasPrefix($0 + "/") || $0 + "/" == dir }
    }
    return start
  }

  var description: String {
    "files \(files.keys.sorted()), placeholders \(placeholders.sorted())"
  }
}

enum ModelOperation: CustomStringConvertible {
  case mkdir(String)
  case rmdir(String)
  case unlink(String)
  case rename(String, String, noReplace: Bool)
  case setxattr(String, name: String, value: String)
  case removexattr(String, name: String)
  /// open(O_CREAT|O_TRUNC), write, close (`echo > path`).
  case create(String, bytes: [UInt8])
  /// open(O_WRONLY), pwrite at `offset`, close.
  case write(String, offset: Int, bytes: [UInt8])
  case truncate(String, size: Int)
  /// Another client changes the bucket, then the mount is checked as time
  /// passes (``OtherClientRound``); the seed picks the changes.
  case elsewhere(seed: UInt64)

  static func randomPath(using generator: inout some RandomNumberGenerator) -> String {
    let depth = Int.random(in: 1...3, using: &generator)
    return (0..<depth).map { _ in ModelStart.names.randomElement(using: &generator)! }.joined(separator: "/")
  }

  /// With `otherClient`, one step in five is another client's round.
  static func random(using generator: inout some RandomNumberGenerator, otherClient: Bool = false)
    -> ModelOperation
  {
    if otherClient, Int.random(in: 0..<5, using: &generator) == 0 {
      return .elsewhere(seed: generator.next())
    }
    let path = randomPath(using: &generator)
    let data = (0..<Int.random(in: 1...4, using: &generator)).map { _ in
      UInt8.random(in: 97...100, using: &generator)
    }
    switch Int.random(in: 0..<14, using: &generator) {
    case 10, 11: return .create(path, bytes: data)
    case 12: return .write(path, offset: Int.random(in: 0...6, using: &generator), bytes: data)
    case 13: return .truncate(path, size: Int.random(in: 0...6, using: &generator))
    case 0, 1: return .mkdir(path)
    case 2: return .rmdir(path)
    case 3: return .unlink(path)
    case 4, 5, 6:
      return .rename(
        path, randomPath(using: &generator), noReplace: Int.random(in: 0..<4, using: &generator) == 0)
    case 7, 8:
      let name = ["user.custom.k", "user.custom.x", "user.contentType", "user.cacheControl"].randomElement(
        using: &generator)!
      return .setxattr(path, name: name, value: "v\(Int.random(in: 0..<9, using: &generator))")
    default:
      return .removexattr(
        path, name: ["user.custom.k", "user.contentType"].randomElement(using: &generator)!)
    }
  }

  var description: String {
    switch self {
    case .mkdir(let path): "mkdir \(path)"
    case .rmdir(let path): "rmdir \(path)"
    case .unlink(let path): "unlink \(path)"
    case .rename(let from, let to, let noReplace): "rename \(from) \(to)\(noReplace ? " NOREPLACE" : "")"
    case .setxattr(let path, let name, let value): "setxattr \(path) \(name)=\(value)"
    case .removexattr(let path, let name): "removexattr \(path) \(name)"
    case .create(let path, let bytes): "create \(path) \(String(decoding: bytes, as: UTF8.self))"
    case .write(let path, let offset, let bytes):
      "write \(path) @\(offset) \(String(decoding: bytes, as: UTF8.self))"
    case .truncate(let path, let size): "truncate \(path) \(size)"
    case .elsewhere(let seed): "another client's changes (seed \(seed))"
    }
  }
}

/// What a POSIX filesystem over this bucket should show: files with bytes
/// and writable metadata; directories are placeholders and every prefix of
/// a file or placeholder (a directory without placeholder vanishes with its
/// last object, as in the bucket).
struct Model {
  var files: [String: ModelFile]
  var placeholders: Set<String>
  /// Directories the mount has seen that vanished from the bucket with
  /// their last object, and that it still holds (as the kernel would): for
  /// these an unlink is EISDIR, an rmdir succeeds and a setxattr is EPERM,
  /// as the kernel's cached entry says, until the mount forgets them.
  var vanished: Set<String> = []
  /// Properties bucketfs inferred for a file (a new file's contentType):
  /// an atomic save lets the replaced file's values win over these.
  var inferred: [String: Set<XattrName>] = [:]

  init(_ start: ModelStart) {
    files = start.files
    placeholders = start.placeholders
  }

  enum Kind { case file, directory }

  func kind(_ path: String) -> Kind? {
    if path.isEmpty || isDirectory(path) { return .directory }
    return files[path] != nil ? .file : nil
  }

  func isDirectory(_ path: String) -> Bool {
    let prefix = path + "/"
    return placeholders.contains { $0.hasPrefix(prefix) } || files.keys.contains { $0.hasPrefix(prefix) }
  }

  func isEmptyDirectory(_ path: String) -> Bool {
    let prefix = path + "/"
    return !placeholders.contains { $0.hasPrefix(prefix) && $0 != prefix }
      && !files.keys.contains { $0.hasPrefix(prefix) }
  }

  /// How resolving the directory that holds `path` fails: ENOENT for a
  /// missing component, ENOTDIR for a file on the way.
  func resolveParent(_ path: String) -> Errno? {
    let parts = path.split(separator: "/").dropLast()
    for end in parts.indices {
      let ancestor = parts[...end].joined(separator: "/")
      switch kind(ancestor) {
      case nil where vanished.contains(ancestor): continue
      case nil: return .noEntry
      case .file: return .notDirectory
      case .directory: continue
      }
    }
    return nil
  }

  static func parent(_ path: String) -> String {
    path.split(separator: "/").dropLast().joined(separator: "/")
  }

  var directories: Set<String> {
    Set(visible.filter { $0.hasSuffix("/") }.map { String($0.dropLast()) })
  }

  /// The outcomes the operation may have (nil: success), applying it on success.
  mutating func apply(_ operation: ModelOperation) -> [Errno?] {
    let before = directories
    let outcome = applyToTree(operation)
    // What the mount detached: an rmdir'ed directory, a renamed one and what is under it.
    var detached: Set<String> = []
    switch operation {
    case .rmdir(let path): detached.insert(path)
    case .rename(let from, _, _) where outcome == [nil]:
      detached = before.filter { $0 == from || $0.hasPrefix(from + "/") }
    default: break
    }
    if case .rename(let from, let to, _) = operation, from != to, outcome == [nil] {
      // A name moved onto `to` takes the place of what the mount held there:
      // directories that had vanished under it are detached.
      vanished = vanished.filter { !$0.hasPrefix(to + "/") }
      // Held directories under a renamed one move with it, as the kernel's entries do.
      vanished = Set(vanished.map { $0.hasPrefix(from + "/") ? to + $0.dropFirst(from.count) : $0 })
    }
    let after = directories
    vanished.formUnion(before.subtracting(after).subtracting(detached))
    vanished.subtract(after)
    vanished.subtract(detached)
    // A rename onto a vanished directory's name detaches the held node.
    if case .rename(let from, let to, _) = operation, from != to, outcome == [nil] { vanished.remove(to) }
    return outcome
  }

  private mutating func applyToTree(_ operation: ModelOperation) -> [Errno?] {
    switch operation {
    case .elsewhere: preconditionFailure("another client's round is played by OtherClientRound")
    case .mkdir(let path):
      if let errno = resolveParent(path) { return [errno] }
      if kind(path) != nil { return [.exists] }
      placeholders.insert(path + "/")
    case .rmdir(let path):
      if let errno = resolveParent(path) { return [errno] }
      switch kind(path) {
      case nil: return vanished.contains(path) ? [nil] : [.noEntry]
      case .file: return [.notDirectory]
      case .directory:
        guard isEmptyDirectory(path) else { return [Errno(ENOTEMPTY)] }
        placeholders.remove(path + "/")
      }
    case .unlink(let path):
      if let errno = resolveParent(path) { return [errno] }
      switch kind(path) {
      case nil: return vanished.contains(path) ? [.isDirectory] : [.noEntry]
      case .directory: return [.isDirectory]
      case .file:
        files[path] = nil
        inferred[path] = nil
      }
    case .rename(let from, let to, let noReplace):
      if let errno = resolveParent(from) ?? resolveParent(to) { return [errno] }
      // A vanished directory the mount holds goes through a directory's
      // checks, and then has nothing to move.
      let isVanished = kind(from) == nil && vanished.contains(from)
      guard let source = isVanished ? .directory : kind(from) else { return [.noEntry] }
      if from == to { return [nil] }
      if source == .directory, (to + "/").hasPrefix(from + "/") { return [.invalid] }
      let target = kind(to)
      if noReplace, target != nil { return [.exists] }
      switch (source, target) {
      case (.file, .directory): return [.isDirectory]
      case (.directory, .file): return [.notDirectory]
      case (.directory, .directory) where !isEmptyDirectory(to): return [Errno(ENOTEMPTY)]
      case (.directory, _) where isVanished: return [.noEntry]
      case (.file, _):
        var moved = files.removeValue(forKey: from)!
        var stillInferred = inferred.removeValue(forKey: from) ?? []
        if let replaced = files[to] {
          moved.attributes = AtomicSave.attributes(
            source: moved.attributes, inferred: stillInferred, replaced: replaced.attributes)
          stillInferred = stillInferred.filter { property in
            switch property {
            case .writable(let field): replaced.attributes.fields[field] == nil
            case .custom(let key): replaced.attributes.custom[key] == nil
            default: false
            }
          }
        }
        files[to] = moved
        inferred[to] = stillInferred
      case (.directory, _):
        let (old, new) = (from + "/", to + "/")
        for (path, file) in files where path.hasPrefix(old) {
          files[path] = nil
          files[new + path.dropFirst(old.count)] = file
          inferred[new + path.dropFirst(old.count)] = inferred.removeValue(forKey: path)
        }
        for path in placeholders where path.hasPrefix(old) {
          placeholders.remove(path)
          placeholders.insert(new + path.dropFirst(old.count))
        }
      }
    case .setxattr(let path, let name, let value):
      if let errno = resolveParent(path) { return [errno] }
      guard let kind = kind(path) else { return vanished.contains(path) ? [.notPermitted] : [.noEntry] }
      guard kind == .file else { return [.notPermitted] }
      set(path, name, value)
      if let property = XattrName(name) { inferred[path]?.remove(property) }
    case .removexattr(let path, let name):
      if let errno = resolveParent(path) { return [errno] }
      guard let kind = kind(path) else { return vanished.contains(path) ? [.notPermitted] : [.noEntry] }
      guard kind == .file else { return [.notPermitted] }
      guard value(path, name) != nil else { return [.noData] }
      set(path, name, nil)
      if let property = XattrName(name) { inferred[path]?.remove(property) }
    case .create(let path, let bytes):
      if let errno = resolveParent(path) { return [errno] }
      switch kind(path) {
      case .directory: return [.isDirectory]
      case nil where vanished.contains(path): return [.isDirectory]
      case .file:
        files[path]!.bytes = bytes
        uploaded(path)
      case nil:
        files[path] = ModelFile(
          bytes: bytes, attributes: ObjectAttributes(fields: [.contentType: "application/octet-stream"]))
        inferred[path] = [.writable(.contentType)]
      }
    case .write(let path, let offset, let bytes):
      if let errno = resolveParent(path) { return [errno] }
      switch kind(path) {
      case .directory: return [.isDirectory]
      case nil: return vanished.contains(path) ? [.isDirectory] : [.noEntry]
      case .file:
        var data = files[path]!.bytes
        if data.count < offset + bytes.count {
          data += [UInt8](repeating: 0, count: offset + bytes.count - data.count)
        }
        data.replaceSubrange(offset..<offset + bytes.count, with: bytes)
        files[path]!.bytes = data
        uploaded(path)
      }
    case .truncate(let path, let size):
      if let errno = resolveParent(path) { return [errno] }
      switch kind(path) {
      case .directory: return [.isDirectory]
      case nil: return vanished.contains(path) ? [.isDirectory] : [.noEntry]
      case .file:
        var data = files[path]!.bytes
        // To the size it has: nothing changes, nothing is stored.
        if data.count == size { return [nil] }
        if data.count < size {
          data += [UInt8](repeating: 0, count: size - data.count)
        } else {
          data.removeLast(data.count - size)
        }
        uploaded(path)
        files[path]!.bytes = data
      }
    }
    return [nil]
  }

  /// A new generation was uploaded: the service gives it a contentType if it has none.
  private mutating func uploaded(_ path: String) {
    if files[path]!.attributes.contentType == nil {
      files[path]!.attributes.contentType = "application/octet-stream"
    }
  }

  private func value(_ path: String, _ name: String) -> String? {
    let attributes = files[path]!.attributes
    if name.hasPrefix("user.custom.") { return attributes.custom[String(name.dropFirst(12))] }
    return attributes.fields[ObjectMetadata.WritableField(rawValue: String(name.dropFirst(5)))!]
  }

  private mutating func set(_ path: String, _ name: String, _ value: String?) {
    if name.hasPrefix("user.custom.") {
      files[path]!.attributes.custom[String(name.dropFirst(12))] = value
    } else {
      files[path]!.attributes.fields[ObjectMetadata.WritableField(rawValue: String(name.dropFirst(5)))!] =
        value
    }
  }

  /// Every visible path: directories end in `/`.
  var visible: Set<String> {
    var paths = Set<String>()
    for path in Array(files.keys) + placeholders.map({ String($0.dropLast()) }) {
      var parent = Self.parent(path)
      while !parent.isEmpty {
        paths.insert(parent + "/")
        parent = Self.parent(parent)
      }
    }
    for path in files.keys { paths.insert(path) }
    for path in placeholders { paths.insert(path) }
    return paths
  }

  /// What differs between the objects the model expects and the store's.
  func difference(fromObjectsOf store: InMemoryObjectStore) -> String? {
    let expected = Set(files.keys).union(placeholders)
    let actual = Set(store.names)
    if expected != actual {
      return "objects: expected \(expected.sorted()), store has \(actual.sorted())"
    }
    for (path, file) in files {
      let metadata = store.object(path)!
      // The model tracks bytes and metadata, not times: every upload stores
      // its mtime (NamespaceWrittenFileTests pins that).
      var attributes = ObjectAttributes(of: metadata)
      attributes.custom["goog-reserved-file-mtime"] = nil
      let stored = ModelFile(bytes: store.data(path)!, attributes: attributes)
      if stored != file { return "object \(path): expected \(file), store has \(stored)" }
    }
    return nil
  }
}

// MARK: - Running

struct ModelFailure {
  let step: Int
  let message: String
}

enum ModelRun {
  /// Applies `operations` to a fresh filesystem and model; the first disagreement, if any.
  static func run(_ start: ModelStart, _ operations: [ModelOperation]) async -> ModelFailure? {
    let store = InMemoryObjectStore(bucket: "model")
    for (path, file) in start.files {
      store.put(
        path, data: file.bytes, contentType: file.attributes.contentType,
        cacheControl: file.attributes.fields[.cacheControl], custom: file.attributes.custom)
    }
    for path in start.placeholders { store.put(path, data: []) }
    // Small pages, so listings cross page boundaries; stages in a directory of this run's own.
    var configuration = Configuration()
    configuration.pageSize = 2
    configuration.stageDirectory = makeStageDirectory()
    configuration.mimeTypesPath = nil
    defer { try? FileManager.default.removeItem(atPath: configuration.stageDirectory) }
    let clock = ManualClock()
    let fs = BucketFileSystem(
      store: store, configuration: configuration, logger: quietLogger, clock: clock.read)
    var model = Model(start)
    for (step, operation) in operations.enumerated() {
      if case .elsewhere(let seed) = operation {
        if let mismatch = await OtherClientRound.run(
          seed: seed, fs: fs, store: store, clock: clock, model: &model)
        {
          return ModelFailure(step: step, message: "\(operation): \(mismatch)")
        }
      } else {
        let expected = model.apply(operation)
        let got: Errno?
        do {
          try await apply(operation, to: fs)
          got = nil
        } catch let errno as Errno {
          got = errno
        } catch {
          return ModelFailure(step: step, message: "\(operation): threw \(error)")
        }
        if !expected.contains(got) {
          return ModelFailure(
            step: step,
            message:
              "\(operation): expected \(expected.map { $0?.description ?? "success" }), got \(got?.description ?? "success")"
          )
        }
      }
      if let difference = model.difference(fromObjectsOf: store) {
        return ModelFailure(step: step, message: "after \(operation): \(difference)")
      }
      do {
        let shown = try await visibleTree(of: fs)
        if shown != model.visible {
          return ModelFailure(
            step: step,
            message:
              "after \(operation): visible tree \(shown.sorted()), model \(model.visible.sorted()); missing \(model.visible.subtracting(shown).sorted()), extra \(shown.subtracting(model.visible).sorted())"
          )
        }
      } catch {
        return ModelFailure(step: step, message: "after \(operation): walking the tree threw \(error)")
      }
    }
    return nil
  }

  /// Removes steps one at a time while the sequence still fails.
  static func shrink(_ start: ModelStart, _ operations: [ModelOperation]) async -> (
    operations: [ModelOperation], message: String
  ) {
    var current = operations
    var message = await run(start, current)?.message ?? ""
    var index = 0
    while index < current.count {
      var candidate = current
      candidate.remove(at: index)
      if let failure = await run(start, candidate) {
        current = Array(candidate.prefix(failure.step + 1))
        message = failure.message
      } else {
        index += 1
      }
    }
    return (current, message)
  }

  static func apply(_ operation: ModelOperation, to fs: BucketFileSystem) async throws {
    func parentAndName(_ path: String) async throws -> (UInt64, String) {
      let parent = try await fs.inode(at: Model.parent(path))
      guard try await fs.kind(at: Model.parent(path)) == .directory else { throw Errno.notDirectory }
      return (parent, String(path.split(separator: "/").last!))
    }
    switch operation {
    case .elsewhere: preconditionFailure("another client's round is played by OtherClientRound")
    case .mkdir(let path):
      let (parent, name) = try await parentAndName(path)
      _ = try await fs.mkdir(parent: parent, name: name, mode: 0o755)
    case .rmdir(let path):
      let (parent, name) = try await parentAndName(path)
      try await fs.rmdir(parent: parent, name: name)
    case .unlink(let path):
      let (parent, name) = try await parentAndName(path)
      try await fs.unlink(parent: parent, name: name)
    case .rename(let from, let to, let noReplace):
      let (parent, name) = try await parentAndName(from)
      let (newParent, newName) = try await parentAndName(to)
      try await fs.rename(
        parent: parent, name: name, newParent: newParent, newName: newName, flags: noReplace ? .noReplace : []
      )
    case .setxattr(let path, let name, let value):
      let inode = try await fs.inode(at: path)
      try await fs.setxattr(inode: inode, name: name, value: Array(value.utf8), flags: [])
    case .removexattr(let path, let name):
      let inode = try await fs.inode(at: path)
      try await fs.removexattr(inode: inode, name: name)
    case .create(let path, let bytes):
      let (parent, name) = try await parentAndName(path)
      let inode: UInt64
      let handle: UInt64
      if let found = try await fs.lookup(parent: parent, name: name).attributes {
        guard found.kind == .file else { throw Errno.isDirectory }
        inode = found.inode
        handle = try await fs.open(inode: inode, flags: O_WRONLY | O_TRUNC).handle
      } else {
        let (entry, opened) = try await fs.create(
          parent: parent, name: name, mode: 0o644, flags: O_WRONLY | O_CREAT | O_TRUNC)
        inode = entry.attributes!.inode
        handle = opened.handle
      }
      try await writeAndClose(fs, inode, handle, offset: 0, bytes)
    case .write(let path, let offset, let bytes):
      let (parent, name) = try await parentAndName(path)
      guard let found = try await fs.lookup(parent: parent, name: name).attributes else {
        throw Errno.noEntry
      }
      guard found.kind == .file else { throw Errno.isDirectory }
      let handle = try await fs.open(inode: found.inode, flags: O_WRONLY).handle
      try await writeAndClose(fs, found.inode, handle, offset: offset, bytes)
    case .truncate(let path, let size):
      let (parent, name) = try await parentAndName(path)
      guard let found = try await fs.lookup(parent: parent, name: name).attributes else {
        throw Errno.noEntry
      }
      guard found.kind == .file else { throw Errno.isDirectory }
      _ = try await fs.setattr(inode: found.inode, handle: nil, changes: AttributeChanges(size: UInt64(size)))
    }
  }

  static func writeAndClose(
    _ fs: BucketFileSystem, _ inode: UInt64, _ handle: UInt64, offset: Int, _ bytes: [UInt8]
  )
    async throws
  {
    defer { fs.release(inode: inode, handle: handle) }
    let written = try await fs.write(inode: inode, handle: handle, offset: UInt64(offset), data: bytes)
    guard written == bytes.count else { throw Errno.io }
    try await fs.flush(inode: inode, handle: handle)
  }

  /// Every path a fresh walk of the tree shows; directories end in `/`.
  static func visibleTree(of fs: BucketFileSystem) async throws -> Set<String> {
    var paths = Set<String>()
    var pending: [(UInt64, String)] = [(InodeTable.rootInode, "")]
    while let (inode, prefix) = pending.popLast() {
      for (name, entry) in try await fs.entries(of: inode, perCall: 3) {
        guard let attributes = entry.attributes else { continue }
        if attributes.kind == .directory {
          paths.insert(prefix + name + "/")
          pending.append((attributes.inode, prefix + name + "/"))
        } else {
          paths.insert(prefix + name)
        }
      }
    }
    return paths
  }
}

// Swift 6.3.1 miscompiles, at -O, a closure that returns a tuple through an
// indirect (generic) result when one element is known before a suspension
// point and another only after it: `{ do { return (name, try await f()) } … }`.
// The element written before the suspension is lost, so the receiver reads
// garbage (upstream: swiftlang/swift#91911, reverted in #92155, unfixed in
// 6.3.1). It crashed every `mv dir dir2` of the release build
// (Namespace.moveAll, Names/Renames.swift).
//
// This program is built with the release build and run by scripts/test.sh:
//   - the shapes bucketfs uses instead (await first, then build the value;
//     or a named struct) must come back intact, or it exits 1;
//   - the defective shape is run in a child process and reported, so a
//     toolchain upgrade shows when the workaround may go.
// scripts/lint-async-tuples.py keeps the defective shape out of Sources and Tests.

#if canImport(Glibc)
  import Glibc
#endif

/// Large enough to be returned indirectly, with heap strings like ObjectMetadata.
struct Record: Sendable {
  var bucket: String
  var name: String
  var generation: Int64
  var timeCreated: String
  var contentType: String?
  var custom: [String: String]
}

struct Failure: Error {}

struct Named: Sendable {
  let name: String
  let result: Result<Record, any Error>
}

@inline(never)
func fetch(_ name: String, _ index: Int) async throws -> Record {
  try await Task.sleep(nanoseconds: UInt64(index % 3) * 100_000)
  if index % 7 == 6 { throw Failure() }
  return Record(
    bucket: "a-bucket-name-longer-than-fifteen-bytes", name: name + "/renamed", generation: Int64(index),
    timeCreated: "2026-11-25T10:00:00.000Z", contentType: "text/plain", custom: ["key": "value"])
}

@inline(never)
func passThrough<T: Sendable>(_ body: @Sendable () async -> T) async -> T { await body() }

func names(_ round: Int) -> [String] {
  (0..<8).map { "directory/with/a/long/prefix/object-\(round)-\($0)" }
}

/// The defect: the tuple literal's first element is written before the await.
func splitTuple(_ names: [String]) async -> [String] {
  await withTaskGroup(of: (String, Result<Record, any Error>).self) { group in
    for (index, name) in names.enumerated() {
      group.addTask {
        do { return (name, .success(try await fetch(name, index))) } catch { return (name, .failure(error)) }
      }
    }
    var out: [String] = []
    for await (name, _) in group { out.append(name) }
    return out
  }
}

/// The defect through a plain generic closure, no task group.
func splitTupleGeneric(_ names: [String]) async -> [String] {
  var out: [String] = []
  for (index, name) in names.enumerated() {
    let pair = await passThrough { () -> (String, Record?) in
      do { return (name, try await fetch(name, index)) } catch { return (name, nil) }
    }
    out.append(pair.0)
  }
  return out
}

/// Workaround 1: every await happens before the tuple is made.
func awaitThenTuple(_ names: [String]) async -> [String] {
  await withTaskGroup(of: (String, Result<Record, any Error>).self) { group in
    for (index, name) in names.enumerated() {
      group.addTask {
        let result: Result<Record, any Error>
        do { result = .success(try await fetch(name, index)) } catch { result = .failure(error) }
        return (name, result)
      }
    }
    var out: [String] = []
    for await (name, _) in group { out.append(name) }
    return out
  }
}

/// Workaround 2 (Namespace.moveAll, Names/Renames.swift): a named struct built after the await.
func namedStruct(_ names: [String]) async -> [String] {
  await withTaskGroup(of: Named.self) { group in
    for (index, name) in names.enumerated() {
      group.addTask {
        let result: Result<Record, any Error>
        do { result = .success(try await fetch(name, index)) } catch { result = .failure(error) }
        return Named(name: name, result: result)
      }
    }
    var out: [String] = []
    for await named in group { out.append(named.name) }
    return out
  }
}

/// Workaround 1 through the generic closure (CloudStorage's `racing`).
func awaitThenTupleGeneric(_ names: [String]) async -> [String] {
  var out: [String] = []
  for (index, name) in names.enumerated() {
    let pair = await passThrough { () -> (String, Record?) in
      let record = try? await fetch(name, index)
      return (name, record)
    }
    out.append(pair.0)
  }
  return out
}

let shapes: [(label: String, defect: Bool, run: ([String]) async -> [String])] = [
  ("split-tuple-task-group", true, splitTuple),
  ("split-tuple-generic-closure", true, splitTupleGeneric),
  ("await-then-tuple-task-group", false, awaitThenTuple),
  ("named-struct-task-group", false, namedStruct),
  ("await-then-tuple-generic-closure", false, awaitThenTupleGeneric),
]

/// Runs one shape for `rounds` rounds; true when every name came back intact.
func intact(_ run: ([String]) async -> [String], rounds: Int) async -> Bool {
  for round in 0..<rounds {
    let expected = names(round)
    if await run(expected).sorted() != expected.sorted() { return false }
  }
  return true
}

let arguments = CommandLine.arguments
let rounds = 300
if arguments.count == 3, arguments[1] == "--shape",
  let shape = shapes.first(where: { $0.label == arguments[2] })
{
  exit(await intact(shape.run, rounds: rounds) ? 0 : 1)
}

// Each shape runs in its own process: the defect may crash rather than corrupt.
var failed = 0
for shape in shapes {
  var pid: pid_t = 0
  let words = [arguments[0], "--shape", shape.label]
  let argv = words.map { (word: String) -> UnsafeMutablePointer<CChar>? in strdup(word) } + [nil]
  defer { argv.forEach { free($0) } }
  let devNull = open("/dev/null", O_WRONLY)
  var actions = posix_spawn_file_actions_t()
  posix_spawn_file_actions_init(&actions)
  posix_spawn_file_actions_adddup2(&actions, devNull, 2)
  defer { posix_spawn_file_actions_destroy(&actions); close(devNull) }
  guard posix_spawn(&pid, arguments[0], &actions, nil, argv, environ) == 0 else {
    print("toolchain-check: could not start \(arguments[0])")
    exit(2)
  }
  var status: Int32 = 0
  waitpid(pid, &status, 0)
  let ok = (status & 0x7f) == 0 && (status >> 8) & 0xff == 0
  if shape.defect {
    print(
      "\(shape.label): \(ok ? "intact (this toolchain may no longer need the workaround)" : "corrupted (known toolchain defect, avoided in the code)")"
    )
  } else {
    print("\(shape.label): \(ok ? "intact" : "CORRUPTED")")
    if !ok { failed += 1 }
  }
}
let safe = shapes.filter { !$0.defect }.count
print("toolchain-check: \(safe - failed) passed, \(failed) failed")
exit(failed == 0 ? 0 : 1)

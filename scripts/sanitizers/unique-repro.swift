// Evidence for the NIOPooledRecvBufferAllocator entry in tsan.supp: TSan
// reports a race on memory whose accesses are ordered only by Swift's
// reference count (swift_release / isKnownUniquelyReferenced live in the
// uninstrumented runtime). Thread 1 reads a field through its own reference,
// then drops it; the main thread waits until it holds the only reference and
// writes the field. No race, yet TSan reports one every run:
//   swiftc -sanitize=thread -g scripts/sanitizers/unique-repro.swift -o /tmp/u && /tmp/u
import Glibc

final class Storage { var capacity = 0 }
final class Slot: @unchecked Sendable { var s: Storage? }
final class Sink: @unchecked Sendable { var n = 0 }
let handoff = Slot()
let sink = Sink()

func run() {
  var local = Storage()
  handoff.s = local
  var t = pthread_t()
  pthread_create(&t, nil, { _ in
    var s = handoff.s
    handoff.s = nil
    sink.n = s!.capacity  // read through this thread's own reference
    s = nil  // drop it
    return nil
  }, nil)
  var spins = 0
  while !isKnownUniquelyReferenced(&local) && spins < 10_000_000 {
    spins += 1
    sched_yield()
  }
  local.capacity = 42  // written once the main thread holds the only reference
  pthread_join(t, nil)
  print(local.capacity)
}
run()

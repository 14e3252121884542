// Self-check for tsan-mutex.c, run by scripts/sanitize.sh before the TSan
// phases. Two threads increment a counter 200,000 times each.
//   locked: only inside Synchronization.Mutex.withLock. No race, so with
//           tsan-mutex.o linked TSan must report nothing (without it, the
//           contended path reports races: the false positive it fixes).
//   racy:   also outside the lock. A real race, which TSan must still report
//           with tsan-mutex.o linked (the shim hides nothing real).
import Glibc
import Synchronization

final class Box: @unchecked Sendable { var n = 0 }
let lock = Mutex(0)
let box = Box()
let racy = CommandLine.arguments.dropFirst().first == "racy"

func work() {
  for _ in 0..<200_000 {
    lock.withLock { _ in box.n += 1 }
    if racy { box.n += 1 }
  }
}
var t1 = pthread_t()
var t2 = pthread_t()
pthread_create(&t1, nil, { _ in work(); return nil }, nil)
pthread_create(&t2, nil, { _ in work(); return nil }, nil)
pthread_join(t1, nil)
pthread_join(t2, nil)
print("n =", box.n)

// Makes Swift's Synchronization.Mutex visible to ThreadSanitizer on Linux.
// Linked into the TSan build only (scripts/sanitize.sh passes it with -Xlinker).
//
// Why: Mutex's uncontended lock/unlock is an inlined atomic compare-exchange
// (acquiring/releasing) that TSan instruments in our code, but the contended
// path, _MutexHandle._lockSlow/_unlockSlow, lives in the uninstrumented
// libswiftSynchronization.so: a spin of plain cmpxchg and then
// FUTEX_LOCK_PI/FUTEX_UNLOCK_PI syscalls, in which the kernel hands the lock
// over. TSan sees no happens-before edge there, so every access under a
// contended Mutex is reported as a race (scripts/sanitizers/mutex-repro.swift:
// two threads incrementing an Int only inside withLock get reports; the same
// with pthread_mutex_t gets none).
//
// These definitions take the place of the library's (a definition in the
// executable wins over the shared library's), call the real function, and tell
// TSan about the acquire/release on the lock word's address, the same address
// the inlined fast path's atomics use. Mangled names and the calling
// convention (self, the lock word's address, in the swiftself register) are
// those of Swift 6.3.1's libswiftSynchronization.so; the script checks that
// the symbols still exist.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

void __tsan_acquire(void *addr);
void __tsan_release(void *addr);

#define SWIFTCALL __attribute__((swiftcall))
#define SWIFTSELF __attribute__((swift_context))

#define LOCK_SLOW "$s15Synchronization12_MutexHandleV9_lockSlowyys6UInt32VF"
#define TRYLOCK_SLOW "$s15Synchronization12_MutexHandleV12_tryLockSlowSbyF"
#define UNLOCK_SLOW "$s15Synchronization12_MutexHandleV11_unlockSlowyyF"

typedef SWIFTCALL void (*lock_slow_fn)(uint32_t self_id, void *SWIFTSELF handle);
typedef SWIFTCALL bool (*trylock_slow_fn)(void *SWIFTSELF handle);
typedef SWIFTCALL void (*unlock_slow_fn)(void *SWIFTSELF handle);

static void *real(const char *name) {
  void *f = dlsym(RTLD_NEXT, name);
  if (!f) {
    fprintf(stderr, "tsan-mutex: %s not found in the Swift runtime\n", name);
    abort();
  }
  return f;
}

SWIFTCALL void lock_slow(uint32_t self_id, void *SWIFTSELF handle) __asm__(LOCK_SLOW);
SWIFTCALL void lock_slow(uint32_t self_id, void *SWIFTSELF handle) {
  static lock_slow_fn cache;
  lock_slow_fn f = __atomic_load_n(&cache, __ATOMIC_RELAXED);
  if (!f) __atomic_store_n(&cache, f = (lock_slow_fn)real(LOCK_SLOW), __ATOMIC_RELAXED);
  f(self_id, handle);
  __tsan_acquire(handle);
}

SWIFTCALL bool trylock_slow(void *SWIFTSELF handle) __asm__(TRYLOCK_SLOW);
SWIFTCALL bool trylock_slow(void *SWIFTSELF handle) {
  static trylock_slow_fn cache;
  trylock_slow_fn f = __atomic_load_n(&cache, __ATOMIC_RELAXED);
  if (!f) __atomic_store_n(&cache, f = (trylock_slow_fn)real(TRYLOCK_SLOW), __ATOMIC_RELAXED);
  bool locked = f(handle);
  if (locked) __tsan_acquire(handle);
  return locked;
}

SWIFTCALL void unlock_slow(void *SWIFTSELF handle) __asm__(UNLOCK_SLOW);
SWIFTCALL void unlock_slow(void *SWIFTSELF handle) {
  static unlock_slow_fn cache;
  unlock_slow_fn f = __atomic_load_n(&cache, __ATOMIC_RELAXED);
  if (!f) __atomic_store_n(&cache, f = (unlock_slow_fn)real(UNLOCK_SLOW), __ATOMIC_RELAXED);
  __tsan_release(handle);
  f(handle);
}

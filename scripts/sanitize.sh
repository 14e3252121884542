#!/usr/bin/env bash
# Sanitizer run: a ThreadSanitizer build and an AddressSanitizer build, the
# Swift tests under each, and the end-to-end namespace and write tests against
# each build's daemon. Any sanitizer report (in the test runner or in
# a daemon) fails the run, as does any failing test.
#
#   scripts/sanitize.sh            # tsan, then asan
#   scripts/sanitize.sh tsan       # or: asan; extra arguments go nowhere else
#
# Reports are kept in .build-sanitize/<tsan|asan>/<unit|e2e>/ (one file per
# instrumented process, via log_path) and counted at the end, beside each
# step's time.
# Suppressions: scripts/sanitizers/{tsan,lsan}.supp, each with its reason.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)

PHASES=("$@")
[ ${#PHASES[@]} -gt 0 ] || PHASES=(tsan asan)
for p in "${PHASES[@]}"; do
  case "$p" in tsan | asan) ;; *) echo "usage: $0 [tsan] [asan]" >&2; exit 2 ;; esac
done

# The machine is shared (2 cores): stay below others' interactive work.
NICE=(nice -n 10)
REPORTS="$REPO/.build-sanitize"
SUPP="$REPO/scripts/sanitizers"

say() { printf '==> %s\n' "$*"; }

# Named times, printed at the end (CI budget: decide from these).
TIMES=()
timed() {
  local name=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  TIMES+=("$(printf '%-22s %4d s  (exit %d)' "$name" $((SECONDS - start)) "$rc")")
  return "$rc"
}

# `swift build` refuses a source edited while it compiles. In a checkout that
# others edit at the same time that is transient, so try again; CI never sees it.
build() {
  local log attempt rc
  log=$(mktemp)
  for attempt in 1 2 3; do
    rc=0
    "${NICE[@]}" swift build --build-tests "$@" >"$log" 2>&1 || rc=$?
    grep -E ': error: |^error: |Build complete' "$log" || true
    if [ "$rc" -eq 0 ]; then
      rm -f "$log"
      return 0
    fi
    grep -q 'was modified during the build' "$log" || break
    say "a source changed during the build; again ($attempt)"
    sleep 10
  done
  tail -30 "$log" >&2
  rm -f "$log"
  return 1
}

# The number of reports under a phase's directory; their SUMMARY lines go to
# stderr, counted.
count_reports() {
  local dir=$1 pattern=$2 n
  n=$({ grep -rhE "$pattern" "$dir" || true; } | wc -l)
  if [ "$n" -gt 0 ]; then
    { grep -rhE '^SUMMARY: ' "$dir" || true; } | sort | uniq -c | sort -rn >&2
  fi
  echo "$n"
}

STATUS=0
FLAGS=()
fail() {
  echo "sanitize.sh: $*" >&2
  STATUS=1
}

# The Swift tests, then the e2e namespace and write tests against this build's
# daemon, each with its own report directory; then count the reports.
# $1: tsan|asan, $2: scratch path, $3: report-count pattern, rest: skips.
# Options come from `options DIR unit|e2e`; log_path gives one file per
# instrumented process (the test runner, every daemon), and verbosity=1 makes
# each write one, so an empty e2e directory means no daemon ran instrumented
# (and proves nothing).
run_tests() {
  local kind=$1 scratch=$2 pattern=$3
  shift 3
  local dir="$REPORTS/$kind" flags
  flags=("${FLAGS[@]}")
  rm -rf "$dir" && mkdir -p "$dir/unit" "$dir/e2e"

  say "$kind: swift test"
  options "$dir/unit" unit
  timed "$kind swift test" "${NICE[@]}" swift test --skip-build "${flags[@]}" "$@" \
    || fail "swift test under $kind failed"

  say "$kind: end-to-end namespace and write tests against the $kind daemon"
  BUCKETFS_SKIP_BUILD=1 scripts/setup.sh >/dev/null
  options "$dir/e2e" e2e
  export BUCKETFS_BIN="$REPO/$scratch/debug/bucketfs"
  timed "$kind e2e" "${NICE[@]}" .venv/bin/python -m pytest -q -p no:cacheprovider \
    tests/test_namespace.py tests/test_writes.py || fail "end-to-end tests against the $kind daemon failed"
  unset TSAN_OPTIONS ASAN_OPTIONS LSAN_OPTIONS BUCKETFS_BIN

  local n daemons
  daemons=$(find "$dir/e2e" -type f | wc -l)
  [ "$daemons" -gt 0 ] || fail "$kind: no instrumented bucketfs process wrote to $dir/e2e; the run proves nothing"
  n=$(count_reports "$dir" "$pattern")
  local suppressed
  # Used suppressions, as TSan ("3 race:pattern") and LSan ("  3  96 pattern") list them.
  suppressed=$({ grep -rhE '^[0-9]+ [a-z_]+:|^ +[0-9]+ +[0-9]+ +[^ ]+$' "$dir" || true; } | awk '{ s += $1 } END { print s + 0 }')
  TIMES+=("$kind reports: $n, suppressed: $suppressed (from $(find "$dir/unit" -type f | wc -l) test processes and $daemons bucketfs processes; $dir)")
  [ "$n" -eq 0 ] || fail "$n $kind report(s); see $dir"
}

# ----------------------------------------------------------------------------
# ThreadSanitizer
tsan() {
  local scratch=.build-tsan shim
  # SwiftPM's --sanitize gives -sanitize=thread to swiftc, -fsanitize=thread to
  # clang (the CFuse target) and to the link, which a bare -Xswiftc does not.
  #
  # Swift's Synchronization.Mutex (used throughout Sources/) takes its contended
  # path in the uninstrumented runtime, so TSan would report every access made
  # under a contended Mutex. tsan-mutex.c tells TSan about that path (see its
  # header). It depends on the toolchain's mangled names, so check they are
  # there and that the shim still hides false reports and nothing real.
  mkdir -p "$scratch"
  shim="$REPO/$scratch/tsan-mutex.o"
  local sync syms sym
  sync="$(dirname "$(dirname "$(readlink -f "$(command -v swift)")")")/lib/swift/linux/libswiftSynchronization.so"
  syms=$(nm -D --defined-only "$sync")
  for sym in _MutexHandleV9_lockSlowyys6UInt32VF _MutexHandleV11_unlockSlowyyF _MutexHandleV12_tryLockSlowSbyF; do
    grep -qF "$sym" <<<"$syms" || {
      fail "the toolchain's Synchronization has no $sym: update scripts/sanitizers/tsan-mutex.c"
      return
    }
  done
  clang -O2 -fPIC -Wall -Werror -c "$SUPP/tsan-mutex.c" -o "$shim"
  FLAGS=(--sanitize thread --scratch-path "$scratch" -Xlinker "$shim")

  say "tsan: shim self-check"
  local check="$REPO/$scratch/mutex-repro" quiet racy
  "${NICE[@]}" swiftc -sanitize=thread -g "$SUPP/mutex-repro.swift" -o "$check" -Xlinker "$shim"
  quiet=$(TSAN_OPTIONS=exitcode=0 "$check" locked 2>&1 | grep -c 'WARNING: ThreadSanitizer' || true)
  racy=$(TSAN_OPTIONS=exitcode=0 "$check" racy 2>&1 | grep -c 'WARNING: ThreadSanitizer' || true)
  if [ "$quiet" -ne 0 ] || [ "$racy" -eq 0 ]; then
    fail "tsan-mutex.o self-check: $quiet reports under the lock (want 0), $racy for a real race (want >0)"
    return
  fi

  say "tsan: build ($scratch)"
  timed "tsan build" build "${FLAGS[@]}" || { fail "tsan build failed"; return; }

  # halt_on_error=0: every report, not just the first; exitcode: a process with
  # a report still fails; print_suppressions: suppressed reports stay visible
  # (counted in the summary).
  options() {
    export TSAN_OPTIONS="halt_on_error=0 exitcode=66 log_path=$1/report verbosity=1 second_deadlock_stack=1 suppressions=$SUPP/tsan.supp print_suppressions=1"
  }
  # Skipped under TSan (5-15x slower here), each for its reason:
  local skips=(
    # 1 s attempt timeout: under TSan the fake's commit of the 4 MiB last chunk
    # outlasts it, the client's status query arrives mid-commit and the fake
    # commits a second time (ifGenerationMatch=0: 412, session dropped, 404);
    # the client starts over and gets 412. A timing bug of the fake, not a race.
    --skip 'ResumableUploadTests.testStreamsFromTheSourceChunkByChunk'
    # 0.5 s attempt timeout, the same path as above.
    --skip 'ResumableUploadTests.testAStalledChunkTimesOutAndResumes'
    # 3 s retry deadline for a 9 MiB resumable upload through faults: too short
    # under TSan (EIO at close).
    --skip 'WriteHTTPTests.testANewLargeFileGoesUpResumableAndByteExactThroughTransientFaults'
  )
  run_tests tsan "$scratch" 'WARNING: ThreadSanitizer|ERROR: ThreadSanitizer|FATAL: ThreadSanitizer|ThreadSanitizer:DEADLYSIGNAL' "${skips[@]}"
}

# ----------------------------------------------------------------------------
# AddressSanitizer
asan() {
  local scratch=.build-asan
  FLAGS=(--sanitize address --scratch-path "$scratch")
  say "asan: build ($scratch)"
  timed "asan build" build "${FLAGS[@]}" || { fail "asan build failed"; return; }

  # ASan stops a process at its first error (not built to recover).
  # Leaks are checked in the daemons (at exit), with scripts/sanitizers/lsan.supp
  # dropping Swift's weak-reference side tables, which LeakSanitizer cannot see
  # referenced. Not in the Swift test runner: what it leaks at exit is the tests'
  # own (one WriteHTTPTests instance with its 9 MiB fixtures, the fake server's
  # connections, XCTest's records: 19 MB "indirect", held by cycles) and 2x16
  # bytes in swift-crypto's RSA key generation, which only the tests do.
  options() {
    local leaks=1
    [ "$2" = e2e ] || leaks=0
    export ASAN_OPTIONS="log_path=$1/report verbosity=1 detect_leaks=$leaks"
    export LSAN_OPTIONS="suppressions=$SUPP/lsan.supp print_suppressions=1"
  }
  # Skipped under ASan (2-3x slower here), each for its reason:
  local skips=(
    # Seen failing under ASan too: the fake's double commit described in tsan().
    --skip 'ResumableUploadTests.testStreamsFromTheSourceChunkByChunk'
    # 3 s retry deadline for a 9 MiB resumable upload through faults: too short
    # under ASan (EIO at close).
    --skip 'WriteHTTPTests.testANewLargeFileGoesUpResumableAndByteExactThroughTransientFaults'
  )
  run_tests asan "$scratch" 'ERROR: AddressSanitizer|ERROR: LeakSanitizer|AddressSanitizer:DEADLYSIGNAL' "${skips[@]}"
}

for p in "${PHASES[@]}"; do "$p"; done

say "summary"
printf '  %s\n' "${TIMES[@]}"
exit "$STATUS"

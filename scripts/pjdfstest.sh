#!/usr/bin/env bash
# Run pjdfstest (POSIX conformance) through a real bucketfs mount of an emulated
# bucket, and compare its failures with the reasoned list in
# tests/pjdfstest-expected.txt.
#
#   scripts/pjdfstest.sh [--testbench] [--strict] [--keep] [--skip SUBSET/NN.t]...
#                        PJDFSTEST_DIR [SUBSET|SUBSET/NN.t ...]
#
# PJDFSTEST_DIR  a pjdfstest checkout already built (autoreconf -ifs && ./configure
#                && make pjdfstest); see docs/TESTING.md.
# SUBSET         limit the run (default: every subset listed in SUBSETS below).
# --testbench    use storage-testbench (shared/testbench.sh, or $TESTBENCH_SH) instead
#                of fake-gcs-server; it enforces preconditions and has objects.move.
# --strict       a test listed as expected to fail that passes fails the run too
#                (default: it is reported as a note, so the list can be trimmed).
# --keep         keep the work directory (logs, TAP output) even on success.
# --skip FILE    leave out one test file (repeatable); e.g. open/25.t, whose
#                2 GiB file makes fake-gcs-server hold ~9 GB of memory.
#
# Environment: BUCKETFS_BIN (default .build/release/bucketfs), BUCKETFS_LOG_LEVEL
# (default info; debug for a reproduction), PJDFSTEST_TIMEOUT (seconds per test
# file, default 600), PJDFSTEST_EXPECTED (default tests/pjdfstest-expected.txt).
#
# Must run as root: pjdfstest switches uid/gid (-u/-g) and chowns. The mount uses
# -o allow_other, else FUSE refuses every other uid outright and the permission
# tests would measure FUSE, not bucketfs.
#
# Exit status: 0 when every failure is expected; 1 on an unexpected failure, a
# daemon crash, a dead or unanswering mount (ENOTCONN) or a test file that hangs
# past the timeout; 2 on a usage or setup error. The mount, the daemon and the
# emulator are always cleaned up.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SUBSETS=(open truncate ftruncate unlink mkdir rmdir rename chmod chown utimensat symlink link)

usage() { sed -n '6,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "pjdfstest.sh: $*" >&2; exit 2; }

emulator=fakegcs strict=0 keep=0 skip=()
while [ $# -gt 0 ]; do
  case "$1" in
  --testbench) emulator=testbench ;;
  --strict) strict=1 ;;
  --keep) keep=1 ;;
  --skip) [ $# -ge 2 ] || usage; skip+=("$2"); shift ;;
  -h|--help) usage ;;
  --) shift; break ;;
  -*) echo "pjdfstest.sh: unknown option $1" >&2; usage ;;
  *) break ;;
  esac
  shift
done
[ $# -ge 1 ] || usage
PJD=$(cd "$1" 2>/dev/null && pwd) || die "no such directory: $1"
shift
[ -x "$PJD/pjdfstest" ] && [ -f "$PJD/tests/misc.sh" ] ||
  die "$PJD is not a built pjdfstest checkout (no pjdfstest binary or tests/misc.sh)"
[ "$(id -u)" -eq 0 ] || die "must run as root (pjdfstest changes uid/gid and owners)"
BIN=${BUCKETFS_BIN:-$REPO/.build/release/bucketfs}
[ -x "$BIN" ] || die "no bucketfs binary at $BIN (build with swift build -c release, or set BUCKETFS_BIN)"
EXPECTED=${PJDFSTEST_EXPECTED:-$REPO/tests/pjdfstest-expected.txt}
[ -f "$EXPECTED" ] || die "no expected-failure list at $EXPECTED"
LOG_LEVEL=${BUCKETFS_LOG_LEVEL:-info}
TIMEOUT=${PJDFSTEST_TIMEOUT:-600}
for t in fusermount3 timeout curl; do command -v "$t" >/dev/null || die "$t not found"; done

# The test files to run, as SUBSET/NN.t, in pjdfstest's own order.
files=()
for arg in "${@:-${SUBSETS[@]}}"; do
  if [ -d "$PJD/tests/$arg" ]; then
    while IFS= read -r f; do files+=("$arg/$f"); done < <(cd "$PJD/tests/$arg" && ls -- *.t | sort -V)
  elif [ -f "$PJD/tests/$arg" ]; then
    files+=("$arg")
  else
    die "no test subset or file $arg under $PJD/tests"
  fi
done
for s in "${skip[@]}"; do
  [ -f "$PJD/tests/$s" ] || die "--skip $s: no such test file under $PJD/tests"
  for i in "${!files[@]}"; do [ "${files[$i]}" != "$s" ] || unset 'files[i]'; done
done
files=("${files[@]}")
[ ${#files[@]} -gt 0 ] || die "nothing left to run"

PY=$REPO/.venv/bin/python
[ -x "$PY" ] || PY=python3
WORK=$(mktemp -d /tmp/bucketfs-pjdfstest.XXXXXX)
MNT=$WORK/mnt LOG=$WORK/bucketfs.log TAP=$WORK/tap
mkdir -p "$MNT" "$WORK/cache" "$TAP"
BUCKET=pjdfstest
emu_port="" emu_url="" daemon_pid="" failed_run=0

is_mounted() { awk -v m="$MNT" '$5 == m { f = 1 } END { exit !f }' /proc/self/mountinfo; }

# The daemon is found by its argv (the unique mount point) and its executable.
find_daemon() {
  local p
  for p in /proc/[0-9]*; do
    [ -r "$p/cmdline" ] || continue
    if tr '\0' '\n' <"$p/cmdline" 2>/dev/null | grep -qxF "$MNT" &&
      [[ "$(readlink "$p/exe" 2>/dev/null)" == *bucketfs* ]]; then
      echo "${p#/proc/}"
      return 0
    fi
  done
  return 1
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  cd /
  if is_mounted; then
    timeout 20 "$BIN" unmount "$MNT" >/dev/null 2>&1 || true
    is_mounted && { fusermount3 -u "$MNT" 2>/dev/null || true; }
    if is_mounted; then
      # A daemon that hangs keeps the unmount waiting: abort the FUSE connection.
      local dev
      dev=$(awk -v m="$MNT" '$5 == m { split($3, d, ":"); print d[2] }' /proc/self/mountinfo)
      [ -n "$dev" ] && [ -w "/sys/fs/fuse/connections/$dev/abort" ] && echo 1 >"/sys/fs/fuse/connections/$dev/abort"
      fusermount3 -u -z "$MNT" 2>/dev/null || true
    fi
  fi
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill "$daemon_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$daemon_pid" 2>/dev/null || true
  fi
  case "$emulator" in
  fakegcs) "$PY" "$REPO/scripts/fakegcs.py" stop --pidfile "$WORK/emulator.pid" || true ;;
  testbench) [ -n "$emu_port" ] && { "$TESTBENCH_SH" stop "$emu_port" || true; } ;;
  esac
  rmdir "$MNT" 2>/dev/null || true
  if [ "$rc" -eq 0 ] && [ "$keep" -eq 0 ]; then
    rm -rf "$WORK"
  else
    echo "pjdfstest.sh: logs and TAP output kept in $WORK" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

case "$emulator" in
fakegcs)
  emu_url=$("$PY" "$REPO/scripts/fakegcs.py" start --pidfile "$WORK/emulator.pid" --log "$WORK/emulator.log") ||
    die "fake-gcs-server did not start (scripts/setup.sh makes the .venv it ships in)"
  ;;
testbench)
  TESTBENCH_SH=${TESTBENCH_SH:-$REPO/../shared/testbench.sh}
  [ -x "$TESTBENCH_SH" ] || die "no storage-testbench script at $TESTBENCH_SH (set TESTBENCH_SH)"
  emu_port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # Into a file, not $(...): the server keeps the start script's stdout open,
  # so a command substitution would wait for the server to exit.
  "$TESTBENCH_SH" start "$emu_port" >"$WORK/testbench.url" || die "storage-testbench did not start"
  emu_url=$(tail -n 1 "$WORK/testbench.url")
  ;;
esac
curl -sf -X POST -H 'Content-Type: application/json' -d "{\"name\": \"$BUCKET\"}" \
  "$emu_url/storage/v1/b?project=test" >/dev/null || die "could not create bucket $BUCKET at $emu_url"

"$BIN" mount "gs://$BUCKET" "$MNT" --endpoint "$emu_url" --anonymous -o allow_other \
  --cache-dir "$WORK/cache" --log-file "$LOG" --log-level "$LOG_LEVEL" ||
  die "mount failed; log: $(tail -5 "$LOG" 2>/dev/null)"
daemon_pid=$(find_daemon) || die "mounted, but no bucketfs process serves $MNT"
echo "==> $emulator at $emu_url, bucketfs $("$BIN" --version 2>/dev/null || true) (pid $daemon_pid) on $MNT"

# The daemon must be alive and its mount must answer, within a bound (a hang
# is a bug too). ENOTCONN here means the daemon went away under the mount.
check_mount() {
  local err
  if ! kill -0 "$daemon_pid" 2>/dev/null; then
    echo "daemon (pid $daemon_pid) is gone"; return 1
  fi
  is_mounted || { echo "mount point is no longer mounted"; return 1; }
  if ! err=$(timeout 30 stat -- "$MNT" 2>&1 >/dev/null) || ! err=$(timeout 30 ls -f -- "$MNT" 2>&1 >/dev/null); then
    echo "mount does not answer: ${err:-timed out after 30 s}"; return 1
  fi
}

crash_report() {
  echo "!! $1" >&2
  echo "!! last TAP lines of $f:" >&2
  grep -E '^(not )?ok ' "$out" | tail -n 5 | sed 's/^/   /' >&2
  echo "!! last lines of the daemon log ($LOG; a Swift fatal error lands there too):" >&2
  tail -n 30 "$LOG" 2>/dev/null | sed 's/^/   /' >&2
  failed_run=1
}

# Parse one file's TAP: print "FILE:N<TAB>message" for every test in the plan
# that did not pass (a missing line counts: the script died there). TODO
# results are TAP passes.
tap_failures() {
  awk -v file="$1" '
    /^1\.\.[0-9]+/ { plan = substr($1, 4) + 0; next }
    /^ok [0-9]+/ { ok[$2] = 1; next }
    /^not ok [0-9]+/ {
      if ($0 ~ /# TODO/) { ok[$3] = 1; next }
      msg = $0; sub(/^not ok [0-9]+ *-? */, "", msg); why[$3] = msg; next
    }
    END {
      if (plan == 0) { printf "%s:plan\tno TAP plan (the test script did not run)\n", file; exit }
      for (i = 1; i <= plan; i++)
        if (!(i in ok)) printf "%s:%d\t%s\n", file, i, ((i in why) ? why[i] : "missing: the script stopped before it")
    }' "$2"
}

# Expected failures: "## reason" starts a group, "SUBSET/NN.t N N-M ..." lines
# list test numbers; prints "FILE:N<TAB>reason".
expected_keys() {
  awk '
    /^##/ { reason = $0; sub(/^## */, "", reason); next }
    /^#/ || NF == 0 { next }
    {
      if (reason == "") { printf "%s:%d: entry without a reason\n", FILENAME, NR > "/dev/stderr"; exit 3 }
      for (i = 2; i <= NF; i++) {
        n = split($i, r, "-")
        if ($i !~ /^[0-9]+(-[0-9]+)?$/) { printf "%s:%d: bad test number %s\n", FILENAME, NR, $i > "/dev/stderr"; exit 3 }
        for (k = r[1]; k <= (n == 2 ? r[2] : r[1]); k++) printf "%s:%d\t%s\n", $1, k, reason
      }
    }' "$EXPECTED"
}
expected_keys >"$WORK/expected.tsv" || die "malformed $EXPECTED"

: >"$WORK/failures.tsv"
start=$SECONDS total_tests=0 nfiles=0
for f in "${files[@]}"; do
  out=$TAP/${f//\//_}
  t0=$SECONDS
  rc=0
  # Each file runs in the mount's root, as pjdfstest expects to be run from the
  # filesystem under test; sh, as its #! says.
  (cd "$MNT" && exec timeout -k 10 "$TIMEOUT" sh "$PJD/tests/$f") >"$out" 2>&1 || rc=$?
  nfiles=$((nfiles + 1))
  plan=$(sed -n 's/^1\.\.\([0-9]*\).*/\1/p' "$out" | head -1)
  total_tests=$((total_tests + ${plan:-0}))
  tap_failures "$f" "$out" >"$out.fail"
  cat "$out.fail" >>"$WORK/failures.tsv"
  printf '%-16s %3s tests %3d not ok %4ds\n' "$f" "${plan:-?}" "$(wc -l <"$out.fail")" $((SECONDS - t0))
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    crash_report "$f hung: killed after ${TIMEOUT}s (PJDFSTEST_TIMEOUT); last TAP line: $(tail -1 "$out")"
    break
  fi
  # The daemon is checked first: when it dies, fusermount3's auto_unmount
  # takes the mount away, and the rest of that file ran on the bare directory.
  if ! why=$(check_mount); then
    crash_report "during or after $f: $why"
    break
  fi
  if grep -q 'ENOTCONN' "$out"; then
    crash_report "$f: a syscall got ENOTCONN (the daemon stopped serving the mount): $(grep -m1 ENOTCONN "$out")"
    break
  fi
done
elapsed=$((SECONDS - start))

# Compare. Only the files that ran are judged.
ran_re=$(printf '%s\n' "${files[@]:0:$nfiles}" | sed 's/[.]/\\./g; s/^/^/; s/$/:/' | paste -sd'|')
grep -E "$ran_re" "$WORK/expected.tsv" >"$WORK/expected-ran.tsv" || true
# (FILENAME, not NR == FNR: the first file may be empty.)
unexpected=$(awk -F'\t' 'FILENAME == ARGV[1] { want[$1] = 1; next } !($1 in want)' "$WORK/expected-ran.tsv" "$WORK/failures.tsv")
passed=$(awk -F'\t' 'FILENAME == ARGV[1] { fail[$1] = 1; next } !($1 in fail)' "$WORK/failures.tsv" "$WORK/expected-ran.tsv")
nfail=$(wc -l <"$WORK/failures.tsv")
nunexp=$(printf '%s' "$unexpected" | grep -c . || true)
npassed=$(printf '%s' "$passed" | grep -c . || true)

echo
echo "==> $nfiles files, $total_tests tests, $nfail failed: $((nfail - nunexp)) expected, $nunexp unexpected; $npassed expected failures passed; ${elapsed}s"
if [ -n "$passed" ]; then
  echo "note: listed in $(basename "$EXPECTED") but passed (trim the list$([ "$strict" -eq 1 ] && echo '; --strict: this fails the run')):"
  printf '%s\n' "$passed" | sed 's/^/  /'
  [ "$strict" -eq 1 ] && failed_run=1
fi
if [ "$nfail" -gt "$nunexp" ]; then
  echo "expected failures by reason:"
  awk -F'\t' 'FILENAME == ARGV[1] { fail[$1] = 1; next } ($1 in fail) { n[$2]++ } END { for (r in n) printf "  %5d  %s\n", n[r], r }' \
    "$WORK/failures.tsv" "$WORK/expected-ran.tsv" | sort -rn
fi
if [ -n "$unexpected" ]; then
  echo "UNEXPECTED failures (TAP output of each file in $TAP):"
  printf '%s\n' "$unexpected" | sed 's/^/  /'
  failed_run=1
fi
[ "$failed_run" -eq 0 ] || { echo "pjdfstest.sh: FAILED" >&2; exit 1; }
echo "pjdfstest.sh: OK"

#!/usr/bin/env bash
# The one test command: set up, then
#   1. lint: no tuple literal with an await inside (a Swift 6.3.1 miscompile);
#   2. debug build and the Swift tests (unit, in-process integration);
#   3. the release binary, built as scripts/install.sh builds it, and the
#      toolchain check (Tests/ToolchainCheck) in the same configuration;
#   4. the end-to-end suite on real FUSE mounts against fake-gcs-server,
#      with the release binary (what ships is what is tested);
#   5. the write, namespace, xattr, rename-round, backup, in-flight, symlink,
#      metrics, composite-upload, integrity and read-cache tests again against
#      storage-testbench, Google's faithful emulator (../shared/testbench.sh),
#      and Google's retry conformance scenarios, which only it can inject;
#      the xattr, rename-round, read-cache, list-cache and write tests of that run go
#      through a TLS front (nginx, private CA, --ca-file: BUCKETFS_E2E_TLS=1);
#   6. the xattr, write and read-cache tests over TLS against fake-gcs-server.
# Extra arguments are passed to both pytest runs (e.g. scripts/test.sh -k xattr).
# BUCKETFS_SKIP_TESTBENCH=1 skips step 5 (no storage-testbench on the machine).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup.sh

failed=()
step() { printf '\n==> %s\n' "$*"; }

step "lint: await inside tuple literals"
python3 scripts/lint-async-tuples.py || failed+=("lint-async-tuples")

step "swift build --build-tests (debug), with no warnings in our own code"
build_log=$(mktemp)
swift build --build-tests 2>&1 | tee "$build_log"
# Packages' warnings are theirs; a warning in Sources/ or Tests/ fails the run.
if grep -E "^$PWD/(Sources|Tests)/.*: warning:" "$build_log"; then failed+=("warnings in our code"); fi
rm -f "$build_log"

step "swift test"
swift_log=$(mktemp)
trap 'rm -f "$swift_log"' EXIT
swift_rc=0
# In parallel (one process per test, as many at once as cores): about 140 s
# instead of 210 s, since most tests wait on timers and sockets, not the CPU.
swift test --skip-build --parallel 2>&1 | tee "$swift_log" || swift_rc=$?
[ "$swift_rc" -eq 0 ] || failed+=("swift test")

# The flags scripts/install.sh builds with, so the binary tested is the one installed.
release_flags=(-c release --static-swift-stdlib)
step "swift build ${release_flags[*]}"
swift build "${release_flags[@]}"
release_bin=$(swift build "${release_flags[@]}" --show-bin-path)

step "toolchain check (release)"
"$release_bin/ToolchainCheck" || failed+=("toolchain check")

export BUCKETFS_BIN="${BUCKETFS_BIN:-$release_bin/bucketfs}"
step "end-to-end tests against fake-gcs-server ($BUCKETFS_BIN)"
# pytest's 5 is "no test selected", which extra arguments may cause.
e2e() { .venv/bin/python -m pytest -q "$@" || [ $? -eq 5 ]; }
e2e tests/ "$@" || failed+=("e2e on fake-gcs-server")

if [ "${BUCKETFS_SKIP_TESTBENCH:-0}" != 1 ]; then
  step "end-to-end tests against storage-testbench ($BUCKETFS_BIN)"
  BUCKETFS_E2E_EMULATOR=storage-testbench e2e \
    tests/test_namespace.py \
    tests/test_backup.py tests/test_in_flight.py tests/test_symlinks.py tests/test_metrics.py \
    tests/test_composite.py tests/test_retry_conformance.py tests/test_posix.py \
    tests/test_streaming.py tests/test_streaming_faults.py \
    tests/test_stale_names.py tests/test_billing.py tests/test_integrity.py "$@" ||
    failed+=("e2e on storage-testbench")
  step "end-to-end tests against storage-testbench over TLS ($BUCKETFS_BIN)"
  BUCKETFS_E2E_EMULATOR=storage-testbench BUCKETFS_E2E_TLS=1 e2e \
    tests/test_writes.py tests/test_xattr.py tests/test_rename_rounds.py tests/test_read_cache.py \
    tests/test_list_cache.py tests/test_tls.py tests/test_tls_connections.py "$@" ||
    failed+=("e2e on storage-testbench over TLS")
fi

step "end-to-end tests against fake-gcs-server over TLS ($BUCKETFS_BIN)"
BUCKETFS_E2E_TLS=1 e2e tests/test_xattr.py tests/test_writes.py tests/test_read_cache.py "$@" ||
  failed+=("e2e on fake-gcs-server over TLS")

if [ "$swift_rc" -ne 0 ]; then
  # Repeat what failed at the end, where a truncated log still shows it.
  echo "swift test failed (exit $swift_rc):" >&2
  grep -E ': error: |^Test Case .* failed \(|Fatal error|signal' "$swift_log" >&2 || true
fi
if [ ${#failed[@]} -gt 0 ]; then
  printf 'test.sh: failed: %s\n' "${failed[*]}" >&2
  exit 1
fi
echo "test.sh: all passed"

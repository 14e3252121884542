#!/usr/bin/env bash
# The one test command: set up, build, run the Swift tests, then the
# end-to-end tests (real FUSE mounts against fake-gcs-server).
# Extra arguments are passed to pytest (e.g. scripts/test.sh -k xattr).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup.sh

echo "==> swift build --build-tests"
swift build --build-tests

echo "==> swift test"
swift_log=$(mktemp)
trap 'rm -f "$swift_log"' EXIT
swift_rc=0
swift test --skip-build 2>&1 | tee "$swift_log" || swift_rc=$?

echo "==> end-to-end tests (pytest)"
export BUCKETFS_BIN="${BUCKETFS_BIN:-$(swift build --show-bin-path)/bucketfs}"
e2e_rc=0
.venv/bin/python -m pytest -q tests/ "$@" || e2e_rc=$?

if [ "$swift_rc" -ne 0 ]; then
  # Repeat what failed at the end, where a truncated log still shows it.
  echo "swift test failed (exit $swift_rc):" >&2
  grep -E ': error: |^Test Case .* failed \(|Fatal error|signal' "$swift_log" >&2 || true
  exit "$swift_rc"
fi
exit "$e2e_rc"

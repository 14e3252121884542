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
swift_rc=0
swift test --skip-build || swift_rc=$?

echo "==> end-to-end tests (pytest)"
export BUCKETFS_BIN="${BUCKETFS_BIN:-$(swift build --show-bin-path)/bucketfs}"
e2e_rc=0
.venv/bin/python -m pytest -q tests/ "$@" || e2e_rc=$?

if [ "$swift_rc" -ne 0 ]; then
  echo "swift test failed (exit $swift_rc)" >&2
  exit "$swift_rc"
fi
exit "$e2e_rc"

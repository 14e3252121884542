#!/usr/bin/env python3
"""Directories and buckets at scale (issue 40): `ls -f`, `ls -l` and `find`
on a fresh mount of bench/listserver.py's computed namespace, against paging
the same listing directly through the same counting proxy, right before.

    bench/run.sh --scale                       # 10k, 100k, 1M directories; trees of 10k to 10M
    bench/run.sh --scale --flat 10000,100000 --trees 10x1000,100x1000

Each row is one fresh mount (--read-cache-size 0): the command's wall time,
the direct paging it is compared with, measured just before it (delimited
pages for a directory; flat pages of the whole prefix for a tree, the least
a walk can cost), their
ratio, the requests the mount made, and the daemon's peak RSS (VmHWM) at the
end. Last, `stat` of the last name of the largest directory on a fresh mount.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "bench"))
import fakegcs as F  # noqa: E402
import listserver as L  # noqa: E402
import run as R  # noqa: E402  (bench/run.py: mounts, direct paging)

BUCKET = "scale"
# What the mount asks of a list call (Sources/CloudStorage/Resources.swift, `Fields.list`):
# direct paging asks the same, so both pay the server the same for a page.
LIST_FIELDS = ("nextPageToken,prefixes,items(bucket,name,size,generation,metageneration,timeCreated,updated,"
               "md5Hash,crc32c,etag,storageClass,cacheControl,contentDisposition,contentEncoding,"
               "contentLanguage,contentType,metadata)")


def flat_prefix(n: int) -> str:
    return f"flat{n}/"


def tree_prefix(shape: list[int]) -> str:
    return "tree" + "x".join(map(str, shape)) + "/"


def command(cmd: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL, env=R.ENV, timeout=3600)
    return time.perf_counter() - t0


def measure(root: str, log_dir: str, proxy: F.CountingProxy, what: str, cmd, direct: float,
            extra: tuple = ()) -> dict:
    with R.BucketFSMount(root, BUCKET, proxy.url, log_dir, extra) as m:
        proxy.settle(0.3, 5)
        proxy.reset()
        seconds = command(cmd(m))
        proxy.settle(0.5, 10)
        peak = R.proc_status(m.pid()).get("VmHWM", 0) / 1024
        lists = proxy.count("list")
        others = proxy.count() - lists
    row = {"what": what, "seconds": seconds, "direct": direct, "ratio": seconds / direct if direct else None,
           "lists": lists, "others": others, "rss_mib": peak}
    R.log(f"{what}: {seconds:.2f} s against {direct:.2f} s ({row['ratio']:.2f}x), "
          f"{lists} lists + {others} other, peak RSS {peak:.1f} MiB")
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flat", default="10000,100000,1000000", help="directory sizes")
    ap.add_argument("--trees", default="10x1000,100x1000,10x100x1000,100x100x1000", help="tree shapes")
    ap.add_argument("--mount-args", default="", help="more options for every mount, e.g. \"--max-inodes 16384\"")
    ap.add_argument("--bucketfs-bin", default=os.environ.get("BUCKETFS_BIN") or R.BucketFSMount.binary)
    a = ap.parse_args(argv)
    extra = tuple(a.mount_args.split())
    R.BucketFSMount.binary = a.bucketfs_bin
    flats = [int(x) for x in a.flat.split(",") if x]
    trees = [[int(x) for x in t.split("x")] for t in a.trees.split(",") if t]
    families = [L.Family(flat_prefix(n), [n]) for n in flats] + [L.Family(tree_prefix(s), s) for s in trees]
    server = L.ListServer(L.Namespace(families), BUCKET)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proxy = F.CountingProxy(server.url).start()
    root = tempfile.mkdtemp(prefix="bucketfs-scale-")
    log_dir = os.path.join(root, "logs")
    os.makedirs(log_dir)
    rows = []
    try:
        R.log(f"bucketfs: {a.bucketfs_bin} {a.mount_args}")
        for n in flats:
            prefix = flat_prefix(n)
            for name, cmd in (("ls -f", "ls -f {}"), ("ls -l", "ls -l {}")):
                # Paged right before each mount: the machine's pace drifts over a run.
                direct = R.direct_list(proxy.url, BUCKET, prefix, fields=LIST_FIELDS)
                rows.append(measure(root, log_dir, proxy, f"`{name}` of {n:,}", lambda m, c=cmd: c.format(m.p(prefix)),
                                    direct, extra))
        for shape in trees:
            prefix = tree_prefix(shape)
            count = 1
            for w in shape:
                count *= w
            direct = R.direct_list(proxy.url, BUCKET, prefix, flat=True, fields=LIST_FIELDS)
            rows.append(measure(root, log_dir, proxy, f"`find -type f` of a tree of {count:,} ({shape})",
                                lambda m, p=prefix: f"find {m.p(p)} -type f", direct, extra))
        if flats:
            n = max(flats)
            last = L.Family(flat_prefix(n), [n]).name(n - 1)
            with R.BucketFSMount(root, BUCKET, proxy.url, log_dir, extra) as m:
                proxy.settle(0.3, 5)
                proxy.reset()
                t0 = time.perf_counter()
                os.stat(m.p(*last.split("/")))
                seconds = time.perf_counter() - t0
                proxy.settle(0.5, 10)
                R.log(f"stat of {last} on a fresh mount: {seconds * 1000:.0f} ms, {proxy.count()} requests "
                      f"({proxy.counts()})")
    finally:
        proxy.stop()
        server.stop()
    print("\n| on a fresh mount | paging it directly | bucketfs | ratio | requests | daemon peak RSS |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['what']} | {r['direct']:.2f} s | {r['seconds']:.2f} s | {r['ratio']:.2f}x | "
              f"{r['lists']:,} lists, {r['others']} other | {r['rss_mib']:.0f} MiB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Where the CPU of a cold sequential read goes (issue 29): the same object
read by curl into a tmpfs file and by `dd bs=1M` out of a bucketfs mount,
with the CPU time of every process that takes part.

    .venv/bin/python bench/readcpu.py --bin .build-release/release/bucketfs --size-mib 256 --repeat 5

On one fake-gcs-server (loopback), each repetition runs, in turn: curl into
/dev/shm; dd out of a fresh mount with `--read-cache-size 0`; dd out of a
fresh mount with the defaults (a cache directory of its own). For each it
takes the wall time and the CPU seconds (user + system) of the emulator,
of the reader (curl or dd), and of the daemon, from the kernel's per-thread
run time (`/proc/PID/task/*/schedstat`) and the children's rusage.

Both ways run on the same cores, so a read can finish no sooner than its
CPU seconds divided by the cores that serve it: the "floor" column is that
bound, sum of CPU / cores (2 here). It tells which of the read's costs a
change in the daemon can move, and whether a goal stated as a ratio of
curl's time is within reach of this machine at all.
The figures mean something only on a quiet machine (see BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "bench"))
import fakegcs as F  # noqa: E402
import run as R  # noqa: E402  (bench/run.py: its mounts and clean-up)

BUCKET = "bench-readcpu"
NAME = "dir/blob"


def run_seconds(pid: int) -> float:
    """CPU seconds of every live thread of `pid` (its threads outlive one read)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total / 1e9


def child_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measured(command: list[str], pids: dict[str, int]) -> dict[str, float]:
    """Runs `command`; its wall time and the CPU of it and of each of `pids`."""
    before = {name: run_seconds(pid) for name, pid in pids.items()}
    reader0 = child_seconds()
    t0 = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=R.ENV)
    wall = time.perf_counter() - t0
    out = {"wall": wall, "reader": child_seconds() - reader0}
    for name, pid in pids.items():
        out[name] = run_seconds(pid) - before[name]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="the bucketfs binary")
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()

    root = tempfile.mkdtemp(prefix="bench-readcpu-")
    gcs = F.FakeGCS(log_path=os.path.join(root, "fake-gcs.log")).start()
    rows: dict[str, list[dict[str, float]]] = {"curl into tmpfs": [], "cache off": [], "defaults": []}
    try:
        client = F.Client(gcs.url)
        client.create_bucket(BUCKET)
        client.upload(BUCKET, NAME, os.urandom(a.size_mib << 20))
        server = {"emulator": gcs.proc.pid}
        url = f"{gcs.url}/storage/v1/b/{BUCKET}/o/{F.q(NAME)}?alt=media"
        for rep in range(a.repeat):
            fd, path = tempfile.mkstemp(prefix="bench-curl-", dir="/dev/shm")
            os.close(fd)
            try:
                rows["curl into tmpfs"].append(measured(["curl", "-sf", "-o", path, url], server))
            finally:
                os.unlink(path)
            for label, kind in (("cache off", R.BucketFSMount), ("defaults", R.BucketFSDefaultsMount)):
                mount = kind(root, BUCKET, gcs.url, root)
                mount.binary = a.bin
                with mount as m:
                    os.stat(m.p(NAME))
                    pids = dict(server, daemon=m.pid())
                    rows[label].append(measured(["dd", f"if={m.p(NAME)}", "of=/dev/null", "bs=1M"], pids))
            print(f"[bench] round {rep + 1}: " + ", ".join(
                f"{k} {v[-1]['wall']:.3f} s" for k, v in rows.items()), file=sys.stderr)
    finally:
        gcs.stop()
        shutil.rmtree(root, ignore_errors=True)

    size = a.size_mib << 20
    print(f"{a.size_mib} MiB cold sequential read, fake-gcs-server on loopback, {a.cores} cores; "
          f"median of {a.repeat}; load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print("| | wall | MB/s | emulator CPU | reader CPU | daemon CPU | sum of CPU | floor (sum ÷ cores) |")
    print("|---|---|---|---|---|---|---|---|")
    for label, runs in rows.items():
        med = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in ("wall", "emulator", "reader", "daemon")}
        total = med["emulator"] + med["reader"] + med["daemon"]
        daemon = f"{med['daemon']:.3f} s" if label != "curl into tmpfs" else "—"
        print(f"| {label} | {med['wall']:.3f} s | {size / med['wall'] / 1e6:,.0f} | {med['emulator']:.3f} s | "
              f"{med['reader']:.3f} s | {daemon} | {total:.3f} s | {total / a.cores:.3f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""How long close waits after a large sequential write (issue 30): the time
from the last `write` returning to `close` returning, for one or more
bucketfs binaries measured back to back on one fake-gcs-server.

    .venv/bin/python bench/close.py --bin before=OLD-BIN --bin after=.build-release/release/bucketfs
    .venv/bin/python bench/close.py --bin after=BIN --mib 128 --latency-ms 20 --stream-mbps 25 --timeline

Each repetition writes --mib MiB in 1 MiB `write`s from this process into a
fresh file of a fresh mount (default options plus --mount-args), and takes
three times: open -> last write returned ("write"), last write -> close
returned ("close"), and the whole. The binaries run in turn within each
repetition (A B A B ...), so load that comes and goes falls on each alike.
The median of each, and each binary's close against the first's, are printed.

The mounts talk to the emulator directly, unless --latency-ms,
--stream-mbps or --timeline put the counting proxy (scripts/fakegcs.py) in
between: the WAN model, or a record of each request. --timeline prints, for
the last repetition of each binary, every request from the open on: when it
arrived and was answered, relative to the last write, so what the writer
and the close wait for can be read off (part uploads under way, the tail,
composes).
The proxy is a Python process that buffers each body: on loopback it slows
the transfers, so take the close figures from a run without --timeline.

--compose-probe also times, after each write, one compose of the stored
object into a new one, straight at the emulator: what the service's last
step of any parted upload (the close's compose) costs there by itself. The
emulator copies every byte of a compose (the service does not), so that
time is a floor under the close of any binary that composes at close.

The figures mean something only on a quiet machine (see BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import os
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

BUCKET = "bench-close"


class Mount(R.BucketFSMount):
    """bucketfs as a user runs it (defaults), in a cache directory of its own."""

    def __init__(self, binary: str, root: str, endpoint: str, log_dir: str, extra: list[str]):
        super().__init__(root, BUCKET, endpoint, log_dir, tuple(extra))
        self.binary = binary
        self.cache = tempfile.mkdtemp(prefix="cache-", dir=root)

    def open(self) -> None:
        args = [self.binary, "mount", f"gs://{self.bucket}", self.path, "--endpoint", self.endpoint,
                "--anonymous", "--log-level", "warning", "--log-file", self.log_path,
                "--cache-dir", self.cache, *self.extra]
        r = subprocess.run(args, env=R.ENV, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        if r.returncode != 0 or not self.mounted:
            raise RuntimeError(f"bucketfs mount failed ({r.returncode}): {r.stderr.strip()}")

    def _unmount(self) -> None:
        subprocess.run([self.binary, "unmount", self.path], capture_output=True, timeout=60, env=R.ENV)


def write_once(path: str, mib: int, block: bytes) -> tuple[float, float, float]:
    """(open -> last write, last write -> close, last write's monotonic time)."""
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for i in range(mib):
            piece = i.to_bytes(8, "little") + block[8:]
            view = memoryview(piece)
            while view:
                view = view[os.write(fd, view):]
        t1 = time.perf_counter()
        mono = time.monotonic()
    finally:
        os.close(fd)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, mono


def compose_once(client: F.Client, obj: str) -> float:
    """Seconds for the emulator to compose `obj` alone into a new object (then deleted)."""
    body = {"sourceObjects": [{"name": obj}], "destination": {"contentType": "application/octet-stream"}}
    t0 = time.perf_counter()
    client._json("POST", f"/storage/v1/b/{BUCKET}/o/{F.q('probe-' + obj)}/compose", body)
    took = time.perf_counter() - t0
    client.delete(BUCKET, "probe-" + obj)
    return took


def timeline(records: list, since: float) -> list[str]:
    rows = []
    for r in sorted(records, key=lambda r: r.arrived):
        name = r.path.rsplit("/o/", 1)[-1] if "/o/" in r.path else r.path
        if r.path.startswith("/upload/"):
            name = f"{r.method} upload {r.query.split('&')[0]}"
        rows.append(f"  {r.arrived - since:+8.3f} s .. {(r.answered - since) if r.answered else float('nan'):+8.3f} s"
                    f"  {r.kind:8} {r.method:6} {name[:90]} -> {r.status}")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", action="append", required=True, metavar="NAME=PATH[::ARGS]",
                    help="a bucketfs binary to measure (repeat for before/after), with mount options "
                         "of its own after '::' (e.g. 'nocache=BIN::--read-cache-size 0')")
    ap.add_argument("--mib", type=int, default=512, help="MiB written (default 512)")
    ap.add_argument("--repeat", type=int, default=3, help="repetitions, the median is reported (default 3)")
    ap.add_argument("--latency-ms", type=float, default=0.0, help="the proxy holds each request this long")
    ap.add_argument("--stream-mbps", type=float, default=0.0, help="the proxy paces each body to this")
    ap.add_argument("--mount-args", default="", help="more bucketfs mount options (one string)")
    ap.add_argument("--timeline", action="store_true", help="print each request of the last repetition, timed from the last write")
    ap.add_argument("--compose-probe", action="store_true",
                    help="after each write, time one compose of the stored object at the emulator")
    a = ap.parse_args()
    bins = []
    for spec in a.bin:
        name, _, rest = spec.partition("=")
        path, _, own = rest.partition("::")
        if not path or not os.access(path, os.X_OK):
            sys.exit(f"close: --bin NAME=PATH[::ARGS], and PATH must be executable: {spec!r}")
        bins.append((name, os.path.realpath(path), own.split()))

    root = tempfile.mkdtemp(prefix="bucketfs-close-")
    log_dir = os.path.join(root, "logs")
    os.makedirs(log_dir)
    gcs = F.FakeGCS(log_path=os.path.join(log_dir, "fake-gcs-server.log")).start()
    proxy = None
    block = os.urandom(1 << 20)
    results: dict[str, list[tuple[float, float, float]]] = {b[0]: [] for b in bins}
    lines: dict[str, list[str]] = {}
    probes: list[float] = []
    try:
        client = gcs.client()
        client.create_bucket(BUCKET)
        proxy = F.CountingProxy(gcs.url, latency=a.latency_ms / 1000, stream_bps=a.stream_mbps * 1e6).start()
        proxied = bool(a.latency_ms or a.stream_mbps or a.timeline)
        serial = 0
        for rep in range(a.repeat):
            for name, binary, own in bins:
                serial += 1
                obj = f"close-{serial}.bin"
                with Mount(binary, root, proxy.url if proxied else gcs.url, log_dir, a.mount_args.split() + own) as m:
                    os.listdir(m.path)
                    if proxied:
                        proxy.settle(0.3, 5)
                        proxy.reset()
                    write, close, mono = write_once(m.p(obj), a.mib, block)
                    if proxied:
                        proxy.settle(0.3, 10)
                    if a.timeline and rep == a.repeat - 1:
                        lines[name] = timeline(proxy.records(), mono)
                got = client.get(BUCKET, obj)
                if int(got["size"]) != a.mib << 20:
                    raise RuntimeError(f"{name}: stored {got['size']} bytes, wrote {a.mib << 20}")
                if a.compose_probe:
                    probes.append(compose_once(client, obj))
                client.delete(BUCKET, obj)
                results[name].append((write, close, write + close))
                R.log(f"{name} #{rep + 1}: write {write:.2f} s, last write -> close {close:.2f} s")
        load = os.getloadavg()
        print(f"{a.mib} MiB in 1 MiB writes, fake-gcs-server{' through the proxy' if proxied else ''}, latency {a.latency_ms:g} ms, stream cap "
              f"{a.stream_mbps:g} MB/s, mount args {a.mount_args or '(defaults)'}; median of {a.repeat}; "
              f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        print()
        print("| binary | open -> last write | last write -> close | whole | close ÷ first's | each close |")
        print("|---|---|---|---|---|---|")
        first = None
        for name, binary, own in bins:
            runs = results[name]
            w, c, t = (statistics.median(x[i] for x in runs) for i in range(3))
            first = first or c
            print(f"| {name} (`{binary}`{' ' + ' '.join(own) if own else ''}) | {w:.2f} s | {c:.2f} s | {t:.2f} s | {c / first:.2f}× | "
                  f"{', '.join(f'{x[1]:.2f}' for x in runs)} |")
        if probes:
            p = statistics.median(probes)
            print(f"| the emulator's compose of one such object, alone | | {p:.2f} s | | {p / first:.2f}× | "
                  f"{', '.join(f'{x:.2f}' for x in probes)} |")
        for name, rows in lines.items():
            print(f"\n{name}: requests, in seconds from the last write (arrived .. answered)")
            print("\n".join(rows))
        return 0
    finally:
        for mnt in [x for x in R.fuse_mounts() if x.startswith(root + "/")]:
            subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True, timeout=15)
        if proxy is not None:
            proxy.stop()
        gcs.stop()
        if os.environ.get("BENCH_KEEP") or any(x.startswith(root + "/") for x in R.fuse_mounts()):
            R.log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""bucketfs vs rclone mount vs direct HTTP, on one fake-gcs-server, in one run.

Starts one fake-gcs-server (memory backend, scripts/fakegcs.py), seeds it
once, puts the request-counting proxy in front of it, and measures:

  1. cold `ls -l` of a directory of N1 objects (wall, requests by kind)
  2. `ls -f | head -1` on a directory of N2 objects (wall, list calls)
  3. peak RSS (VmHWM) of each mount process during (2) and during a full
     `ls -l` of the N2 directory
  4. sequential read of a SIZE object with dd bs=1M vs curl (direct)
  5. `getfattr -d` over X files right after `ls -l` of their directory
  6. `stat` of 50 different cold files of one directory in parallel
  7. peak RSS (VmHWM) of each mount process while 64 files of P MiB are read
     in parallel with dd (bucketfs: all read-ahead shares one budget,
     --read-ahead-budget, default 256 MiB)
  8. cold `find`, `du -sb`, `getfattr -R -d` of a tree (TREE shape: fan-outs per
     level, then files per leaf directory) against a flat paged listing of its
     prefix (and the network part of `getfattr -R -d`: cold minus a warm rerun on
     the same mount); cold `cp -r` of a tree of small files against one flat
     listing plus one GET per file in sequence
  9. `cat` of the stat set's files after `ls` of their directory, against one GET
     per file in sequence
 10. writes: `cp` of a SIZE file into the mount vs curl uploading it (and the
     mount's peak RSS meanwhile); `cp` of 1,000 small files into an empty,
     listed directory vs rclone mount --vfs-cache-mode writes, with requests
     per file

--latency-ms L makes the counting proxy hold every request L ms (one network
round trip); every timing then goes through the proxy, references included,
and each run is also the counted one. --stream-mbps R caps each request's body
and each response's body in the proxy at R MB/s (one TCP stream's share of a
WAN). `--only wan` (bench/wan.py) reads and writes one --wan-mib object through
that model: curl, 8 parallel streams, and each mount, side by side.

Each data set lives in its own bucket: the emulator's memory backend inserts
in O(objects in the bucket), so seeding one bucket of 100,000 is quadratic;
separate buckets keep the other sets cheap and their listings independent.
The plain sets are preloaded from files (-data), about 15 minutes for 100,000
objects against over an hour of uploads; the rest is uploaded.

Usage:  .venv/bin/python bench/run.py [--quick] [--n1 N] [--n2 N] [--size-mib M] ...
Every mount is unmounted and every process stopped in `finally` blocks.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import fakegcs as F  # noqa: E402
import wan  # noqa: E402  (bench/wan.py)

import requests  # noqa: E402  (in .venv)

ENV = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
for _k in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS"):
    ENV.pop(_k, None)

B_LS, B_BIG, B_XATTR, B_STAT, B_READ = "bench-ls", "bench-big", "bench-xattr", "bench-stat", "bench-read"
B_PAR = "bench-parallel"
B_TREE, B_CP = "bench-tree", "bench-cp"
B_WRITE = "bench-write"
DIR = "dir"  # every set is the directory DIR/ of its bucket


def log(*a) -> None:
    print("[bench]", *a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# seeding


def upload_big(url: str, bucket: str, name: str, size: int) -> None:
    block = os.urandom(1 << 20)
    body = block * (size // len(block)) + block[: size % len(block)]
    r = requests.post(f"{url}/upload/storage/v1/b/{bucket}/o", params={"uploadType": "media", "name": name},
                      data=body, headers={"Content-Type": "application/octet-stream"}, timeout=600)
    r.raise_for_status()


def names(n: int) -> list[str]:
    return [f"{DIR}/f{i:07d}" for i in range(n)]


PRELOADED = (B_LS, B_BIG, B_STAT, B_TREE, B_CP)


def shape(text: str) -> list[int]:
    """'10x5x10x10': fan-outs per directory level, then files per leaf directory."""
    parts = [int(x) for x in text.split("x")]
    if len(parts) < 2 or min(parts) < 1:
        raise SystemExit(f"bench: bad tree shape {text!r}")
    return parts


def tree_names(fanouts: list[int]) -> list[str]:
    """DIR/l0-3/l1-2/.../f-007 for every leaf directory and file of a tree shape."""
    paths = [DIR]
    for level, fan in enumerate(fanouts[:-1]):
        paths = [f"{p}/l{level}-{i:03d}" for p in paths for i in range(fan)]
    return [f"{p}/f-{i:04d}" for p in paths for i in range(fanouts[-1])]


def xattrs_of(path: str) -> dict[str, bytes]:
    try:
        return {k: os.getxattr(path, k) for k in os.listxattr(path)}
    except OSError:  # a mount without xattrs
        return {}


def tree_dirs(fanouts: list[int]) -> int:
    n, total = 1, 0
    for fan in fanouts[:-1]:
        n *= fan
        total += n
    return total


def write_preload(data_dir: str, a) -> float:
    """Plain objects (content = their name) as files under data_dir/<bucket>/ for `-data`.

    Uploading them is slower still: each insert scans the bucket twice with a formatted
    string per object, so uploading 100,000 takes over an hour where the preload takes
    about 15 minutes (measured: 20,000 in 33 s, quadratic).
    Returns the seconds the emulator is expected to need to load them."""
    sets = [(B_LS, names(a.n1)), (B_BIG, names(a.n2)), (B_STAT, names(a.stat_files)),
            (B_TREE, tree_names(a.tree)), (B_CP, tree_names(a.cp_tree))]
    for bucket, listed in sets:
        for name in listed:
            path = os.path.join(data_dir, bucket, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                # small files of a few KiB for the copy, the name elsewhere
                f.write(name.encode() * (200 if bucket == B_CP else 1))
    return 2.5 * sum(33.0 * (len(listed) / 20000) ** 2 for _, listed in sets)


def seed(gcs: F.FakeGCS, a) -> dict:
    """What the preload does not cover: metadata-rich objects and the large blob."""
    c = gcs.client()
    for b in (B_XATTR, B_READ, B_PAR):
        c.create_bucket(b)
    t0 = time.monotonic()
    # metadata-rich objects for getfattr: contentType, cacheControl, custom metadata (multipart)
    c.upload_many(B_XATTR, [F.Obj(n, b"x", content_type="text/plain", cache_control="public,max-age=60",
                                  metadata={"owner": "bench", "index": n[-7:]}) for n in names(a.xattr_files)],
                  workers=a.seed_workers)
    upload_big(gcs.url, B_READ, f"{DIR}/blob", a.size_mib << 20)
    if "7" in a.only.split(","):
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: upload_big(gcs.url, B_PAR, f"{DIR}/p{i:02d}", a.parallel_mib << 20),
                          range(a.parallel_files)))
    return {"uploads": time.monotonic() - t0}


# ---------------------------------------------------------------------------
# processes and mounts


def fuse_mounts() -> set[str]:
    out = set()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split()[0].startswith("fuse"):
                out.add(left.split()[4])
    return out


def wait_for(pred, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()


def pids_with_arg(arg: str) -> list[int]:
    return [pid for pid, argv in F.live_processes() if arg.encode() in argv]


def pids_with_arg_prefix(prefix: str) -> list[int]:
    return [pid for pid, argv in F.live_processes() if any(x.startswith(prefix.encode() + b"/") for x in argv)]


def proc_status(pid: int) -> dict[str, int]:
    """VmHWM / VmRSS in KiB."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmHWM", "VmRSS"):
                    out[k] = int(v.split()[0])
    except OSError:
        pass
    return out


class Mount:
    """One mount of one bucket by one tool; always torn down by close()."""

    kind = "?"

    def __init__(self, root: str, bucket: str, endpoint: str, log_dir: str, extra: tuple = ()):
        self.bucket, self.endpoint, self.extra = bucket, endpoint, list(extra)
        self.root = root
        self.path = tempfile.mkdtemp(prefix=f"mnt-{self.kind}-", dir=root)
        self.log_path = os.path.join(log_dir, os.path.basename(self.path) + ".log")
        self.proc: subprocess.Popen | None = None

    def p(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    @property
    def mounted(self) -> bool:
        return self.path in fuse_mounts()

    def __enter__(self):
        try:
            self.open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if self.mounted:
            self._unmount()
            wait_for(lambda: not self.mounted, 10)
        if self.mounted:
            subprocess.run(["fusermount3", "-u", "-z", self.path], capture_output=True, timeout=15)
            wait_for(lambda: not self.mounted, 5)
        pids = self.pids()
        if self.proc is not None and self.proc.poll() is None:
            pids.append(self.proc.pid)
        for pid in set(pids):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        for pid in set(pids):
            if wait_for(lambda: not os.path.exists(f"/proc/{pid}"), 5):
                continue
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.rmdir(self.path)
        except OSError:
            pass

    def pids(self) -> list[int]:
        return pids_with_arg(self.path)


class BucketFSMount(Mount):
    kind = "bucketfs"
    binary = str(REPO / ".build" / "debug" / "bucketfs")

    def open(self) -> None:
        args = [self.binary, "mount", f"gs://{self.bucket}", self.path, "--endpoint", self.endpoint,
                "--anonymous", "--log-level", "warning", "--log-file", self.log_path,
                "--cache-dir", os.path.join(self.root, "cache"), *self.no_read_cache(), *self.extra]
        r = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        if r.returncode != 0 or not self.mounted:
            raise RuntimeError(f"bucketfs mount failed ({r.returncode}): {r.stderr.strip()}")

    def no_read_cache(self) -> list[str]:
        """These measurements are of the network: the read cache (bench/cache.py) is off unless asked for."""
        return [] if "--read-cache-size" in self.extra else ["--read-cache-size", "0"]

    def pid(self) -> int:
        # the daemon: `bucketfs mount ... --foreground --ready-fd N` naming this mountpoint
        ps = [p for p in self.pids() if b"--ready-fd" in open(f"/proc/{p}/cmdline", "rb").read()]
        if len(ps) != 1:
            raise RuntimeError(f"expected one bucketfs daemon for {self.path}, found {ps}")
        return ps[0]

    def _unmount(self) -> None:
        subprocess.run([self.binary, "unmount", self.path], capture_output=True, timeout=30, env=ENV)


class BucketFSDefaultsMount(BucketFSMount):
    """bucketfs as a user runs it: the read cache on, at its default size, in a cache
    directory of its own that starts empty (a first read is cold)."""

    kind = "bucketfs-defaults"

    def open(self) -> None:
        cache = tempfile.mkdtemp(prefix="cache-", dir=self.root)
        args = [self.binary, "mount", f"gs://{self.bucket}", self.path, "--endpoint", self.endpoint,
                "--anonymous", "--log-level", "warning", "--log-file", self.log_path,
                "--cache-dir", cache, *self.extra]
        r = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        if r.returncode != 0 or not self.mounted:
            raise RuntimeError(f"bucketfs mount failed ({r.returncode}): {r.stderr.strip()}")


class RcloneMount(Mount):
    kind = "rclone"

    def open(self) -> None:
        env = dict(ENV, RCLONE_CONFIG_BENCHGCS_TYPE="gcs", RCLONE_CONFIG_BENCHGCS_ANONYMOUS="true",
                   RCLONE_CONFIG_BENCHGCS_ENDPOINT=self.endpoint + "/storage/v1/",
                   RCLONE_CONFIG_BENCHGCS_BUCKET_POLICY_ONLY="true", RCLONE_CONFIG="/dev/null")
        args = ["rclone", "mount", f"benchgcs:{self.bucket}", self.path, "--log-file", self.log_path,
                "--log-level", "NOTICE", *self.extra]
        self.proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        if not wait_for(lambda: self.mounted or self.proc.poll() is not None, 30) or not self.mounted:
            raise RuntimeError(f"rclone mount did not come up (rc={self.proc.poll()}); see {self.log_path}")

    def pid(self) -> int:
        return self.proc.pid

    def _unmount(self) -> None:
        subprocess.run(["fusermount3", "-u", self.path], capture_output=True, timeout=30)


TOOLS = {"bucketfs": BucketFSMount, "bucketfs-defaults": BucketFSDefaultsMount, "rclone": RcloneMount}


# ---------------------------------------------------------------------------
# measurements


def sh(cmd, **kw) -> float:
    """Run a command (list, or str through /bin/sh with default SIGPIPE); wall seconds."""
    t0 = time.perf_counter()
    r = subprocess.run(cmd, shell=isinstance(cmd, str), env=ENV, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, restore_signals=True, timeout=kw.get("timeout", 1800))
    dt = time.perf_counter() - t0
    if r.returncode != 0 and not kw.get("ok_fail"):
        raise RuntimeError(f"{cmd!r} failed ({r.returncode}): {r.stderr.decode(errors='replace')[-500:]}")
    return dt


def counted(proxy: F.CountingProxy, fn) -> tuple[float, dict]:
    proxy.settle(0.3, 5)
    proxy.reset()
    dt = fn()
    proxy.settle(0.5, 10)  # requests made in the background after the command returned count too
    return dt, proxy.counts()


def median_run(reps: int, fn) -> tuple[float, dict, list[float]]:
    """fn() -> (seconds, extra); returns the median seconds, the extra of the median run, all times."""
    runs = [fn() for _ in range(reps)]
    runs.sort(key=lambda r: r[0])
    mid = runs[(len(runs) - 1) // 2]
    return mid[0], mid[1], [r[0] for r in runs]


def direct_list(url: str, bucket: str, prefix: str, page: int = 1000, flat: bool = False,
                fields: str | None = None) -> float:
    s = requests.Session()
    t0 = time.perf_counter()
    token, n = None, 0
    while True:
        params = {"prefix": prefix, "maxResults": str(page)}
        if fields:
            params["fields"] = fields
        if not flat:
            params["delimiter"] = "/"
        if token:
            params["pageToken"] = token
        r = s.get(f"{url}/storage/v1/b/{bucket}/o", params=params, timeout=120)
        r.raise_for_status()
        j = r.json()
        n += len(j.get("items", []))
        token = j.get("nextPageToken")
        if not token:
            break
    dt = time.perf_counter() - t0
    s.close()
    return dt


# bucketfs's opendir of a directory takes the page its lookup fetched when it comes within this
# many seconds of that page's answer (docs/SEMANTICS.md#walks-small-trees); a measurement of
# a directory's own listing after an untimed stat of it waits this out, or it would time nothing.
FOLLOW_WINDOW_S = 1.0


def looked_up_a_while_ago(path: str) -> None:
    os.stat(path)
    time.sleep(FOLLOW_WINDOW_S + 0.1)


def timed_and_counted(bench, reps: int, once) -> dict:
    """once(url, proxied) -> seconds (or (seconds, extra)). Wall times come from `reps` runs
    against the emulator itself (the counting proxy is a Python process in the path, with a
    latency of its own, ~0.3 ms a request); requests are counted
    in one more run through the proxy."""
    def norm(v):
        return v if isinstance(v, tuple) else (v, {})
    if bench.a.latency_ms:
        # The latency lives in the proxy: every run goes through it and is counted.
        def through():
            holder = {}
            def run():
                holder["v"] = norm(once(bench.proxy.url, True))
                return holder["v"][0]
            dt, c = counted(bench.proxy, run)
            return dt, {**holder["v"][1], "req": c}
        s, extra, alls = median_run(reps, through)
        return {"s": s, "all": alls, **extra, "proxied_s": s}
    def plain():
        return norm(once(bench.gcs.url, False))
    s, extra, alls = median_run(reps, plain)
    holder = {}
    def prox():
        holder["v"] = norm(once(bench.proxy.url, True))
        return holder["v"][0]
    _, c = counted(bench.proxy, prox)
    return {"s": s, "all": alls, **extra, "req": c, "proxied_s": holder["v"][0]}


class Bench:
    def __init__(self, a, gcs: F.FakeGCS, proxy: F.CountingProxy, root: str, log_dir: str):
        self.a, self.gcs, self.proxy, self.root, self.log_dir = a, gcs, proxy, root, log_dir
        self.res: dict = {}

    def mount(self, tool: str, bucket: str, url: str, extra: tuple = ()) -> Mount:
        return TOOLS[tool](self.root, bucket, url, self.log_dir, extra)

    # 1 -------------------------------------------------------------------
    def t1_ls(self):
        a, out = self.a, {}
        for tool in a.tools:
            def once(url, proxied):
                with self.mount(tool, B_LS, url) as m:
                    looked_up_a_while_ago(m.p(DIR))
                    if proxied:
                        self.proxy.settle(0.3, 5)
                        self.proxy.reset()
                    return sh(["ls", "-l", m.p(DIR)])
            out[tool] = timed_and_counted(self, a.repeat, once)
        out["direct"] = timed_and_counted(self, a.repeat, lambda url, _: direct_list(url, B_LS, DIR + "/"))
        self.res["1"] = out

    # 2 + 3 ---------------------------------------------------------------
    def t2_head_and_rss(self):
        a, out = self.a, {}
        for tool in a.tools:
            def once(url, proxied):
                with self.mount(tool, B_BIG, url) as m:
                    pid = m.pid()
                    os.stat(m.p(DIR))
                    if proxied:
                        self.proxy.settle(0.3, 5)
                        self.proxy.reset()
                    dt = sh(f"ls -f '{m.p(DIR)}' | head -1")
                    if proxied:
                        self.proxy.settle(0.5, 10)
                    return dt, {"hwm_kib": proc_status(pid).get("VmHWM")}

            def full(url, proxied):
                with self.mount(tool, B_BIG, url) as m:
                    pid = m.pid()
                    os.stat(m.p(DIR))
                    if proxied:
                        self.proxy.settle(0.3, 5)
                        self.proxy.reset()
                    dt = sh(["ls", "-l", m.p(DIR)])
                    st = proc_status(pid)
                    return dt, {"full_hwm_kib": st.get("VmHWM"), "full_rss_kib": st.get("VmRSS")}
            r = timed_and_counted(self, a.repeat, once)
            f = timed_and_counted(self, 1, full)
            r.update({"full_s": f["s"], "full_req": f["req"], "full_hwm_kib": f["full_hwm_kib"],
                      "full_rss_kib": f["full_rss_kib"]})
            out[tool] = r

        def first_page(url, _):
            s = requests.Session()
            t0 = time.perf_counter()
            s.get(f"{url}/storage/v1/b/{B_BIG}/o",
                  params={"prefix": DIR + "/", "delimiter": "/", "maxResults": "1000"}, timeout=60).raise_for_status()
            dt = time.perf_counter() - t0
            s.close()
            return dt
        out["direct"] = timed_and_counted(self, a.repeat, first_page)
        self.res["2"] = out

    # 4 -------------------------------------------------------------------
    def t4_read(self):
        a, out = self.a, {}
        size = a.size_mib << 20
        for tool in a.tools:
            def once():
                with self.mount(tool, B_READ, self.gcs.url) as m:
                    os.stat(m.p(DIR, "blob"))
                    return sh(["dd", f"if={m.p(DIR, 'blob')}", "of=/dev/null", "bs=1M"]), {}
            s, _, alls = median_run(a.repeat, once)
            out[tool] = {"s": s, "mbs": size / s / 1e6, "all": alls}
        url = f"{self.gcs.url}/storage/v1/b/{B_READ}/o/{F.q(DIR + '/blob')}?alt=media"
        s, _, alls = median_run(a.repeat, lambda: (sh(["curl", "-sf", "-o", "/dev/null", url]), {}))
        out["curl"] = {"s": s, "mbs": size / s / 1e6, "all": alls}

        # curl into a file in /dev/shm: the same download plus filling page-cache pages, which
        # every read through a mount's page cache pays and curl to /dev/null does not
        def to_tmpfs():
            fd, path = tempfile.mkstemp(prefix="bench-curl-", dir="/dev/shm")
            os.close(fd)
            try:
                return sh(["curl", "-sf", "-o", path, url]), {}
            finally:
                os.unlink(path)
        s, _, alls = median_run(a.repeat, to_tmpfs)
        out["curl tmpfs"] = {"s": s, "mbs": size / s / 1e6, "all": alls}
        self.res["4"] = out

    # 7 -------------------------------------------------------------------
    def t7_parallel_rss(self):
        """64 sequential readers at once: read-ahead memory is what grows with them."""
        a, out = self.a, {}
        files = [f"p{i:02d}" for i in range(a.parallel_files)]
        for tool in a.tools:
            with self.mount(tool, B_PAR, self.gcs.url) as m:
                pid = m.pid()
                for f in files:
                    os.stat(m.p(DIR, f))
                before = proc_status(pid).get("VmHWM")
                t0 = time.perf_counter()
                procs = [subprocess.Popen(["dd", f"if={m.p(DIR, f)}", "of=/dev/null", "bs=1M"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for f in files]
                failed = [p.args[1] for p in procs if p.wait(timeout=1800) != 0]
                dt = time.perf_counter() - t0
                if failed:
                    raise RuntimeError(f"{tool}: dd failed for {failed[:3]}")
                st = proc_status(pid)
                out[tool] = {"s": dt, "hwm_kib": st.get("VmHWM"), "hwm_before_kib": before,
                             "mbs": a.parallel_files * (a.parallel_mib << 20) / dt / 1e6}
        self.res["7"] = out

    # 5 -------------------------------------------------------------------
    def t5_getfattr(self):
        a, out = self.a, {}
        files = [os.path.basename(n) for n in names(a.xattr_files)]
        if "bucketfs" in a.tools:
            def once(url, proxied):
                with self.mount("bucketfs", B_XATTR, url) as m:
                    sh(["ls", "-l", m.p(DIR)])
                    paths = [m.p(DIR, f) for f in files]
                    if proxied:
                        self.proxy.settle(0.3, 5)
                        self.proxy.reset()
                    return sh(["getfattr", "-d", "--absolute-names", "--", *paths])
            out["bucketfs"] = timed_and_counted(self, a.repeat, once)

        # direct: what a client without a listing cache pays: one metadata GET per object
        def direct(url, _):
            s = requests.Session()
            t0 = time.perf_counter()
            for n in names(a.xattr_files):
                s.get(f"{url}/storage/v1/b/{B_XATTR}/o/{F.q(n)}", timeout=30).raise_for_status()
            dt = time.perf_counter() - t0
            s.close()
            return dt
        out["direct"] = timed_and_counted(self, 1, direct)
        self.res["5"] = out

    # 10 ------------------------------------------------------------------
    def t10_write(self):
        a, out = self.a, {}
        size = a.size_mib << 20
        src = os.path.join(self.root, "write-src.bin")
        with open(src, "wb") as f:
            for _ in range(a.size_mib):
                f.write(os.urandom(1 << 20))
        small = os.path.join(self.root, "write-small")
        os.makedirs(small, exist_ok=True)
        for i in range(a.write_files):
            with open(os.path.join(small, f"f{i:04d}.txt"), "w") as f:
                f.write(f"small file {i}\n" * 8)
        client = self.gcs.client()
        client.create_bucket(B_WRITE)
        serial = iter(range(1_000_000))
        extra = {"rclone": ("--vfs-cache-mode", "writes")}
        for tool in a.tools:
            def big(url, proxied):
                with self.mount(tool, B_WRITE, url, extra.get(tool, ())) as m:
                    pid = m.pid()
                    name = f"big-{next(serial)}.bin"
                    t0 = time.perf_counter()
                    subprocess.run(["cp", src, m.p(name)], check=True, env=ENV)
                    if tool == "rclone":  # it uploads after close: time until the object exists
                        wait_for(lambda: client.exists(B_WRITE, name), 300, 0.1)
                    dt = time.perf_counter() - t0
                    return dt, {"mbs": size / dt / 1e6, "hwm_kib": proc_status(pid).get("VmHWM")}
            s, extra_big, alls = median_run(a.repeat, lambda: big(self.gcs.url, False))
            out[tool + " cp"] = {"s": s, "all": alls, **extra_big}

            def many(url, proxied):
                dest = f"w{next(serial)}"
                client.upload(B_WRITE, dest + "/", b"")
                with self.mount(tool, B_WRITE, url, extra.get(tool, ())) as m:
                    os.listdir(m.p(dest))  # listed fresh and complete: the names are known absent
                    if proxied:
                        self.proxy.settle(0.3, 5)
                        self.proxy.reset()
                    t0 = time.perf_counter()
                    subprocess.run(["cp", "-r", small + "/.", m.p(dest) + "/"], check=True, env=ENV)
                    if tool == "rclone":  # it uploads after close: time until the objects exist
                        wait_for(lambda: len(client.list(B_WRITE, dest + "/")[0]) > a.write_files, 300, 0.2)
                    dt = time.perf_counter() - t0
                    if proxied:
                        self.proxy.settle(0.5, 30)
                    return dt
            out[tool + " cp -r"] = timed_and_counted(self, a.repeat, many)

        url = f"{self.gcs.url}/upload/storage/v1/b/{B_WRITE}/o?uploadType=media&name=curl-"
        def curl():
            return sh(["curl", "-sf", "-o", "/dev/null", "-X", "POST", "--data-binary", "@" + src,
                       "-H", "Content-Type: application/octet-stream", url + str(next(serial))]), {}
        s, _, alls = median_run(a.repeat, curl)
        out["curl"] = {"s": s, "mbs": size / s / 1e6, "all": alls}
        self.res["10"] = out

    # 6 -------------------------------------------------------------------
    def t6_stat(self):
        a, out = self.a, {}
        files = [os.path.basename(n) for n in names(a.stat_files)]

        def parallel(fn, items) -> float:
            barrier = threading.Barrier(len(items) + 1)
            errs = []

            def work(x):
                barrier.wait()
                try:
                    fn(x)
                except Exception as e:  # noqa: BLE001
                    errs.append(e)
            ts = [threading.Thread(target=work, args=(x,)) for x in items]
            for t in ts:
                t.start()
            barrier.wait()
            t0 = time.perf_counter()
            for t in ts:
                t.join()
            dt = time.perf_counter() - t0
            if errs:
                raise errs[0]
            return dt

        for tool in a.tools:
            def once(url, proxied):
                with self.mount(tool, B_STAT, url) as m:
                    os.stat(m.p(DIR))
                    if proxied:
                        self.proxy.settle(0.3, 5)
                        self.proxy.reset()
                    return parallel(os.stat, [m.p(DIR, f) for f in files])
            out[tool] = timed_and_counted(self, a.repeat, once)

        # the harness's own floor: the same 50 threads stat 50 files of a local tmpfs directory
        def local():
            d = tempfile.mkdtemp(prefix="bench-stat-", dir="/dev/shm")
            try:
                for f in files:
                    open(os.path.join(d, f), "wb").close()
                return parallel(os.stat, [os.path.join(d, f) for f in files])
            finally:
                shutil.rmtree(d, ignore_errors=True)
        out["local"] = {"s": median_run(a.repeat, lambda: (local(), {}))[0]}

        # references: one metadata GET and one list call of that directory, each the median of
        # 5 on a keep-alive session warmed first (the service's own latency); a mount that lists
        # the directory once for a burst of lookups (bucketfs, rclone) cannot beat the list
        def warm_latency(u: str, params: dict | None = None) -> float:
            s = requests.Session()
            s.get(u, params=params, timeout=30)
            lat = []
            for _ in range(5):
                t0 = time.perf_counter()
                s.get(u, params=params, timeout=30).raise_for_status()
                lat.append(time.perf_counter() - t0)
            s.close()
            return statistics.median(lat)
        objects = f"{self.gcs.url}/storage/v1/b/{B_STAT}/o"
        out["one request"] = {"s": median_run(a.repeat, lambda: (
            warm_latency(f"{objects}/{F.q(names(1)[0])}"), {}))[0]}
        out["one list"] = {"s": median_run(a.repeat, lambda: (
            warm_latency(objects, {"prefix": DIR + "/", "delimiter": "/", "maxResults": "1000"}), {}))[0]}

        def par(url, _):
            local = threading.local()

            def get(n):
                ss = getattr(local, "s", None)
                if ss is None:
                    ss = local.s = requests.Session()
                ss.get(f"{url}/storage/v1/b/{B_STAT}/o/{F.q(n)}", timeout=30).raise_for_status()
            return parallel(get, names(a.stat_files))
        out["direct x50 parallel"] = timed_and_counted(self, a.repeat, par)
        self.res["6"] = out

    # 8 -------------------------------------------------------------------
    WALKS = {"find": "find '{p}' > /dev/null", "du": "du -sb '{p}' > /dev/null",
             "getfattr": "getfattr -R -d --absolute-names '{p}' > /dev/null 2>&1"}

    def t8_tree(self):
        a, out = self.a, {}
        for tool in a.tools:
            for key, cmd in self.WALKS.items():
                if tool == "bucketfs-defaults":
                    break  # the walks read no file: the read cache has no part in them
                def once(url, proxied, cmd=cmd):
                    with self.mount(tool, B_TREE, url) as m:
                        # --walk-from-lookup: the walk's own lookup of DIR is part of it
                        if a.walk_from_lookup:
                            os.stat(m.path)
                        else:
                            looked_up_a_while_ago(m.p(DIR))
                        if proxied:
                            self.proxy.settle(0.3, 5)
                            self.proxy.reset()
                        # getfattr exits 1 on a mount without xattrs (rclone) after walking it all
                        dt = sh(cmd.format(p=m.p(DIR)), ok_fail=key == "getfattr")
                        if key != "getfattr":
                            return dt
                        extra = {}
                        if proxied:
                            self.proxy.settle(0.5, 10)
                            extra["cold_req"] = self.proxy.counts()
                        # the same command again on the same mount: its FUSE floor, to take the
                        # network part of the cold run (cold − warm)
                        extra["warm_s"] = sh(cmd.format(p=m.p(DIR)), ok_fail=True)
                        # the xattrs one file shows (cached: no request), for the local floor below
                        return dt, {**extra, "xattrs": xattrs_of(m.p(tree_names(a.tree)[0]))}
                out[f"{tool} {key}"] = timed_and_counted(self, a.repeat, once)

            if tool == "bucketfs" and a.list_cache_ttl:
                def warm_find(url, proxied):
                    # --list-cache-ttl: a second find on the same mount, within the TTL (timed and counted)
                    with self.mount(tool, B_TREE, url, ("--list-cache-ttl", f"{a.list_cache_ttl:g}")) as m:
                        sh(self.WALKS["find"].format(p=m.p(DIR)))
                        if proxied:
                            self.proxy.settle(0.3, 5)
                            self.proxy.reset()
                        return sh(self.WALKS["find"].format(p=m.p(DIR)))
                out["bucketfs find, list cache warm"] = timed_and_counted(self, a.repeat, warm_find)

            def copy(url, proxied):
                dest = tempfile.mkdtemp(prefix="bench-cp-", dir=self.root)
                try:
                    with self.mount(tool, B_CP, url) as m:
                        looked_up_a_while_ago(m.p(DIR))
                        if proxied:
                            self.proxy.settle(0.3, 5)
                            self.proxy.reset()
                        return sh(["cp", "-r", m.p(DIR), dest])
                finally:
                    shutil.rmtree(dest, ignore_errors=True)
            out[f"{tool} cp"] = timed_and_counted(self, a.repeat, copy)
        out["flat list"] = timed_and_counted(
            self, a.repeat, lambda url, _: direct_list(url, B_TREE, DIR + "/", flat=True))
        # the same tree on a local tmpfs with as many xattrs per file as bucketfs shows: what
        # `getfattr -R -d` costs without any network (its xattr calls, not the walk's listings)
        shown = out.get("bucketfs getfattr", {}).get("xattrs") or {}
        if shown:
            local = tempfile.mkdtemp(prefix="bench-xattr-tree-", dir="/dev/shm")
            try:
                for n in tree_names(a.tree):
                    path = os.path.join(local, n)
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    Path(path).write_bytes(n.encode())
                    for k, v in shown.items():
                        os.setxattr(path, k, v)
                s_, _, alls = median_run(a.repeat, lambda: (sh(self.WALKS["getfattr"].format(p=local)), {}))
                out["local getfattr"] = {"s": s_, "all": alls, "xattrs": len(shown)}
            except OSError as e:
                log(f"local xattr floor skipped: {e}")
            finally:
                shutil.rmtree(local, ignore_errors=True)

        def list_and_get(url, _):
            s = requests.Session()
            t0 = time.perf_counter()
            direct_list(url, B_CP, DIR + "/", flat=True)
            for n in tree_names(a.cp_tree):
                s.get(f"{url}/storage/v1/b/{B_CP}/o/{F.q(n)}", params={"alt": "media"}, timeout=30).raise_for_status()
            dt = time.perf_counter() - t0
            s.close()
            return dt
        out["flat list + GETs"] = timed_and_counted(self, a.repeat, list_and_get)
        self.res["8"] = out

    # 9 -------------------------------------------------------------------
    def t9_cat(self):
        a, out = self.a, {}
        for tool in a.tools:
            def once(url, proxied):
                with self.mount(tool, B_STAT, url) as m:
                    sh(["ls", "-l", m.p(DIR)])
                    if proxied:
                        self.proxy.settle(0.3, 5)
                        self.proxy.reset()
                    return sh(f"cat '{m.p(DIR)}'/* > /dev/null")
            out[tool] = timed_and_counted(self, a.repeat, once)

        def gets(url, _):
            s = requests.Session()
            t0 = time.perf_counter()
            for n in names(a.stat_files):
                s.get(f"{url}/storage/v1/b/{B_STAT}/o/{F.q(n)}", params={"alt": "media"}, timeout=30).raise_for_status()
            dt = time.perf_counter() - t0
            s.close()
            return dt
        out["GETs"] = timed_and_counted(self, a.repeat, gets)
        self.res["9"] = out


# ---------------------------------------------------------------------------
# report


def fmt_s(s: float) -> str:
    if s < 0.1:
        return f"{s * 1000:.1f} ms"
    return f"{s * 1000:.0f} ms" if s < 10 else f"{s:.1f} s"


def fmt_req(c: dict | None) -> str:
    if not c:
        return ""
    other = sum(v for k, v in c.items() if k not in ("list", "metadata", "media"))
    return f"list {c.get('list', 0)}, metadata {c.get('metadata', 0)}, media {c.get('media', 0)}, other {other}"


def ratio(x: float | None, y: float | None) -> str:
    return f"{x / y:.2f}×" if x and y else "n/a"


def report(a, r: dict) -> str:
    L = []
    add = L.append
    tools = a.tools
    bf = "bucketfs" in tools and "rclone" in tools
    add(f"| # | measurement | bucketfs | rclone mount | direct / reference | bucketfs ÷ reference | bucketfs ÷ rclone | goal |")
    add("|---|---|---|---|---|---|---|---|")

    def g(k, tool, f="s"):
        return r.get(k, {}).get(tool, {}).get(f)

    def cell(k, tool, f="s"):
        v = g(k, tool, f)
        return fmt_s(v) if v is not None else "not run"
    # 1
    add(f"| 1 | cold `ls -l`, {a.n1:,} objects: wall | {cell('1','bucketfs')} | {cell('1','rclone')} | "
        f"{cell('1','direct')} (paging, maxResults=1000) | {ratio(g('1','bucketfs'), g('1','direct'))} | "
        f"{ratio(g('1','bucketfs'), g('1','rclone'))} | ≤ 1.25× direct, < rclone |")
    add(f"| 1 | … requests | {fmt_req(g('1','bucketfs','req'))} | {fmt_req(g('1','rclone','req'))} | "
        f"{fmt_req(g('1','direct','req'))} | | | list = {math.ceil(a.n1 / 1000)}, nothing else |")
    # 2
    add(f"| 2 | `ls -f \\| head -1`, {a.n2:,} objects: wall | {cell('2','bucketfs')} | {cell('2','rclone')} | "
        f"{cell('2','direct')} (first page) | {ratio(g('2','bucketfs'), g('2','direct'))} | "
        f"{ratio(g('2','bucketfs'), g('2','rclone'))} | |")
    add(f"| 2 | … requests | {fmt_req(g('2','bucketfs','req'))} | {fmt_req(g('2','rclone','req'))} | "
        f"{fmt_req(g('2','direct','req'))} | | | list = 1 |")

    def mib(k):
        return lambda tool: (f"{g('2', tool, k) / 1024:.1f} MiB" if g('2', tool, k) else "not run")
    add(f"| 3 | peak RSS (VmHWM) during (2) | {mib('hwm_kib')('bucketfs')} | {mib('hwm_kib')('rclone')} | | | "
        f"{ratio(g('2','bucketfs','hwm_kib'), g('2','rclone','hwm_kib'))} | < 64 MiB |")
    add(f"| 3 | peak RSS (VmHWM) during full `ls -l` of {a.n2:,} | {mib('full_hwm_kib')('bucketfs')} | "
        f"{mib('full_hwm_kib')('rclone')} | | | {ratio(g('2','bucketfs','full_hwm_kib'), g('2','rclone','full_hwm_kib'))} | < 64 MiB |")
    add(f"| 3 | … that full `ls -l`: wall; requests | {cell('2','bucketfs','full_s')}; {fmt_req(g('2','bucketfs','full_req'))} | "
        f"{cell('2','rclone','full_s')}; {fmt_req(g('2','rclone','full_req'))} | | | "
        f"{ratio(g('2','bucketfs','full_s'), g('2','rclone','full_s'))} | |")
    # 4
    def mbs(tool):
        v = g("4", tool, "mbs")
        return f"{v:.0f} MB/s" if v else "not run"
    add(f"| 4 | sequential read {a.size_mib} MiB, dd bs=1M | {mbs('bucketfs')} | {mbs('rclone')} | "
        f"curl {mbs('curl')}; curl into a tmpfs file {mbs('curl tmpfs')} | "
        f"{ratio(g('4','bucketfs','mbs'), g('4','curl','mbs'))} of curl, "
        f"{ratio(g('4','bucketfs','mbs'), g('4','curl tmpfs','mbs'))} of curl into tmpfs | "
        f"{ratio(g('4','bucketfs','mbs'), g('4','rclone','mbs'))} | ≥ 0.9× curl |")
    # 5
    add(f"| 5 | `getfattr -d` × {a.xattr_files:,} after `ls -l`: wall | {cell('5','bucketfs')} | no xattrs | "
        f"{cell('5','direct')} (one GET per object) | {ratio(g('5','bucketfs'), g('5','direct'))} | n/a | |")
    add(f"| 5 | … requests | {fmt_req(g('5','bucketfs','req'))} | no xattrs | {fmt_req(g('5','direct','req'))} | | | 0 |")
    # 6
    add(f"| 6 | `stat` × {a.stat_files} cold files in parallel: wall | {cell('6','bucketfs')} | {cell('6','rclone')} | "
        f"one GET {cell('6','one request')}; one list of the directory {cell('6','one list')}; "
        f"the same stats on a local tmpfs {cell('6','local')}; "
        f"{a.stat_files} GETs in parallel {cell('6','direct x50 parallel')} | "
        f"{ratio(g('6','bucketfs'), g('6','one request'))} of one GET, {ratio(g('6','bucketfs'), g('6','one list'))} of one list | "
        f"{ratio(g('6','bucketfs'), g('6','rclone'))} | ≈ one request |")
    add(f"| 6 | … requests | {fmt_req(g('6','bucketfs','req'))} | {fmt_req(g('6','rclone','req'))} | "
        f"{fmt_req(g('6','direct x50 parallel','req'))} | | | |")

    # 7
    def par(tool):
        v = g("7", tool, "hwm_kib")
        return f"{v / 1024:.1f} MiB ({g('7', tool, 'mbs'):.0f} MB/s)" if v else "not run"
    add(f"| 7 | peak RSS (VmHWM), {a.parallel_files} files × {a.parallel_mib} MiB read in parallel (dd bs=1M) | "
        f"{par('bucketfs')} | {par('rclone')} | | | {ratio(g('7','bucketfs','hwm_kib'), g('7','rclone','hwm_kib'))} | "
        f"< read-ahead budget (256 MiB) + 64 MiB |")
    # 8
    r8 = r.get("8", {})
    def c8(k, f="s"):
        v = r8.get(k, {}).get(f)
        return v
    def t8(k):
        v = c8(k)
        return fmt_s(v) if v is not None else "not run"
    files, dirs = len(tree_names(a.tree)), tree_dirs(a.tree)
    pages = math.ceil(files / 1000)
    for key, label in (("find", "cold `find`"), ("du", "cold `du -sb`"), ("getfattr", "cold `getfattr -R -d`")):
        if "8" not in r:
            break
        add(f"| 8 | {label}, {files:,} files in {dirs:,} directories: wall | {t8('bucketfs ' + key)} | "
            f"{t8('rclone ' + key)}{' (no xattrs)' if key == 'getfattr' else ''} | {t8('flat list')} (flat listing, {pages} pages) | "
            f"{ratio(c8('bucketfs ' + key), c8('flat list'))} | {ratio(c8('bucketfs ' + key), c8('rclone ' + key))} | ≤ 2× flat listing |")
        if key == "getfattr" and c8("bucketfs getfattr", "warm_s") is not None:
            cold, warm = c8("bucketfs getfattr"), c8("bucketfs getfattr", "warm_s")
            add(f"| 8 | … its network part: cold − a warm rerun on the same mount ({fmt_s(warm)}) | "
                f"{fmt_s(cold - warm)} | | {t8('flat list')} | {ratio(cold - warm, c8('flat list'))} | | ≤ 2× flat listing |")
        if key == "getfattr" and c8("local getfattr"):
            add(f"| 8 | … the same `getfattr -R -d` on a local tmpfs copy of the tree, "
                f"{r8['local getfattr']['xattrs']} xattrs a file (no network) | | | {t8('local getfattr')} | "
                f"{ratio(c8('bucketfs getfattr'), c8('local getfattr'))} | | |")
        asked = c8('bucketfs ' + key, 'cold_req') or c8('bucketfs ' + key, 'req')
        add(f"| 8 | … requests | {fmt_req(asked)} | {fmt_req(c8('rclone ' + key, 'req'))} | "
            f"{fmt_req(c8('flat list', 'req'))} | | | ≈ pages |")
    if c8("bucketfs find, list cache warm") is not None:
        add(f"| 8 | a second `find` within `--list-cache-ttl {a.list_cache_ttl:g}`: wall | "
            f"{t8('bucketfs find, list cache warm')} | | | | | no request |")
        add(f"| 8 | … requests | {fmt_req(c8('bucketfs find, list cache warm', 'req'))} | | | | | 0 |")
    if "8" in r:
        cp_files = len(tree_names(a.cp_tree))
        add(f"| 8 | cold `cp -r` of {cp_files:,} small files: wall | {t8('bucketfs cp')} | {t8('rclone cp')} | "
            f"{t8('flat list + GETs')} (flat listing + one GET per file in sequence) | "
            f"{ratio(c8('bucketfs cp'), c8('flat list + GETs'))} | {ratio(c8('bucketfs cp'), c8('rclone cp'))} | ≤ 0.5× |")
        add(f"| 8 | … requests | {fmt_req(c8('bucketfs cp', 'req'))} | {fmt_req(c8('rclone cp', 'req'))} | "
            f"{fmt_req(c8('flat list + GETs', 'req'))} | | | |")
    if "9" in r:
        add(f"| 9 | `cat` of {a.stat_files} small files after `ls -l`: wall | {cell('9','bucketfs')} | {cell('9','rclone')} | "
            f"{cell('9','GETs')} (one GET per file in sequence) | {ratio(g('9','bucketfs'), g('9','GETs'))} | "
            f"{ratio(g('9','bucketfs'), g('9','rclone'))} | ≤ 0.5× |")
        add(f"| 9 | … requests | {fmt_req(g('9','bucketfs','req'))} | {fmt_req(g('9','rclone','req'))} | "
            f"{fmt_req(g('9','GETs','req'))} | | | |")
    # 10
    def w(key, f="s"):
        return r.get('10', {}).get(key, {}).get(f)
    def wmbs(key):
        v = w(key, "mbs")
        return f"{v:.0f} MB/s ({fmt_s(w(key))})" if v else "not run"
    add(f"| 10 | `cp` of a {a.size_mib} MiB file into the mount (until stored) | {wmbs('bucketfs cp')} | {wmbs('rclone cp')} | "
        f"curl upload {wmbs('curl')} | {ratio(w('bucketfs cp', 'mbs'), w('curl', 'mbs'))} of curl | "
        f"{ratio(w('bucketfs cp', 'mbs'), w('rclone cp', 'mbs'))} | ≥ 0.8× curl |")
    hwm = w("bucketfs cp", "hwm_kib")
    rhwm = w("rclone cp", "hwm_kib")
    add(f"| 10 | … peak RSS (VmHWM) of the mount | {f'{hwm / 1024:.1f} MiB' if hwm else 'not run'} | "
        f"{f'{rhwm / 1024:.1f} MiB' if rhwm else 'not run'} | | | | < 64 MiB |")
    def per_file(key):
        c = w(key, "req")
        return f"{sum(c.values()) / a.write_files:.2f} ({fmt_req(c)})" if c else "not run"
    add(f"| 10 | `cp -r` of {a.write_files:,} small files into an empty, listed directory: wall | "
        f"{cell('10', 'bucketfs cp -r')} | {cell('10', 'rclone cp -r')} (until stored) | | | "
        f"{ratio(w('bucketfs cp -r'), w('rclone cp -r'))} | < rclone |")
    add(f"| 10 | … requests per file | {per_file('bucketfs cp -r')} | {per_file('rclone cp -r')} | | | | 1 upload, nothing else |")
    if "bucketfs-defaults" in tools:
        add("")
        add("bucketfs with the defaults (the read cache on, empty at each mount) against bucketfs with "
            "`--read-cache-size 0` (the table above):")
        add("")
        add("| # | measurement | with the defaults | `--read-cache-size 0` | defaults ÷ cache off | reference | goal |")
        add("|---|---|---|---|---|---|---|")
        if "4" in r:
            add(f"| 4 | sequential read {a.size_mib} MiB, dd bs=1M, cold | {mbs('bucketfs-defaults')} | {mbs('bucketfs')} | "
                f"{ratio(g('4','bucketfs-defaults','mbs'), g('4','bucketfs','mbs'))} throughput | "
                f"{ratio(g('4','bucketfs-defaults','mbs'), g('4','curl tmpfs','mbs'))} of curl into tmpfs "
                f"(cache off: {ratio(g('4','bucketfs','mbs'), g('4','curl tmpfs','mbs'))}) | ≥ 0.95×; both ≥ 0.9× curl into tmpfs |")
        if "8" in r:
            add(f"| 8 | cold `cp -r` of {len(tree_names(a.cp_tree)):,} small files | {t8('bucketfs-defaults cp')} | "
                f"{t8('bucketfs cp')} | {ratio(c8('bucketfs-defaults cp'), c8('bucketfs cp'))} time | | ≤ 1.1× |")
        if "10" in r:
            add(f"| 10 | `cp` of a {a.size_mib} MiB file into the mount (until stored) | {wmbs('bucketfs-defaults cp')} | "
                f"{wmbs('bucketfs cp')} | {ratio(w('bucketfs-defaults cp'), w('bucketfs cp'))} time | "
                f"curl upload {wmbs('curl')} | ≤ 1.05× |")
            add(f"| 10 | `cp -r` of {a.write_files:,} small files into the mount | {cell('10', 'bucketfs-defaults cp -r')} | "
                f"{cell('10', 'bucketfs cp -r')} | {ratio(w('bucketfs-defaults cp -r'), w('bucketfs cp -r'))} time | | |")
    add("")
    if a.latency_ms:
        add(f"Every request waited {a.latency_ms:g} ms in the counting proxy (one round trip); every timing, "
            "references included, went through it and is also the counted run.")
    else:
        add("Wall times: median of the runs against the emulator itself; requests: one more run through "
            "the counting proxy (a Python process with latency of its own, so it is not timed).")
    add("Reads (4) go straight to the emulator, like curl.")
    return "\n".join(L)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes: N1=2000 N2=10000 SIZE=32 MiB, 1 repetition")
    ap.add_argument("--n1", type=int, help="objects in the `ls -l` directory (default 10000)")
    ap.add_argument("--n2", type=int, help="objects in the large directory (default 100000)")
    ap.add_argument("--size-mib", type=int, help="size of the object read sequentially (default 256)")
    ap.add_argument("--xattr-files", type=int, default=1000)
    ap.add_argument("--stat-files", type=int, default=50)
    ap.add_argument("--write-files", type=int, default=1000, help="small files copied in measurement 10")
    ap.add_argument("--repeat", type=int, help="repetitions per timing, the median is reported (default 3; quick 1)")
    ap.add_argument("--tools", default="bucketfs,rclone",
                    help="comma-separated: bucketfs (read cache off), bucketfs-defaults (read cache on, at its "
                    "default size, empty at each mount), rclone")
    ap.add_argument("--parallel-files", type=int, default=64, help="files read at once in (7)")
    ap.add_argument("--parallel-mib", type=int, help="size of each file of (7) (default 16; quick 4)")
    ap.add_argument("--only", default="1,2,4,5,6,7,8,9,10", help="measurements to run (3 comes with 2)")
    ap.add_argument("--tree", default=None, help="shape of the walked tree (8): fan-outs per level, then files "
                    "per leaf directory (default 10x5x10x10: 5,000 files in 560 directories; quick 3x4x5x10)")
    ap.add_argument("--cp-tree", default=None, help="shape of the copied tree (8) (default 5x10x10: 500 files)")
    ap.add_argument("--walk-from-lookup", action="store_true",
                    help="start the walks of (8) without a stat of the tree's directory first, so that its "
                    "lookup is timed and counted with the walk")
    ap.add_argument("--list-cache-ttl", type=float, default=0.0,
                    help="also time a second find of (8) on a mount with this --list-cache-ttl (0: not)")
    ap.add_argument("--latency-ms", type=float, default=0.0,
                    help="hold every request this long in the counting proxy and time through it")
    ap.add_argument("--stream-mbps", type=float, default=0.0,
                    help="cap each request's and each response's body in the proxy at this many MB/s (a WAN stream)")
    ap.add_argument("--wan-mib", type=int, default=128, help="size of the object of the WAN section (--only wan)")
    ap.add_argument("--bucketfs-bin", default=os.environ.get("BUCKETFS_BIN") or BucketFSMount.binary)
    ap.add_argument("--seed-workers", type=int, default=8)
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--markdown", help="also write the table here")
    a = ap.parse_args()
    q = a.quick
    a.n1 = a.n1 or (2000 if q else 10000)
    a.n2 = a.n2 or (10000 if q else 100000)
    a.size_mib = a.size_mib or (32 if q else 256)
    a.parallel_mib = a.parallel_mib or (4 if q else 16)
    a.repeat = a.repeat or (1 if q else 3)
    a.tree = shape(a.tree or ("3x4x5x10" if q else "10x5x10x10"))
    a.cp_tree = shape(a.cp_tree or "5x10x10")
    a.tools = [t for t in a.tools.split(",") if t]
    BucketFSMount.binary = a.bucketfs_bin
    if any(t.startswith("bucketfs") for t in a.tools) and not os.access(a.bucketfs_bin, os.X_OK):
        sys.exit(f"bench: no bucketfs binary at {a.bucketfs_bin} (swift build, or --bucketfs-bin)")
    if "rclone" in a.tools and not shutil.which("rclone"):
        sys.exit("bench: rclone not installed (apt-get install rclone) or use --tools bucketfs")

    root = tempfile.mkdtemp(prefix="bucketfs-bench-")
    log_dir = os.path.join(root, "logs")
    os.makedirs(log_dir)
    data_dir = os.path.join(root, "data")
    t_start = time.monotonic()
    expect = write_preload(data_dir, a)
    gcs = F.FakeGCS(log_path=os.path.join(log_dir, "fake-gcs-server.log"), data_dir=data_dir,
                    start_timeout=60 + 2 * expect)
    proxy = None
    try:
        log(f"emulator preloading N1={a.n1} N2={a.n2} stat={a.stat_files} (expect about {expect / 2.5:.0f} s)")
        t0 = time.monotonic()
        gcs.start()
        seeding = {"preload": time.monotonic() - t0}
        shutil.rmtree(data_dir, ignore_errors=True)
        log(f"emulator {gcs.url}; seeding xattr={a.xattr_files} size={a.size_mib} MiB")
        seeding |= seed(gcs, a)
        log("seeded in " + ", ".join(f"{k} {v:.1f} s" for k, v in seeding.items()))
        proxy = F.CountingProxy(gcs.url, latency=a.latency_ms / 1000, stream_bps=a.stream_mbps * 1e6).start()
        b = Bench(a, gcs, proxy, root, log_dir)
        steps = {"1": b.t1_ls, "2": b.t2_head_and_rss, "4": b.t4_read, "5": b.t5_getfattr, "6": b.t6_stat,
                 "7": b.t7_parallel_rss, "8": b.t8_tree, "9": b.t9_cat, "10": b.t10_write,
                 "wan": lambda: b.res.__setitem__("wan", wan.run(b, sh, median_run, counted, ENV))}
        for k in a.only.split(","):
            t0 = time.monotonic()
            log(f"measurement {k} ...")
            steps[k]()
            log(f"measurement {k} done in {time.monotonic() - t0:.1f} s")
        table = "\n\n".join(
            ([report(a, b.res)] if set(b.res) - {"wan"} else []) + ([wan.report(a, b.res["wan"])] if "wan" in b.res else []))
        binary = os.path.realpath(a.bucketfs_bin)
        head = (f"bucketfs binary: {binary} ({'release' if '/release/' in binary else 'debug' if '/debug/' in binary else '?'}); "
                f"N1={a.n1} N2={a.n2} SIZE={a.size_mib} MiB xattr files={a.xattr_files} stat files={a.stat_files} "
                f"parallel={a.parallel_files}×{a.parallel_mib} MiB; "
                f"tree {'x'.join(map(str, a.tree))}{' (walks from the lookup)' if a.walk_from_lookup else ''} "
                f"cp {'x'.join(map(str, a.cp_tree))}; latency {a.latency_ms:g} ms; "
                f"stream cap {a.stream_mbps:g} MB/s; "
                f"median of {a.repeat}; seeding {sum(seeding.values()):.0f} s; total {time.monotonic() - t_start:.0f} s")
        print(head)
        print()
        print(table)
        if a.markdown:
            Path(a.markdown).write_text(head + "\n\n" + table + "\n")
        if a.json:
            Path(a.json).write_text(json.dumps({"args": vars(a), "seeding_s": seeding, "results": b.res},
                                               indent=1, default=str))
        return 0
    finally:
        for m in [x for x in fuse_mounts() if x.startswith(root + "/")]:
            subprocess.run(["fusermount3", "-u", "-z", m], capture_output=True, timeout=15)
        if proxy is not None:
            proxy.stop()
        gcs.stop()
        for pid in pids_with_arg_prefix(root):  # a mount process left by an interrupted step
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if os.environ.get("BENCH_KEEP") or any(x.startswith(root + "/") for x in fuse_mounts()):
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

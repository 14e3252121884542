"""The WAN model of bench/run.py (`--only wan`): one large object read and
written over a link that adds `--latency-ms` to every request and caps each
request's body at `--stream-mbps` (scripts/fakegcs.py's CountingProxy), by
one stream, by 8 parallel streams, and through each mount, side by side in
one run. Everything, references included, goes through the proxy.

Rows:
  read   curl (one GET); 8 curls with Range, one eighth each, at once;
         `dd bs=1M` of the object on a fresh mount (cold)
  write  curl (one uploadType=media POST); 8 curls uploading one eighth each
         at once, then one compose of the 8 (JSON API) (parts deleted after,
         untimed); `cp` of a local file into a fresh mount, until stored
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import fakegcs as F

B_WAN = "bench-wan"
STREAMS = 8


def seed(bench) -> dict:
    """The object read, uploaded straight to the emulator; the local files written."""
    a, c = bench.a, bench.gcs.client()
    size = a.wan_mib << 20
    c.create_bucket(B_WAN)
    src = os.path.join(bench.root, "wan-src.bin")
    with open(src, "wb") as f:
        for _ in range(a.wan_mib):
            f.write(os.urandom(1 << 20))
    with open(src, "rb") as f:
        data = f.read()
    subprocess.run(["curl", "-sf", "-o", "/dev/null", "-X", "POST", "--data-binary", f"@{src}",
                    "-H", "Content-Type: application/octet-stream",
                    f"{bench.gcs.url}/upload/storage/v1/b/{B_WAN}/o?uploadType=media&name=blob"], check=True)
    part = -(-size // STREAMS)
    parts = []
    for i in range(STREAMS):
        path = os.path.join(bench.root, f"wan-part-{i}.bin")
        with open(path, "wb") as f:
            f.write(data[i * part:(i + 1) * part])
        parts.append(path)
    return {"src": src, "parts": parts, "size": size, "part": part}


def curl(*args: str) -> subprocess.Popen:
    return subprocess.Popen(["curl", "-sf", "-o", "/dev/null", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def wait_all(procs: list[subprocess.Popen]) -> None:
    failed = [p.args for p in procs if p.wait(timeout=1800) != 0]
    if failed:
        raise RuntimeError(f"curl failed: {failed[0]}")


def run(bench, sh, median_run, counted, ENV) -> dict:
    a, proxy, out = bench.a, bench.proxy, {}
    s = seed(bench)
    size, part = s["size"], s["part"]
    media = f"{proxy.url}/storage/v1/b/{B_WAN}/o/blob?alt=media"
    upload = f"{proxy.url}/upload/storage/v1/b/{B_WAN}/o?uploadType=media&name="
    client = bench.gcs.client()
    serial = iter(range(1_000_000))

    def timed(fn):
        """Median of a.repeat runs of fn() -> seconds, each counted at the proxy."""
        def once():
            dt, c = counted(proxy, fn)
            return dt, {"req": c}
        t, extra, alls = median_run(a.repeat, once)
        return {"s": t, "mbs": size / t / 1e6, "all": alls, **extra}

    def one_get():
        t0 = time.perf_counter()
        wait_all([curl(media)])
        return time.perf_counter() - t0
    out["read curl"] = timed(one_get)

    def ranged_gets():
        t0 = time.perf_counter()
        wait_all([curl("-r", f"{i * part}-{min(size, (i + 1) * part) - 1}", media) for i in range(STREAMS)])
        return time.perf_counter() - t0
    out["read 8 streams"] = timed(ranged_gets)

    def one_upload():
        name = f"up-{next(serial)}"
        t0 = time.perf_counter()
        wait_all([curl("-X", "POST", "--data-binary", f"@{s['src']}", "-H",
                       "Content-Type: application/octet-stream", upload + name)])
        dt = time.perf_counter() - t0
        client.delete(B_WAN, name)
        return dt
    out["write curl"] = timed(one_upload)

    def parts_and_compose():
        name = f"composed-{next(serial)}"
        names = [f"{name}.part{i}" for i in range(STREAMS)]
        t0 = time.perf_counter()
        wait_all([curl("-X", "POST", "--data-binary", f"@{p}", "-H", "Content-Type: application/octet-stream",
                       upload + n) for p, n in zip(s["parts"], names)])
        body = json.dumps({"sourceObjects": [{"name": n} for n in names],
                           "destination": {"contentType": "application/octet-stream"}})
        r = subprocess.run(["curl", "-sf", "-o", "/dev/null", "-X", "POST", "-H", "Content-Type: application/json",
                            "--data-binary", body,
                            f"{proxy.url}/storage/v1/b/{B_WAN}/o/{name}/compose"], capture_output=True)
        dt = time.perf_counter() - t0
        if r.returncode != 0:
            raise RuntimeError(f"compose failed ({r.returncode}): {r.stderr[-300:]!r}")
        got = client.get(B_WAN, name)
        if int(got["size"]) != size:
            raise RuntimeError(f"composed {got['size']} bytes, expected {size}")
        for n in [*names, name]:
            client.delete(B_WAN, n)
        return dt
    out["write 8 parts + compose"] = timed(parts_and_compose)

    extra = {"rclone": ("--vfs-cache-mode", "writes")}
    for tool in a.tools:
        def read():
            with bench.mount(tool, B_WAN, proxy.url) as m:
                os.stat(m.p("blob"))
                proxy.settle(0.3, 5)
                return sh(["dd", f"if={m.p('blob')}", "of=/dev/null", "bs=1M"])

        def write():
            with bench.mount(tool, B_WAN, proxy.url, extra.get(tool, ())) as m:
                name = f"cp-{next(serial)}.bin"
                os.listdir(m.path)
                proxy.settle(0.3, 5)
                t0 = time.perf_counter()
                subprocess.run(["cp", s["src"], m.p(name)], check=True, env=ENV)
                if tool == "rclone":  # it uploads after close: time until the object exists
                    bench_wait(lambda: client.exists(B_WAN, name), 600)
                dt = time.perf_counter() - t0
            client.delete(B_WAN, name)
            return dt
        out[f"read {tool}"] = timed(read)
        out[f"write {tool}"] = timed(write)
    return out


def bench_wait(pred, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise RuntimeError("object never appeared")
        time.sleep(0.1)


def report(a, r: dict) -> str:
    def g(k, f="mbs"):
        return r.get(k, {}).get(f)

    def mbs(k):
        v = g(k)
        return f"{v:.1f} MB/s ({g(k, 's'):.2f} s)" if v else "not run"

    def ratio(x, y):
        return f"{x / y:.2f}×" if x and y else "n/a"

    def req(k):
        c = g(k, "req") or {}
        return ", ".join(f"{kind} {n}" for kind, n in c.items() if n) or ""
    L = [f"WAN model: {a.latency_ms:g} ms a request, {a.stream_mbps:g} MB/s a stream, {a.wan_mib} MiB, "
         f"median of {a.repeat}",
         "",
         "| | 1 stream (curl) | 8 parallel streams | bucketfs | bucketfs ÷ 8 streams | rclone mount | goal |",
         "|---|---|---|---|---|---|---|",
         f"| sequential read (`dd bs=1M`, cold) | {mbs('read curl')} | {mbs('read 8 streams')} (8 ranged GETs) | "
         f"{mbs('read bucketfs')} | {ratio(g('read bucketfs'), g('read 8 streams'))} throughput | "
         f"{mbs('read rclone')} | ≥ 0.9× throughput |",
         f"| write (`cp` into the mount, until stored) | {mbs('write curl')} | {mbs('write 8 parts + compose')} "
         f"(8 part uploads, then compose) | {mbs('write bucketfs')} | "
         f"{ratio(g('write bucketfs', 's'), g('write 8 parts + compose', 's'))} time | {mbs('write rclone')} | "
         f"≤ 1.25× time |",
         f"| … requests (bucketfs read; write) | | | {req('read bucketfs')}; {req('write bucketfs')} | | "
         f"{req('read rclone')}; {req('write rclone')} | |"]
    if "read bucketfs-defaults" in r:
        L += [f"| sequential read, bucketfs with the defaults (read cache on, cold) | | | "
              f"{mbs('read bucketfs-defaults')} | {ratio(g('read bucketfs-defaults', 's'), g('read 8 streams', 's'))} "
              f"time | | ≤ 1.0× time |",
              f"| write, bucketfs with the defaults | | | {mbs('write bucketfs-defaults')} | "
              f"{ratio(g('write bucketfs-defaults', 's'), g('write 8 parts + compose', 's'))} time | | |"]
    return "\n".join(L)

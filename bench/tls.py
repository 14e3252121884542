#!/usr/bin/env python3
"""The real wire (issue 41): bucketfs against curl over a TLS front, with
plain HTTP as the second column, in one run.

    bench/run.sh --tls                          # 256 MiB, median of 3 (best shown too)
    bench/run.sh --tls --size-mib 32 --repeat 1 # a quick look
    bench/run.sh --tls --perf DIR               # then reads and cps over TLS under perf record -g

One fake-gcs-server (memory backend) holds a SIZE object and 500 small files
(walk/d0..d9/f000..f499). Before it stands one nginx (scripts/tlsfront.py:
a private CA made with openssl, TLS 1.2 and 1.3, ALPN h2 and http/1.1) with
a plain-HTTP listener beside the TLS one and one access log for both.
"TLS" is https://localhost:PORT through nginx with `--ca-file`/`--cacert`;
"plain" is the emulator itself (no nginx), as every other figure of
bench/run.py, except for the walks, which go through nginx's plain listener
so that their connections are counted the same way.

Each repetition runs every case of both wires in turn (the wires' order
alternates between repetitions), each bucketfs case on a fresh mount with a
cache directory of its own (removed after it):
  reads   curl into a file on tmpfs (ALPN's choice, h2 over TLS; and
          --http1.1, bucketfs's protocol); `dd bs=1M` to /dev/null out of a
          mount with the defaults and with --read-cache-size 0, cold;
  writes  curl's one-request upload (uploadType=media, `-T` from tmpfs);
          `cp` of the same tmpfs file into a mount, defaults and cache off;
          after each cp, one compose of the written object alone into a new
          one, timed with curl over the same wire (the emulator copies
          every byte of a compose; the service does not); over TLS the cp's
          own requests are read from nginx's log ($request_time, $msec):
          its parts and its compose, when each ran and took;
  walks   `find walk -type f -print0 | xargs -0 cat` (and `xargs -P 8 -n 10 cat`)
          on a fresh mount, default --max-connections (64) and 4: the
          connections that carried the mount's requests, from mount to
          unmount, by nginx's $connection; TLS sessions resumed; and every
          connection nginx accepted meanwhile (stub_status), used or not.
CPU: the daemon's from its threads' schedstat (as bench/readcpu.py), while
the command runs and until the daemon is quiet after it (the read cache's
fill waits for a pause; an upload's entry is checked after close), the
client's (curl, dd, cp) from the children's rusage, nginx's and the
emulator's from theirs. The client, daemon, nginx and emulator share the
machine's cores: on a busy machine every figure is noisy; say so.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "bench"))
import fakegcs as F  # noqa: E402
import tlsfront as T  # noqa: E402
import run as R  # noqa: E402  (bench/run.py: its mounts)
import tlsperf  # noqa: E402
from procstat import measured, process_tree  # noqa: E402
import tlsreport  # noqa: E402

BUCKET = "bench-tls"
BIG = "dir/blob"
WALK, WALK_FILES = "walk", 500
READS = ("curl read", "curl read h1", "dd defaults", "dd cache off")
WRITES = ("curl upload", "curl upload h1", "cp defaults", "cp cache off")
WALKS = {"walk": (None, 1), "walk -c4": (4, 1), "walk ×8": (None, 8), "walk ×8 -c4": (4, 8)}


def log(*a) -> None:
    print("[bench tls]", *a, file=sys.stderr, flush=True)


class Wire:
    """One way to the emulator: `endpoint` for reads and writes, `walk_endpoint` for
    the walks (always through nginx, to count connections), the curl and mount flags."""

    def __init__(self, name: str, endpoint: str, walk_endpoint: str, curl: list[str], mount: list[str]):
        self.name, self.endpoint, self.walk_endpoint = name, endpoint, walk_endpoint
        self.curl, self.mount = curl, mount
        self.tls = bool(curl)


class Bench:
    def __init__(self, a, gcs: F.FakeGCS, front: T.TLSFront, ca: str, root: str):
        self.a, self.gcs, self.front, self.root = a, gcs, front, root
        self.size = a.size_mib << 20
        self.client = gcs.client()
        self.logs = os.path.join(root, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.wires = [w for w in (Wire("TLS", front.url, front.url, ["--cacert", ca], ["--ca-file", ca]),
                                  Wire("plain", gcs.url, front.plain_url, [], [])) if w.name in a.wires]
        self.serial = 0
        fd, self.src = tempfile.mkstemp(prefix="bench-tls-src-", dir="/dev/shm")
        os.close(fd)

    def seed(self) -> None:
        self.client.create_bucket(BUCKET)
        block = os.urandom(1 << 20)
        with open(self.src, "wb") as f:
            for _ in range(self.a.size_mib):
                f.write(block)
        subprocess.run(["curl", "-sf", "-o", "/dev/null", "-X", "POST", "-T", self.src, "-H", "Expect:",
                        "-H", "Content-Type: application/octet-stream",
                        f"{self.gcs.url}/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name={F.q(BIG)}"],
                       check=True)
        self.client.upload_many(BUCKET, (F.Obj(self.walk_name(i), b"small file %d\n" % i)
                                         for i in range(WALK_FILES)))

    @staticmethod
    def walk_name(i: int) -> str:
        return f"{WALK}/d{i % 10}/f{i:03d}"

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.src)

    def fresh(self, what: str) -> str:
        self.serial += 1
        return f"{what}-{self.serial:03d}.bin"

    def servers(self) -> dict[str, list[int]]:
        return {"emulator": [self.gcs.proc.pid], "nginx": process_tree(self.front.proc.pid)}

    @contextlib.contextmanager
    def mounted(self, defaults: bool, endpoint: str, extra: list[str]):
        """A fresh mount in a directory of its own (its cache too), removed afterwards."""
        d = tempfile.mkdtemp(prefix="m-", dir=self.root)
        kind = R.BucketFSDefaultsMount if defaults else R.BucketFSMount
        try:
            with kind(d, BUCKET, endpoint, self.logs, tuple(extra)) as m:
                yield m
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def settled_log(self) -> None:
        """nginx logs a request once it is answered: waits (bounded) until the log stops growing."""
        last, deadline = -1, time.monotonic() + 5
        while time.monotonic() < deadline:
            size = self.front.log_size()
            if size == last:
                return
            last = size
            time.sleep(0.2)

    # reads ---------------------------------------------------------------
    def curl_read(self, wire: Wire, h1: bool) -> dict:
        url = f"{wire.endpoint}/storage/v1/b/{BUCKET}/o/{F.q(BIG)}?alt=media"
        fd, path = tempfile.mkstemp(prefix="bench-tls-curl-", dir="/dev/shm")
        os.close(fd)
        since = self.front.log_size()
        try:
            r = measured(["curl", "-sf", *wire.curl, *(["--http1.1"] if h1 else []), "-o", path, url],
                         self.servers())
            assert os.path.getsize(path) == self.size, "curl read short"
        finally:
            os.unlink(path)
        return self.with_protocol(r, wire, since)

    def with_protocol(self, r: dict, wire: Wire, since: int) -> dict:
        if wire.tls:
            self.settled_log()
            r["protocol"] = sorted({e["protocol"] for e in self.front.entries(since)})
        return r

    def dd_read(self, wire: Wire, defaults: bool, around=None) -> dict:
        with self.mounted(defaults, wire.endpoint, wire.mount) as m:
            os.stat(m.p(BIG))
            pid = m.pid()
            with (around or contextlib.nullcontext)(pid):
                r = measured(["dd", f"if={m.p(BIG)}", "of=/dev/null", "bs=1M"],
                             dict(self.servers(), daemon=[pid]))
        assert re.search(rf"^{self.size} bytes", r["stderr"], re.M), r["stderr"]
        return r

    # writes --------------------------------------------------------------
    def curl_upload(self, wire: Wire, h1: bool) -> dict:
        name = self.fresh("curl")
        url = f"{wire.endpoint}/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name={F.q(name)}"
        since = self.front.log_size()
        r = measured(["curl", "-sf", *wire.curl, *(["--http1.1"] if h1 else []), "-o", "/dev/null",
                      "-X", "POST", "-T", self.src, "-H", "Expect:", "-H", "Content-Type: application/octet-stream",
                      url], self.servers())
        assert int(self.client.get(BUCKET, name)["size"]) == self.size
        self.client.delete(BUCKET, name)
        return self.with_protocol(r, wire, since)

    def cp(self, wire: Wire, defaults: bool, around=None) -> dict:
        name = self.fresh("cp")
        with self.mounted(defaults, wire.endpoint, wire.mount) as m:
            os.listdir(m.path)
            pid = m.pid()
            since = self.front.log_size()
            with (around or contextlib.nullcontext)(pid):
                r = measured(["cp", self.src, m.p(name)], dict(self.servers(), daemon=[pid]))
            # close returns once the object is stored (docs/SEMANTICS.md): it is there now
            r["stored at return"] = self.client.exists(BUCKET, name)
            if wire.tls:
                self.settled_log()
                r["requests"] = tlsreport.upload_timeline(self.front.entries(since), r["began"], r["ended"])
        assert int(self.client.get(BUCKET, name)["size"]) == self.size
        r["compose probe"] = self.compose_probe(wire, name)
        self.client.delete(BUCKET, name)
        return r

    def compose_probe(self, wire: Wire, name: str) -> float:
        """Seconds of one compose of `name` alone into a new object, by curl over `wire`."""
        body = json.dumps({"sourceObjects": [{"name": name}],
                           "destination": {"contentType": "application/octet-stream"}})
        url = f"{wire.endpoint}/storage/v1/b/{BUCKET}/o/{F.q('probe-' + name)}/compose"
        t0 = time.perf_counter()
        subprocess.run(["curl", "-sf", *wire.curl, "-o", "/dev/null", "-X", "POST", "-H",
                        "Content-Type: application/json", "--data-binary", body, url], check=True)
        took = time.perf_counter() - t0
        self.client.delete(BUCKET, "probe-" + name)
        return took

    # walks ---------------------------------------------------------------
    def walk(self, wire: Wire, max_connections: int | None, parallel: int) -> dict:
        extra = [*wire.mount, *(["--max-connections", str(max_connections)] if max_connections else [])]
        expected = sum(len(b"small file %d\n" % i) for i in range(WALK_FILES))
        self.settled_log()
        since, accepted0 = self.front.log_size(), self.front.accepted()
        with self.mounted(True, wire.walk_endpoint, extra) as m:
            walk_since = self.front.log_size()
            cats = (f"xargs -0 -n 10 -P {parallel} cat" if parallel > 1 else "xargs -0 cat")
            r = measured(f"find '{m.p(WALK)}' -type f -print0 | {cats} | wc -c", dict(self.servers(), daemon=[m.pid()]))
            assert int(r["stdout"]) == expected, f"the walk read {r['stdout']} bytes, not {expected}"
            self.settled_log()
            during = self.front.entries(walk_since)
        self.settled_log()
        life = self.front.entries(since)
        r.update({"connections": len({e["connection"] for e in life}),
                  "walk connections": len({e["connection"] for e in during}),
                  "requests": len(life), "walk requests": len(during),
                  "handshakes resumed": len({e["connection"] for e in life if e["resumed"]}),
                  "accepted": self.front.accepted() - accepted0,
                  "limit": max_connections or 64})
        return r

    # one repetition --------------------------------------------------------
    def cases(self, wire: Wire) -> dict:
        out = {"curl read": lambda: self.curl_read(wire, False),
               "curl read h1": lambda: self.curl_read(wire, True),
               "dd defaults": lambda: self.dd_read(wire, True),
               "dd cache off": lambda: self.dd_read(wire, False),
               "curl upload": lambda: self.curl_upload(wire, False),
               "curl upload h1": lambda: self.curl_upload(wire, True),
               "cp defaults": lambda: self.cp(wire, True),
               "cp cache off": lambda: self.cp(wire, False)}
        for label, (limit, parallel) in WALKS.items():
            out[label] = (lambda limit=limit, parallel=parallel: self.walk(wire, limit, parallel))
        if not wire.tls:  # curl speaks HTTP/1.1 to a plain endpoint anyway
            del out["curl read h1"], out["curl upload h1"]
        return {k: v for k, v in out.items() if self.a.only is None or k in self.a.only}

    def run(self) -> dict:
        res: dict = {w.name: {} for w in self.wires}
        for rep in range(self.a.repeat):
            wires = self.wires if rep % 2 == 0 else self.wires[::-1]
            for wire in wires:
                for label, case in self.cases(wire).items():
                    r = case()
                    for k in ("stdout", "stderr"):
                        r.pop(k, None)
                    res[wire.name].setdefault(label, []).append(r)
                    log(f"round {rep + 1} {wire.name:5} {label:15} {r['wall']:7.3f} s"
                        + (f", daemon {r['daemon']:.3f} s" if "daemon" in r else "")
                        + (f", {r['connections']} connections" if "connections" in r else ""))
        return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bucketfs-bin", default=os.environ.get("BUCKETFS_BIN") or R.BucketFSMount.binary)
    ap.add_argument("--size-mib", type=int, default=256, help="the object read and the file written (256)")
    ap.add_argument("--repeat", type=int, default=3, help="repetitions, interleaved; median and best reported (3)")
    ap.add_argument("--wires", default="TLS,plain", help="TLS, plain or both (default)")
    ap.add_argument("--daemon-env", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable for the mounts only (repeatable), e.g. GLIBC_TUNABLES=...")
    ap.add_argument("--only", help="cases to run, comma-separated (default: all): " + ", ".join(
        (*READS, *WRITES, *WALKS)))
    ap.add_argument("--perf", metavar="DIR", help="then profile a cold read and a cp over TLS, each with the "
                    "defaults and with the cache off, with perf record -g into DIR (bench/tlsperf.py)")
    ap.add_argument("--perf-frequency", type=int, default=4999, help="samples a second of CPU time (4999)")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--markdown", help="also write the tables here")
    a = ap.parse_args()
    a.only = set(a.only.split(",")) if a.only else None
    a.wires = a.wires.split(",")
    if a.perf and "TLS" not in a.wires:
        sys.exit("bench: --perf profiles over TLS: --wires must name it")
    R.ENV.update(kv.split("=", 1) for kv in a.daemon_env)  # bucketfs mount's, so its daemon's
    R.BucketFSMount.binary = a.bucketfs_bin
    if not os.access(a.bucketfs_bin, os.X_OK):
        sys.exit(f"bench: no bucketfs binary at {a.bucketfs_bin} (--bucketfs-bin or BUCKETFS_BIN)")

    root = tempfile.mkdtemp(prefix="bucketfs-bench-tls-")
    t_start = time.monotonic()
    load0 = os.getloadavg()
    gcs = F.FakeGCS(log_path=os.path.join(root, "fake-gcs-server.log"))
    front = bench = None
    try:
        gcs.start()
        certs = T.Certificates(os.path.join(root, "tls"))
        front = T.TLSFront(gcs.url, *certs.pair("good"), os.path.join(root, "front"), plain=True).start()
        bench = Bench(a, gcs, front, certs.ca, root)
        log(f"emulator {gcs.url}, TLS front {front.url} (plain {front.plain_url}); seeding {a.size_mib} MiB "
            f"and {WALK_FILES} small files")
        bench.seed()
        res = bench.run()
        profiles = tlsperf.profile(bench, a.perf, a.perf_frequency) if a.perf else None
        binary = os.path.realpath(a.bucketfs_bin)
        head = tlsreport.heading(a, binary, load0, os.getloadavg(), time.monotonic() - t_start)
        text = head + "\n\n" + tlsreport.tables(res, a.size_mib)
        if profiles:
            text += "\n\n" + tlsperf.summary(profiles)
        print(text)
        if a.markdown:
            Path(a.markdown).write_text(text + "\n")
        if a.json:
            Path(a.json).write_text(json.dumps({"args": {k: (sorted(v) if isinstance(v, set) else v)
                                                         for k, v in vars(a).items()},
                                                "results": res, "perf": profiles}, indent=1, default=str))
        return 0
    finally:
        if bench is not None:
            bench.close()
        for m in [x for x in R.fuse_mounts() if x.startswith(root + "/")]:
            subprocess.run(["fusermount3", "-u", "-z", m], capture_output=True, timeout=15)
        if front is not None:
            front.stop()
        gcs.stop()
        for pid in R.pids_with_arg_prefix(root):  # a daemon left by an interrupted case
            with contextlib.suppress(OSError):
                if "bucketfs" in os.path.basename(os.readlink(f"/proc/{pid}/exe")):
                    os.kill(pid, 9)
        if os.environ.get("BENCH_KEEP") or any(x.startswith(root + "/") for x in R.fuse_mounts()):
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

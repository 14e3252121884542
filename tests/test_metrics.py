"""End to end (issue 22): --metrics-addr serves Prometheus text at /metrics
from a real mount, and its storage counts agree with the requests the
counting proxy saw (docs/SEMANTICS.md#metrics).

Every scrape polls with a bound: bucketfs counts a request when it is
answered, which may be a moment after the proxy has recorded it.
"""

from __future__ import annotations

import os
import re
import socket
import urllib.error
import urllib.request

import pytest

import fakegcs as F
from conftest import getfattr_value, is_mounted, pids_with_arg, run, setfattr, wait_for

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:\\.|[^"\\])*)"')
STORAGE_KINDS = ("list", "get", "download", "upload", "patch", "delete", "copy", "compose", "move")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of /metrics: (name, labels, value)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a Prometheus sample: {line!r}"
        samples.append((m.group(1), dict(LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return samples


def total(samples, name: str, **labels: str) -> float:
    return sum(v for n, ls, v in samples if n == name and all(ls.get(k) == x for k, x in labels.items()))


def storage_kind(record: F.Record) -> str:
    """The proxy's view of a request, in bucketfs's kinds."""
    if record.kind in ("list", "patch"):
        return record.kind
    if record.kind == "metadata":
        return "get"
    if record.kind == "media":
        return "download"
    if record.path.startswith("/upload/"):
        return "upload"  # multipart, or a resumable session's start, chunk or status
    if record.method == "DELETE":
        return "delete"
    if "/rewriteTo/" in record.path:
        return "copy"
    if "/moveTo/" in record.path:
        return "move"
    if record.path.endswith("/compose"):
        return "compose"
    return f"unexpected {record.method} {record.path}"


def proxy_counts(m) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in m.proxy.records():
        counts[storage_kind(r)] = counts.get(storage_kind(r), 0) + 1
    return counts


def bucketfs_counts(samples) -> dict[str, int]:
    counts = {k: int(total(samples, "bucketfs_storage_requests_total", kind=k)) for k in STORAGE_KINDS}
    return {k: n for k, n in counts.items() if n}


def rise(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)
            if after.get(k, 0) != before.get(k, 0)}


def listening_ports(pid: int) -> set[int]:
    """TCP ports the process listens on (its sockets in /proc/net/tcp{,6} in state LISTEN)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_storage_counts_agree_with_the_proxy_and_fuse_ops_rise(client, bucket, mount):
    content = b"the quick brown fox\n" * 500
    client.upload(bucket, F.Obj("docs/a.txt", content))
    client.upload(bucket, F.Obj("docs/b.txt", b"b\n"))
    port = free_port()
    m = mount(bucket, "", "--metrics-addr", f"127.0.0.1:{port}")
    # Both count from the mount's start (its first list call included).
    m.proxy.settle()
    assert wait_for(lambda: bucketfs_counts(scrape(port)) == proxy_counts(m), 10), \
        f"bucketfs {bucketfs_counts(scrape(port))} vs proxy {proxy_counts(m)}\n{m.describe()}"
    before = scrape(port)
    before_proxy = proxy_counts(m)

    run(["ls", "-l", m.p("docs")])
    assert open(m.p("docs", "a.txt"), "rb").read() == content
    written = b"hello metrics\n" * 100
    with open(m.p("docs", "new.txt"), "wb") as f:
        f.write(written)
    assert setfattr(m.p("docs", "new.txt"), "user.custom.k", "v").returncode == 0
    assert getfattr_value(m.p("docs", "b.txt"), "user.nothing").returncode != 0  # ENODATA
    assert not os.path.exists(m.p("docs", "missing.txt"))  # a negative entry: a lookup, no error
    run(["mv", m.p("docs", "b.txt"), m.p("docs", "c.txt")])
    run(["rm", m.p("docs", "c.txt")])
    m.proxy.settle()

    def storage_rise() -> tuple[dict[str, int], dict[str, int]]:
        return rise(bucketfs_counts(scrape(port)), bucketfs_counts(before)), rise(proxy_counts(m), before_proxy)

    assert wait_for(lambda: storage_rise()[0] == storage_rise()[1], 10), \
        f"bucketfs rose by {storage_rise()[0]}, the proxy saw {storage_rise()[1]}\n{m.describe()}"
    seen = storage_rise()[1]
    for kind in ("list", "download", "upload", "patch", "delete"):
        assert seen.get(kind, 0) > 0, f"no {kind} request in {seen}: the test does not exercise it"
    assert seen.get("move", 0) + seen.get("copy", 0) > 0, seen

    after = scrape(port)

    def fuse_rise(op: str) -> float:
        return (total(after, "bucketfs_fuse_requests_total", op=op)
                - total(before, "bucketfs_fuse_requests_total", op=op))

    for op in ("lookup", "open", "read", "create", "write", "flush", "release", "setxattr", "getxattr",
               "rename", "unlink"):
        assert fuse_rise(op) > 0, f"bucketfs_fuse_requests_total{{op={op!r}}} did not rise"
    assert fuse_rise("readdirplus") + fuse_rise("readdir") > 0
    assert total(after, "bucketfs_fuse_errors_total", op="getxattr", errno="ENODATA") >= 1
    assert all(re.fullmatch(r"E[A-Z0-9]+", ls["errno"]) for n, ls, _ in after if n == "bucketfs_fuse_errors_total")
    # Each answered request and each storage attempt was timed once.
    for op in ("lookup", "read", "getxattr"):
        assert total(after, "bucketfs_fuse_request_duration_seconds_count", op=op) == \
            total(after, "bucketfs_fuse_requests_total", op=op)
    for kind, n in bucketfs_counts(after).items():
        assert total(after, "bucketfs_storage_request_duration_seconds_count", kind=kind) == n, kind
    assert all(ls.get("status", "").isdigit() for n, ls, _ in after if n == "bucketfs_storage_requests_total")
    assert total(after, "bucketfs_storage_retries_total") == 0
    downloaded = (total(after, "bucketfs_storage_bytes_downloaded_total")
                  - total(before, "bucketfs_storage_bytes_downloaded_total"))
    assert downloaded >= len(content)
    uploaded = (total(after, "bucketfs_storage_bytes_uploaded_total")
                - total(before, "bucketfs_storage_bytes_uploaded_total"))
    assert uploaded >= len(written)


def test_gauges_show_staged_and_read_ahead_bytes(client, bucket, mount):
    client.upload(bucket, F.Obj("big.bin", os.urandom(16 << 20)))
    port = free_port()
    m = mount(bucket, "", "--metrics-addr", f"127.0.0.1:{port}")

    def gauge(name: str) -> float:
        return total(scrape(port), name)

    assert gauge("bucketfs_staged_bytes") == 0
    with open(m.p("staged.bin"), "wb", buffering=0) as f:
        f.write(b"x" * 100_000)
        assert wait_for(lambda: gauge("bucketfs_staged_bytes") == 100_000, 10), gauge("bucketfs_staged_bytes")
    assert wait_for(lambda: gauge("bucketfs_staged_bytes") == 0, 10), "the stage outlived the file's release"

    assert gauge("bucketfs_read_ahead_bytes") == 0
    with open(m.p("big.bin"), "rb", buffering=0) as f:
        for _ in range(8):
            f.read(128 << 10)
        # A sequential reader holds read-ahead beyond what it has read.
        assert wait_for(lambda: gauge("bucketfs_read_ahead_bytes") > 0, 10)
    assert wait_for(lambda: gauge("bucketfs_read_ahead_bytes") == 0, 10), "read-ahead kept after close"


def test_server_lives_with_the_mount_and_only_with_the_option(client, bucket, mount):
    client.upload(bucket, F.Obj("a.txt", b"a"))
    plain = mount(bucket)
    assert [listening_ports(pid) for pid in plain.pids] == [set()], "without the option nothing listens"

    port = free_port()
    m = mount(bucket, "", "--metrics-addr", f"127.0.0.1:{port}")
    pids = m.pids
    assert [listening_ports(pid) for pid in pids] == [{port}]
    assert total(scrape(port), "bucketfs_storage_requests_total", kind="list") >= 1
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
    assert missing.value.code == 404

    run([m.args[0], "unmount", m.path])
    assert wait_for(lambda: not pids_with_arg(os.path.realpath(m.path)), 10), "bucketfs did not exit"
    assert not is_mounted(m.path)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
    with socket.socket() as s:
        # Nothing listens there any more (SO_REUSEADDR, as a restarted bucketfs binds: only
        # connections in TIME_WAIT may remain).
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()


def test_a_taken_port_fails_the_mount_with_one_line(gcs, bucket, mount):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        mp = mount.new_mountpoint()
        p = mount.try_mount(f"gs://{bucket}", mp, "--metrics-addr", f"127.0.0.1:{port}", endpoint=gcs.url)
    assert p.returncode != 0
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert lines == [f"bucketfs: cannot serve metrics at 127.0.0.1:{port}: Address already in use"], p.stderr
    assert not is_mounted(mp)
    assert wait_for(lambda: not pids_with_arg(os.path.realpath(mp)), 10), "bucketfs stayed after failing"


def test_a_malformed_address_is_refused_before_mounting(gcs, bucket, mount):
    mp = mount.new_mountpoint()
    for bad in ("9100", "localhost", "127.0.0.1:0", "127.0.0.1:99999", "::1:9100"):
        p = mount.try_mount(f"gs://{bucket}", mp, "--metrics-addr", bad, endpoint=gcs.url)
        assert p.returncode != 0, bad
        assert "--metrics-addr must be HOST:PORT" in p.stderr, p.stderr
        assert not is_mounted(mp)

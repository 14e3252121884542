"""End to end (issue 42 item 4): `--max-requests-per-second` and
`--max-bytes-per-second` pace every request of a mount before it is sent:
a token bucket holding half a second's worth, so no second carries more
than 1.5 times the rate (the issue allows twice), and nothing fails for it."""

from __future__ import annotations

import os
import time

import fakegcs as F
from conftest import run


def test_requests_per_second_paces_a_cold_walk(client, bucket, mount):
    for i in range(100):
        client.upload(bucket, F.Obj(f"d/f{i:03d}", b"small %d" % i))
    m = mount(bucket, "", "--max-requests-per-second", "20", "--read-cache-size", "0")
    before = len(m.proxy.records())
    t0 = time.monotonic()
    for i in range(100):
        assert open(m.p("d", f"f{i:03d}"), "rb").read() == b"small %d" % i
    elapsed = time.monotonic() - t0
    records = m.proxy.records()
    made = len(records) - before
    assert made >= 100, m.describe()
    # The floor; the bucket starts full with half a second's worth (10).
    assert elapsed >= (made - 20) / 20, (made, elapsed)
    arrivals = sorted(r.arrived for r in records)
    for start in arrivals:
        in_window = sum(1 for t in arrivals if start <= t < start + 1)
        assert in_window <= 40, (in_window, made)


def test_bytes_per_second_paces_a_cold_read(client, bucket, mount):
    data = os.urandom(100 << 20)
    client.upload(bucket, F.Obj("big", data))
    m = mount(bucket, "", "--max-bytes-per-second", "20000000", "--read-cache-size", "0")
    t0 = time.monotonic()
    r = run(["cat", m.p("big")], binary=True, timeout=120)
    elapsed = time.monotonic() - t0
    assert r.stdout == data
    # The bounds. The bucket starts full: half a second's worth goes at
    # once, the rest at the rate ((104857600 - 10000000) / 20000000 = 4.74 s).
    assert 4.5 <= elapsed <= 8, elapsed


def test_limits_out_of_range_fail_the_mount(bucket, mount):
    for args in (["--max-requests-per-second", "0"], ["--max-bytes-per-second", "10"]):
        mp = mount.new_mountpoint()
        r = mount.try_mount(f"gs://{bucket}", mp, *args, endpoint=mount.gcs.url)
        assert r.returncode != 0 and args[0] in r.stderr, r.stderr

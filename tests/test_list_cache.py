"""End to end: the kernel's directory listing cache, `--list-cache-ttl`
(docs/SEMANTICS.md#consistency-list-cache). The kernel keeps what readdir gave
for the TTL (FOPEN_CACHE_DIR, then FOPEN_KEEP_CACHE): a second walk within it
sends nothing; a change through the mount shows at once; another client's
change shows once the TTL has run out."""

from __future__ import annotations

import os
import time

import fakegcs as F
from conftest import run, wait_for

TREE = [f"t/a{i}/b{j}/f{k}" for i in range(3) for j in range(2) for k in range(3)]


def test_a_second_find_within_the_ttl_sends_no_request(client, bucket, mount):
    client.upload_many(bucket, [F.Obj(n, b"x" * 10) for n in TREE])
    m = mount(bucket, "", "--list-cache-ttl", "60")
    first = run(["find", m.p("t")]).stdout
    assert len(first.splitlines()) == 1 + 3 + 6 + len(TREE), first
    m.proxy.settle()
    m.proxy.reset()
    second = run(["find", m.p("t")]).stdout
    du = run(["du", "-sb", m.p("t")]).stdout
    m.proxy.settle(0.5)
    assert m.proxy.count() == 0, m.describe()
    assert sorted(second.splitlines()) == sorted(first.splitlines())
    assert int(du.split()[0]) == 10 * len(TREE), du


def test_without_the_option_a_second_find_lists_again(client, bucket, mount):
    """The default: every opendir that takes no walk's listing lists."""
    client.upload_many(bucket, [F.Obj(n, b"x" * 10) for n in TREE])
    m = mount(bucket)
    run(["find", m.p("t")])
    m.proxy.settle()
    m.proxy.reset()
    run(["find", m.p("t")])
    m.proxy.settle(0.5)
    assert m.proxy.counts()["list"] >= 1, m.describe()


def test_a_change_through_the_mount_shows_at_once(client, bucket, mount):
    client.upload_many(bucket, [F.Obj(n, b"x" * 10) for n in TREE])
    m = mount(bucket, "", "--list-cache-ttl", "60")
    run(["find", m.p("t")])
    with open(m.p("t", "a0", "b1", "new.txt"), "wb") as f:
        f.write(b"new")
    assert "new.txt" in os.listdir(m.p("t", "a0", "b1"))
    os.mkdir(m.p("t", "a2", "made"))
    assert "made" in os.listdir(m.p("t", "a2"))
    os.unlink(m.p("t", "a0", "b0", "f0"))
    assert "f0" not in os.listdir(m.p("t", "a0", "b0"))
    os.rename(m.p("t", "a1", "b0", "f1"), m.p("t", "a1", "b1", "moved"))
    assert "f1" not in os.listdir(m.p("t", "a1", "b0"))
    assert "moved" in os.listdir(m.p("t", "a1", "b1"))
    found = run(["find", m.p("t")]).stdout.splitlines()
    for path in ("a0/b1/new.txt", "a2/made", "a1/b1/moved"):
        assert m.p("t", *path.split("/")) in found, (path, found)
    assert m.p("t", "a0", "b0", "f0") not in found


def test_another_clients_change_shows_once_the_ttl_has_run_out(client, bucket, mount):
    client.upload_many(bucket, [F.Obj(n, b"x" * 10) for n in TREE])
    m = mount(bucket, "", "--list-cache-ttl", "2")
    listed_at = time.monotonic()
    assert "late" not in os.listdir(m.p("t", "a0"))
    client.upload(bucket, F.Obj("t/a0/late", b"x"))
    if time.monotonic() - listed_at < 1.5:
        # Within the TTL the kernel answers from what it kept.
        assert "late" not in os.listdir(m.p("t", "a0")), m.describe()
    assert wait_for(lambda: "late" in os.listdir(m.p("t", "a0")), 10), m.describe()

"""TLS connections of a walk (issue 41): a walk of 500 small files over the
TLS front opens at most as many TLS connections as the mount's connection
limit, counted at nginx from mount to unmount (its $connection of every
request; every mount gets a front of its own). Counts only, no timing."""

from __future__ import annotations

import pytest

import fakegcs as F
from conftest import new_bucket_name, run, unmount_and_wait, wait_for

FILES = 500


def body(i: int) -> bytes:
    return b"small file %d\n" % i


@pytest.fixture(scope="module")
def walk_bucket(client) -> str:
    """500 small files in 10 directories, made once for the module."""
    name = new_bucket_name()
    client.create_bucket(name)
    client.upload_many(name, (F.Obj(f"walk/d{i % 10}/f{i:03d}", body(i)) for i in range(FILES)))
    return name


def walk(mount, bucketfs_bin, bucket: str, parallel: int, cache: str, *extra: str) -> dict:
    """find + cat of every file on a fresh mount over TLS, `parallel` cats at once;
    the TLS connections and requests nginx saw from mount to unmount. `cache` is
    the mount's own (empty) cache directory: the read cache kept in a shared one
    would answer a second walk from disk."""
    m = mount(bucket, "", "--cache-dir", cache, *extra, tls=True)
    cats = f"xargs -0 -n 10 -P {parallel} cat" if parallel > 1 else "xargs -0 cat"
    p = run(f"find '{m.p('walk')}' -type f -print0 | {cats} | wc -c", shell=True)
    assert int(p.stdout) == sum(len(body(i)) for i in range(FILES)), p.stdout
    unmount_and_wait(m, bucketfs_bin)
    # Every request went through the front and then the counting proxy; nginx logs one once
    # it is answered, so its log is complete when it has as many as the proxy saw.
    sent = m.proxy.count()
    assert wait_for(lambda: len(m.front.requests()) >= sent, 5), (len(m.front.requests()), sent)
    requests = m.front.requests()
    assert {protocol for _, _, protocol in requests} <= {"TLSv1.2", "TLSv1.3"}
    return {"requests": len(requests), "connections": len({c for c, _, _ in requests}),
            "resumed": sum(1 for c in {c for c, r, _ in requests if r})}


@pytest.mark.parametrize("parallel", [1, 8], ids=["one cat", "8 cats at once"])
def test_a_walk_opens_at_most_the_connection_limit(mount, bucketfs_bin, walk_bucket, parallel, tmp_path):
    limited = walk(mount, bucketfs_bin, walk_bucket, parallel, str(tmp_path / "limited"), "--max-connections", "4")
    assert limited["requests"] >= FILES, limited
    assert 1 <= limited["connections"] <= 4, limited
    default = walk(mount, bucketfs_bin, walk_bucket, parallel, str(tmp_path / "default"))
    assert default["requests"] >= FILES, default
    assert 1 <= default["connections"] <= 64, default
    if parallel > 1:
        # 8 cats at once keep more than 4 requests in flight: without the limit the
        # mount opens more, so the bound above is the limit's doing, not the walk's shape.
        assert default["connections"] > 4, default

"""End to end (issue 40): the node table is bounded by --max-inodes. A walk
of more names than the limit makes the mount ask the kernel to drop the least
recently used (their forgets come back), a dropped name works again when used
(looked up again: its stat and its bytes), and an open file is never dropped
(docs/SEMANTICS.md#node-table).
"""

from __future__ import annotations

import os

import fakegcs as F
from conftest import run, wait_for
from test_metrics import free_port, scrape, total

LIMIT = 1024
FILES = 1400


def content(index: int) -> bytes:
    return f"file {index}\n".encode()


def test_a_walk_past_the_limit_drops_old_names_which_work_again(client, bucket, mount):
    client.upload_many(bucket, (F.Obj(f"many/f{i:04}", content(i)) for i in range(FILES)))
    port = free_port()
    m = mount(bucket, "", "--max-inodes", str(LIMIT), "--metrics-addr", f"127.0.0.1:{port}")

    def count(op: str) -> float:
        return total(scrape(port), "bucketfs_fuse_requests_total", op=op)

    held = open(m.p("many", "f0000"), "rb")
    try:
        listing = run(["ls", "-l", m.p("many")]).stdout.splitlines()
        assert len(listing) == FILES + 1, listing[:3]  # "total" and one line a file
        # The kernel took the drops of the oldest (at least the names past
        # the limit), and their forgets come back.
        evicted = lambda: total(scrape(port), "bucketfs_inodes_evicted_total")  # noqa: E731
        assert wait_for(lambda: evicted() >= FILES - LIMIT, 10), \
            f"{evicted()} names evicted after a walk of {FILES} with --max-inodes {LIMIT}\n{m.describe()}"
        assert wait_for(lambda: count("forget") + count("forget_multi") > 0, 10), m.describe()

        # The oldest names were dropped: each stat is a lookup again, and right.
        lookups = count("lookup")
        for i in range(1, 11):
            st = os.stat(m.p("many", f"f{i:04}"))
            assert st.st_size == len(content(i))
            with open(m.p("many", f"f{i:04}"), "rb") as f:
                assert f.read() == content(i)
        assert count("lookup") - lookups >= 10, "the first names were not dropped from the kernel"

        # The open file was kept: its name needs no lookup, and it still reads.
        lookups = count("lookup")
        assert os.stat(m.p("many", "f0000")).st_size == len(content(0))
        assert count("lookup") == lookups, "an open file's name was dropped"
        assert held.read() == content(0)
    finally:
        held.close()

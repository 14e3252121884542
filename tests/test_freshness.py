"""End to end (issue 11 item 6): an object replaced through the JSON API is
read anew by the next open, not refused with ESTALE until the metadata TTL
runs out."""

from __future__ import annotations

import fakegcs as F
from conftest import run, wait_for


def test_a_replaced_object_is_read_anew_by_the_second_cat_at_the_latest(client, bucket, mount):
    client.upload(bucket, F.Obj("f", b"old contents\n"))
    m = mount(bucket)  # metadata TTL 60 s: without the fix the old generation is pinned for a minute
    assert run(["stat", "-c", "%s", m.p("f")]).stdout.strip() == "13"

    new = b"new, longer contents\n"
    client.upload(bucket, F.Obj("f", new))
    first = run(["cat", m.p("f")], check=False, binary=True)
    assert first.returncode == 0 and first.stdout == new or b"Stale file handle" in first.stderr, (
        first, m.describe())
    second = run(["cat", m.p("f")], check=False, binary=True)
    assert second.returncode == 0 and second.stdout == new, (second, m.describe())
    assert run(["stat", "-c", "%s", m.p("f")]).stdout.strip() == str(len(new))



def test_a_shrunk_object_shows_its_new_size_after_a_failed_read(client, bucket, mount):
    """The kernel's cached attributes are dropped too: without that, stat
    would show the old, larger size until the attribute timeout."""
    client.upload(bucket, F.Obj("g", b"old contents\n"))
    m = mount(bucket)
    assert run(["stat", "-c", "%s", m.p("g")]).stdout.strip() == "13"
    client.upload(bucket, F.Obj("g", b"tiny\n"))
    run(["cat", m.p("g")], check=False)  # fails: its generation is gone
    # No read in between (a read past the cached size would refresh it anyway);
    # the notification is sent apart from the failed read, so poll for it.
    assert wait_for(lambda: run(["stat", "-c", "%s", m.p("g")]).stdout.strip() == "5", 10), m.describe()
    assert run(["cat", m.p("g")]).stdout == "tiny\n", m.describe()

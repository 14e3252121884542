"""End to end (issue 11 item 1): inode numbers are a hash of the path, the
same in every mount, and plain directory reads show the numbers stat shows."""

from __future__ import annotations

import fakegcs as F
from conftest import is_mounted, run, wait_for

NAMES = ("a/one.txt", "a/two.txt", "b/c/three.txt", "top.txt")


def inodes_by_stat(m) -> dict[str, int]:
    paths = [m.p(*name.split("/")) for name in NAMES] + [m.p("a"), m.p("b", "c")]
    out = run(["stat", "-c", "%i %n", *paths]).stdout.splitlines()
    return {line.split(" ", 1)[1][len(m.path) + 1:]: int(line.split(" ", 1)[0]) for line in out}


def test_inode_numbers_are_stable_across_remounts_and_ls_i_agrees_with_stat(client, bucket, mount,
                                                                             bucketfs_bin):
    for name in NAMES:
        client.upload(bucket, F.Obj(name, name.encode()))
    first = mount(bucket)
    before = inodes_by_stat(first)
    assert len(set(before.values())) == len(before), before
    assert all(1 < ino < 1 << 63 for ino in before.values()), f"hash numbers, not collision ones: {before}"

    # ls -i prints d_ino from the directory read; it must be what stat says.
    listed = {}
    for directory in ("a", "b", "."):
        for line in run(["ls", "-1ia", first.p(directory)]).stdout.splitlines():
            ino, name = line.split(None, 1)
            if name not in (".", ".."):
                listed[f"{directory}/{name}".removeprefix("./")] = int(ino)
    for name, ino in listed.items():
        if name in before:
            assert ino == before[name], f"ls -i {name}: {ino}, stat: {before[name]}"
    found = run(["find", first.path, "-inum", str(before["a/two.txt"])]).stdout.split()
    assert found == [first.p("a", "two.txt")]

    run([bucketfs_bin, "unmount", first.path])
    assert wait_for(lambda: not is_mounted(first.path), 20), first.describe()

    # Another process, names met in another order: the same numbers.
    second = mount(bucket)
    run(["stat", second.p("b", "c", "three.txt"), second.p("a", "two.txt")])
    assert inodes_by_stat(second) == before, second.describe()

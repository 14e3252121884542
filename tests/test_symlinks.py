"""End to end (issue 20, item 3): symbolic links through a real kernel mount
with real tools, checked through the JSON API directly (the emulator, never
the mount). docs/SEMANTICS.md#symlinks.

A link is an object: gcsfuse >= 3.9 stores the target as the body with
custom metadata goog-reserved-file-is-symlink: "true"; earlier versions an
empty object with gcsfuse_symlink_target: TARGET. bucketfs reads both and
writes both at once.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile

import pytest

from conftest import SESSION_TMP, run, wait_for

MARKER = "goog-reserved-file-is-symlink"
TARGET_KEY = "gcsfuse_symlink_target"


def mount_rw(mount, bucket, *extra):
    cache = tempfile.mkdtemp(prefix="cache-", dir=SESSION_TMP)
    return mount(bucket, "", "--cache-dir", cache, *extra)


def names(client, bucket, prefix: str = "") -> list[str]:
    items, _ = client.list(bucket, prefix=prefix, delimiter=None)
    return sorted(i["name"] for i in items)


def assert_stored_link(client, bucket, name: str, target: str):
    """Both forms at once: the body and the marker, and the legacy key."""
    meta = client.get(bucket, name)
    assert meta.get("metadata", {}).get(MARKER) == "true", meta
    assert meta["metadata"].get(TARGET_KEY) == target, meta
    assert client.download(bucket, name) == target.encode()


def seed_links(client, bucket):
    client.upload(bucket, "dir/target.txt", b"hello\n")
    client.upload(bucket, "dir/new", b"target.txt", metadata={MARKER: "true"})
    client.upload(bucket, "dir/old", b"", metadata={TARGET_KEY: "../dir/target.txt"})
    client.upload(bucket, "dir/both", b"/etc/hostname", metadata={MARKER: "true", TARGET_KEY: "/etc/hostname"})


def test_links_in_both_gcsfuse_forms_read_with_readlink_ls_and_stat(mount, bucket, client):
    seed_links(client, bucket)
    client.upload(bucket, "dir/broken", b"", metadata={MARKER: "true"})
    m = mount_rw(mount, bucket)

    assert os.readlink(m.p("dir/new")) == "target.txt"
    assert os.readlink(m.p("dir/old")) == "../dir/target.txt"
    assert os.readlink(m.p("dir/both")) == "/etc/hostname"
    for name, target in (("new", "target.txt"), ("old", "../dir/target.txt")):
        st = os.lstat(m.p("dir", name))
        assert stat.S_ISLNK(st.st_mode), oct(st.st_mode)
        assert st.st_size == len(target), (name, st.st_size)
        # The kernel follows the link to the file.
        with open(m.p("dir", name)) as f:
            assert f.read() == "hello\n"
        assert os.stat(m.p("dir", name)).st_size == 6

    # readdir's d_type (what scandir reports without a stat) and ls -l.
    with os.scandir(m.p("dir")) as entries:
        kinds = {e.name: e.is_symlink() for e in entries}
    assert kinds == {"target.txt": False, "new": True, "old": True, "both": True, "broken": True}
    # ls lists every entry and says which link it cannot read.
    r = run(["ls", "-l", m.p("dir")], check=False)
    assert "cannot read symbolic link" in r.stderr and "broken': Invalid argument" in r.stderr, r.stderr
    listing = r.stdout
    assert any(line.startswith("lrwxrwxrwx") and line.endswith("new -> target.txt") for line in listing.splitlines()), listing
    assert any(line.endswith("old -> ../dir/target.txt") for line in listing.splitlines()), listing
    out = run(["stat", "-c", "%F %s %N", m.p("dir/old")]).stdout.strip()
    assert out == f"symbolic link 17 '{m.p('dir/old')}' -> '../dir/target.txt'", out

    # A link whose target cannot be read: a clear errno (never EIO) and a log line.
    with pytest.raises(OSError) as raised:
        os.readlink(m.p("dir/broken"))
    assert raised.value.errno == errno.EINVAL, raised.value
    assert wait_for(lambda: "readlink dir/broken" in m.log_tail(200), 5), m.log_tail()

    # No xattrs on a link (the kernel allows user.* on files and directories only).
    assert run(["getfattr", "-h", "-d", "--absolute-names", m.p("dir/new")]).stdout.strip() == ""
    r = run(["setfattr", "-h", "-n", "user.custom.k", "-v", "v", m.p("dir/new")], check=False)
    assert r.returncode != 0 and "Operation not permitted" in r.stderr, r.stderr
    # Hard links stay EPERM.
    r = run(["ln", m.p("dir/target.txt"), m.p("dir/hard")], check=False)
    assert r.returncode != 0 and "Operation not permitted" in r.stderr, r.stderr


def test_ln_s_stores_both_forms_with_one_conditional_upload(mount, bucket, client):
    client.upload(bucket, "file.txt", b"data")
    m = mount_rw(mount, bucket)
    m.proxy.reset()
    run(["ln", "-s", "file.txt", m.p("rel")])
    uploads = [r for r in m.proxy.records("other") if r.path.startswith("/upload/")]
    assert len(uploads) == 1 and uploads[0].params.get("ifGenerationMatch") == ["0"], [str(r) for r in uploads]
    assert_stored_link(client, bucket, "rel", "file.txt")
    assert os.readlink(m.p("rel")) == "file.txt"
    with open(m.p("rel"), "rb") as f:
        assert f.read() == b"data"

    run(["ln", "-s", "/nowhere/at/all", m.p("dangling")])
    assert_stored_link(client, bucket, "dangling", "/nowhere/at/all")
    assert os.path.lexists(m.p("dangling")) and not os.path.exists(m.p("dangling"))
    assert stat.S_ISLNK(os.lstat(m.p("dangling")).st_mode)

    r = run(["ln", "-s", "x", m.p("file.txt")], check=False)
    assert r.returncode != 0 and "File exists" in r.stderr, r.stderr
    assert client.download(bucket, "file.txt") == b"data"
    assert names(client, bucket) == ["dangling", "file.txt", "rel"]


def make_tree(root: str) -> None:
    os.makedirs(os.path.join(root, "sub/deep"))
    for rel, data in (("file.txt", b"top\n"), ("sub/data.bin", bytes(range(256)))):
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
    for rel, target in (
        ("rel", "file.txt"),
        ("sub/up", "../file.txt"),
        ("sub/deep/upup", "../../sub/data.bin"),
        ("abs", "/etc/passwd"),
        ("dangling", "no/such/thing"),
        ("dirlink", "sub"),
        ("spaces and ünïcode", "sub/../file.txt"),
    ):
        os.symlink(target, os.path.join(root, rel))


def walk(root: str) -> dict[str, tuple]:
    """Every path under root: ("link", target, whole-second mtime), ("file", bytes) or ("dir",)."""
    found = {}
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(parent, name)
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.readlink(path), int(st.st_mtime))
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir",)
            else:
                with open(path, "rb") as f:
                    found[rel] = ("file", f.read())
    return found


def test_rsync_a_round_trip_keeps_relative_and_absolute_links(mount, bucket, client):
    """A local tree with links in, and back out: every link's target (and
    whole-second mtime, set with lutimes) comes back as it was."""
    src = tempfile.mkdtemp(dir=SESSION_TMP)
    back = tempfile.mkdtemp(dir=SESSION_TMP)
    make_tree(src)
    m = mount_rw(mount, bucket)
    run(["rsync", "-a", src + "/", m.p("backup") + "/"])
    assert_stored_link(client, bucket, "backup/sub/up", "../file.txt")
    assert_stored_link(client, bucket, "backup/abs", "/etc/passwd")
    assert os.readlink(m.p("backup/sub/deep/upup")) == "../../sub/data.bin"

    run(["rsync", "-a", m.p("backup") + "/", back + "/"])
    expected = walk(src)
    assert sum(1 for v in expected.values() if v[0] == "link") == 7
    assert walk(back) == expected
    assert walk(m.p("backup")) == expected
    # cp -a out of the mount copies the links as links too.
    copied = os.path.join(tempfile.mkdtemp(dir=SESSION_TMP), "copy")
    run(["cp", "-a", m.p("backup"), copied])
    assert walk(copied) == expected


def test_unlink_and_mv_of_a_link(mount, bucket, client):
    client.upload(bucket, "t.txt", b"target")
    client.upload(bucket, "old-form", b"", metadata={TARGET_KEY: "t.txt"})
    m = mount_rw(mount, bucket)
    os.makedirs(m.p("d"))
    run(["ln", "-s", "../t.txt", m.p("d/link")])

    run(["mv", m.p("d/link"), m.p("d/moved")])
    assert not client.exists(bucket, "d/link")
    assert_stored_link(client, bucket, "d/moved", "../t.txt")
    assert os.readlink(m.p("d/moved")) == "../t.txt"
    run(["mv", m.p("d/moved"), m.p("top")])  # into another directory: the target is not rewritten
    assert_stored_link(client, bucket, "top", "../t.txt")
    assert os.readlink(m.p("top")) == "../t.txt"

    run(["mv", m.p("old-form"), m.p("d/renamed")])
    meta = client.get(bucket, "d/renamed")
    assert meta["metadata"][TARGET_KEY] == "t.txt", meta
    assert os.readlink(m.p("d/renamed")) == "t.txt"

    run(["rm", m.p("top"), m.p("d/renamed")])
    assert names(client, bucket) == ["d/", "t.txt"]
    assert client.download(bucket, "t.txt") == b"target", "rm of a link leaves its target"
    assert not os.path.lexists(m.p("top"))


def test_mv_of_a_directory_carries_its_links(mount, bucket, client):
    seed_links(client, bucket)
    client.upload(bucket, "dir/sub/deep", b"", metadata={TARGET_KEY: "../target.txt"})
    m = mount_rw(mount, bucket)
    assert os.readlink(m.p("dir/new")) == "target.txt"  # held by the kernel while it moves
    run(["mv", m.p("dir"), m.p("moved")])
    assert names(client, bucket) == ["moved/both", "moved/new", "moved/old", "moved/sub/deep", "moved/target.txt"]
    assert client.get(bucket, "moved/new")["metadata"] == {MARKER: "true"}
    assert client.get(bucket, "moved/old")["metadata"] == {TARGET_KEY: "../dir/target.txt"}
    assert client.download(bucket, "moved/new") == b"target.txt"
    assert os.readlink(m.p("moved/new")) == "target.txt"
    assert os.readlink(m.p("moved/sub/deep")) == "../target.txt"
    with open(m.p("moved/sub/deep")) as f:
        assert f.read() == "hello\n"


def test_a_directory_of_links_over_the_limit_is_copied_by_mv(mount, bucket, client):
    client.upload(bucket, "big/a", b"a")
    client.upload(bucket, "big/l1", b"a", metadata={MARKER: "true"})
    client.upload(bucket, "big/l2", b"", metadata={TARGET_KEY: "l1"})
    m = mount_rw(mount, bucket, "--rename-dir-limit", "2")
    run(["mv", m.p("big"), m.p("copied")])  # EXDEV: mv copies links as links
    assert names(client, bucket) == ["copied/", "copied/a", "copied/l1", "copied/l2"]
    assert_stored_link(client, bucket, "copied/l2", "l1")
    assert os.readlink(m.p("copied/l1")) == "a"

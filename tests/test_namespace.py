"""End to end (issue 13): changing the tree through a real kernel mount with
real tools, checked through the JSON API directly (the emulator, never the
mount).

fake-gcs-server ignores ifGenerationMatch on copy/rewrite and delete, so the
preconditions and 412 races of unlink and rename are pinned in-process
(Tests/BucketFSTests/Namespace*Tests); here the requests' preconditions are
checked as sent, and the outcomes through the JSON API.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import SESSION_TMP, run


def mount_rw(mount, bucket, *extra):
    cache = tempfile.mkdtemp(prefix="cache-", dir=SESSION_TMP)
    return mount(bucket, "", "--cache-dir", cache, *extra)


def names(client, bucket, prefix: str = "") -> list[str]:
    items, _ = client.list(bucket, prefix=prefix, delimiter=None)
    return sorted(i["name"] for i in items)


def writes(m) -> list:
    """Requests that change objects (not lists, GETs or PATCHes)."""
    return [r for r in m.proxy.records("other")]


DOC_METADATA = {"firebaseStorageDownloadTokens": "token-1", "owner": "ann"}


def seed_doc(client, bucket, name="doc.txt"):
    client.upload(bucket, name, b"old line\nsecond line\n", content_type="text/markdown",
                  cache_control="no-cache", content_language="en", metadata=dict(DOC_METADATA))


def assert_doc_kept(client, bucket, name, data: bytes):
    assert client.download(bucket, name) == data
    meta = client.get(bucket, name)
    assert meta["contentType"] == "text/markdown"
    assert meta.get("cacheControl") == "no-cache"
    assert meta.get("contentLanguage") == "en"
    for key, value in DOC_METADATA.items():
        assert meta["metadata"][key] == value, meta.get("metadata")


def test_mkdir_p_rmdir_and_rm_r(mount, bucket, client):
    m = mount_rw(mount, bucket)
    run(["mkdir", "-p", m.p("a/b/c")])
    assert names(client, bucket) == ["a/", "a/b/", "a/b/c/"]
    assert os.path.isdir(m.p("a/b/c"))
    with open(m.p("a/b/c/f.txt"), "w") as f:
        f.write("x")
    # rmdir of a non-empty directory.
    r = run(["rmdir", m.p("a/b")], check=False)
    assert r.returncode != 0 and "not empty" in r.stderr, r.stderr
    assert "a/b/" in names(client, bucket)
    # The delete names the generation the mount saw.
    m.proxy.reset()
    run(["rm", "-r", m.p("a")])
    assert names(client, bucket) == []
    assert os.listdir(m.p("")) == []
    deletes = [r for r in writes(m) if r.method == "DELETE"]
    assert deletes and all("ifGenerationMatch" in r.params for r in deletes), [str(r) for r in deletes]
    # An emptied directory comes back with mkdir.
    run(["mkdir", m.p("a")])
    assert names(client, bucket) == ["a/"]
    r = run(["mkdir", m.p("a")], check=False)
    assert r.returncode != 0 and "exists" in r.stderr


def test_rm_r_of_a_directory_without_placeholder(mount, bucket, client):
    for name in ("tree/one", "tree/sub/two", "tree/sub/three"):
        client.upload(bucket, name, b"x")
    m = mount_rw(mount, bucket)
    run(["rm", "-r", m.p("tree")])
    assert names(client, bucket) == []
    assert os.listdir(m.p("")) == []


def test_mv_of_files_and_a_small_directory(mount, bucket, client):
    client.upload(bucket, "x.txt", b"hello", content_type="text/plain", metadata={"k": "v"})
    for name in ("dir/a", "dir/sub/b"):
        client.upload(bucket, name, name.encode())
    client.upload(bucket, "dir/", b"")
    m = mount_rw(mount, bucket)
    ino = os.stat(m.p("x.txt")).st_ino
    run(["mv", m.p("x.txt"), m.p("y.txt")])
    assert not client.exists(bucket, "x.txt")
    assert client.download(bucket, "y.txt") == b"hello"
    meta = client.get(bucket, "y.txt")
    assert meta["contentType"] == "text/plain" and meta["metadata"] == {"k": "v"}
    assert os.stat(m.p("y.txt")).st_ino == ino
    assert sorted(os.listdir(m.p(""))) == ["dir", "y.txt"]

    run(["mv", m.p("dir"), m.p("moved")])
    assert names(client, bucket) == ["moved/", "moved/a", "moved/sub/b", "y.txt"]
    assert sorted(os.listdir(m.p(""))) == ["moved", "y.txt"]
    assert sorted(os.listdir(m.p("moved"))) == ["a", "sub"]
    with open(m.p("moved/sub/b"), "rb") as f:
        assert f.read() == b"dir/sub/b"

    # mv -n (RENAME_NOREPLACE where coreutils uses it) never replaces.
    client.upload(bucket, "z.txt", b"keep me")
    run(["mv", "-n", m.p("y.txt"), m.p("z.txt")], check=False)
    assert client.download(bucket, "z.txt") == b"keep me"
    assert client.download(bucket, "y.txt") == b"hello"


def test_a_directory_over_the_limit_is_copied_by_mv(mount, bucket, client):
    for i in range(3):
        client.upload(bucket, f"big/{i}", str(i).encode())
    m = mount_rw(mount, bucket, "--rename-dir-limit", "2")
    run(["mv", m.p("big"), m.p("copied")])  # EXDEV: mv makes the directory, copies and deletes
    assert names(client, bucket) == ["copied/", "copied/0", "copied/1", "copied/2"]
    assert client.download(bucket, "copied/2") == b"2"


def test_sed_i_keeps_metadata(mount, bucket, client):
    seed_doc(client, bucket)
    m = mount_rw(mount, bucket)
    run(["sed", "-i", "s/old/new/", m.p("doc.txt")])
    assert_doc_kept(client, bucket, "doc.txt", b"new line\nsecond line\n")
    assert names(client, bucket) == ["doc.txt"]


def test_sed_i_shows_the_new_bytes_mtime_not_the_replaced_one(mount, bucket, client):
    client.upload(bucket, "old.txt", b"old line\n", metadata={"goog-reserved-file-mtime": "1000000000"})
    m = mount_rw(mount, bucket)
    assert int(os.stat(m.p("old.txt")).st_mtime) == 1000000000
    started = time.time() - 5
    run(["sed", "-i", "s/old/new/", m.p("old.txt")])
    assert os.stat(m.p("old.txt")).st_mtime >= started
    stored = client.get(bucket, "old.txt")["metadata"]["goog-reserved-file-mtime"]
    assert int(stored) >= started


@pytest.mark.skipif(shutil.which("vim") is None, reason="vim is not installed")
@pytest.mark.parametrize("setting", ["no", "yes"])
def test_vim_saves_twice_in_a_row(mount, bucket, client, setting):
    """vim refuses to write a file whose mtime changed since it read it: the
    first save's mtime must not move when the file is stored or renamed."""
    client.upload(bucket, "f.txt", b"line1\n")
    m = mount_rw(mount, bucket)
    env = dict(os.environ, HOME=tempfile.mkdtemp(dir=SESSION_TMP))
    for expected in (b"line2\n", b"line3\n"):
        before = expected.replace(b"2", b"1").replace(b"3", b"2").decode().strip()
        subprocess.run(["vim", "-u", "NONE", "-N", "-n", "-es", "-c", f"set backupcopy={setting}",
                        "-c", f"s/{before}/{expected.decode().strip()}/", "-c", "wq", m.p("f.txt")],
                       check=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
        assert client.download(bucket, "f.txt") == expected


def test_a_file_open_for_reading_reads_on_after_mv(mount, bucket, client):
    client.upload(bucket, "r/x", b"0123456789" * 100000)
    m = mount_rw(mount, bucket)
    with open(m.p("r/x"), "rb", buffering=0) as f:
        assert f.read(10) == b"0123456789"
        os.rename(m.p("r/x"), m.p("r/y"))
        f.seek(500000)
        assert f.read(10) == b"0123456789"
    assert names(client, bucket) == ["r/y"]


def test_python_tempfile_and_os_replace_keep_metadata(mount, bucket, client):
    seed_doc(client, bucket)
    m = mount_rw(mount, bucket)
    fd, tmp = tempfile.mkstemp(dir=m.p(""), prefix=".doc.", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(b"saved atomically\n")
    os.replace(tmp, m.p("doc.txt"))
    assert_doc_kept(client, bucket, "doc.txt", b"saved atomically\n")
    assert names(client, bucket) == ["doc.txt"]
    with open(m.p("doc.txt"), "rb") as f:
        assert f.read() == b"saved atomically\n"


@pytest.mark.skipif(shutil.which("vim") is None, reason="vim is not installed")
def test_vim_saves(mount, bucket, client):
    seed_doc(client, bucket, "yes.txt")
    seed_doc(client, bucket, "no.txt")
    m = mount_rw(mount, bucket)
    env = dict(os.environ, HOME=tempfile.mkdtemp(dir=SESSION_TMP))

    def vim(path, setting):
        subprocess.run(["vim", "-Nu", "NONE", "-n", "-es", "-c", f"set backupcopy={setting}",
                        "-c", "%s/old/new/", "-c", "wq", path], check=True, timeout=60, env=env,
                       stdin=subprocess.DEVNULL)

    # backupcopy=yes rewrites the file in place: the write layer carries the metadata.
    vim(m.p("yes.txt"), "yes")
    assert_doc_kept(client, bucket, "yes.txt", b"new line\nsecond line\n")
    # backupcopy=no renames the original away and writes a new file: the bytes
    # are right, the metadata is a new file's (docs/SEMANTICS.md#tree).
    vim(m.p("no.txt"), "no")
    assert client.download(bucket, "no.txt") == b"new line\nsecond line\n"
    assert names(client, bucket) == ["no.txt", "yes.txt"]


@pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed")
def test_rsync_a_into_the_mount(mount, bucket, client):
    src = tempfile.mkdtemp(dir=SESSION_TMP)
    os.makedirs(os.path.join(src, "d/e"))
    for rel, data in (("top.txt", b"top"), ("d/one", b"1"), ("d/e/two", b"22")):
        with open(os.path.join(src, rel), "wb") as f:
            f.write(data)
    m = mount_rw(mount, bucket)
    run(["rsync", "-a", src + "/", m.p("dst") + "/"])
    assert [n for n in names(client, bucket) if not n.endswith("/")] == ["dst/d/e/two", "dst/d/one", "dst/top.txt"]
    assert client.download(bucket, "dst/d/e/two") == b"22"
    # Again, with a change: rsync's temp file is renamed over the old one.
    with open(os.path.join(src, "top.txt"), "wb") as f:
        f.write(b"top, changed")
    run(["rsync", "-a", src + "/", m.p("dst") + "/"])
    assert client.download(bucket, "dst/top.txt") == b"top, changed"


def test_mv_between_nfc_and_nfd_names(mount, bucket, client):
    """Names that differ only in Unicode normalization are two objects
    (docs/SEMANTICS.md#names-unicode): mv between them renames for real."""
    nfc, nfd = "caf\u00e9", "cafe\u0301"
    client.upload(bucket, "p" + nfc, b"a")
    client.upload(bucket, "p" + nfd, b"b")
    client.upload(bucket, "s" + nfc, b"moved")
    m = mount_rw(mount, bucket)
    assert sorted(os.listdir(m.p(""))) == sorted(["p" + nfc, "p" + nfd, "s" + nfc])
    with open(m.p("p" + nfd), "rb") as f:
        assert f.read() == b"b"
    assert not os.path.exists(m.p("s" + nfd)), "no NFD object: the NFC one never answers for it"

    run(["mv", m.p("p" + nfd), m.p("p" + nfc)])
    assert names(client, bucket) == sorted(["p" + nfc, "s" + nfc])
    assert client.download(bucket, "p" + nfc) == b"b"

    run(["mv", m.p("s" + nfc), m.p("s" + nfd)])
    assert names(client, bucket) == sorted(["p" + nfc, "s" + nfd])
    assert client.download(bucket, "s" + nfd) == b"moved"
    assert sorted(os.listdir(m.p(""))) == sorted(["p" + nfc, "s" + nfd])


def test_a_name_that_is_not_utf8_reaches_no_object(mount, bucket, client):
    """Object names are UTF-8: a name that is not is refused, never repaired
    to U+FFFD (which would reach or create the object named that)."""
    client.upload(bucket, "\ufffd", b"replacement")
    m = mount_rw(mount, bucket)
    root = os.fsencode(m.p(""))
    bad = os.path.join(root, b"\xff")
    with pytest.raises(FileNotFoundError):
        os.stat(bad)
    with pytest.raises(OSError) as created:
        os.close(os.open(bad, os.O_WRONLY | os.O_CREAT, 0o644))
    assert created.value.errno == errno.EINVAL
    with pytest.raises(OSError) as made:
        os.mkdir(os.path.join(root, b"\xfe"))
    assert made.value.errno == errno.EINVAL
    with pytest.raises(OSError) as renamed:
        os.rename(os.path.join(root, "\ufffd".encode()), bad)
    assert renamed.value.errno == errno.EINVAL
    with pytest.raises(FileNotFoundError):
        os.unlink(bad)
    assert names(client, bucket) == ["\ufffd"]
    assert client.download(bucket, "\ufffd") == b"replacement"

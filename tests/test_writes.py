"""End to end (issue 12): writing files through a real kernel mount with real
tools, checked through the JSON API directly (the emulator, never the mount).

fake-gcs-server ignores ifGenerationMatch on resumable uploads (files above
the 8 MiB multipart threshold); the precondition tests here use small files,
which go up in one multipart request where the emulator honours it. The
resumable case is pinned in-process (Tests/BucketFSTests/WritePreconditionTests).
"""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
import tempfile

import pytest

import fakegcs as F
from conftest import SESSION_TMP, getfattr_dump, kill_and_unmount, run, wait_for


def mount_rw(mount, bucket, *extra):
    """A mount whose stages live in this session's temp dir; returns (mount, cache dir)."""
    cache = tempfile.mkdtemp(prefix="cache-", dir=SESSION_TMP)
    return mount(bucket, "", "--cache-dir", cache, *extra), cache


def uploads(m) -> list:
    return [r for r in m.proxy.records() if r.path.startswith("/upload/")]


def stage_files(cache: str) -> list[str]:
    found = []
    for root, _, files in os.walk(cache):
        found += [os.path.join(root, f) for f in files if f.startswith("stage-") and not f.endswith(".json")]
    return found


class Canned:
    """An upstream answer the proxy relays instead of forwarding."""

    def __init__(self, status: int):
        self.status = status
        self.reason = "Service Unavailable"
        self.will_close = False
        self._body = b'{"error":{"code":%d,"message":"injected by the test"}}' % status

    def getheader(self, name, default=None):
        return {"content-type": "application/json"}.get(name.lower(), default)

    def getheaders(self):
        return [("Content-Type", "application/json")]

    def read(self, n=-1):
        body, self._body = self._body, b""
        return body


def fail_uploads(proxy, times: int | None, status: int = 503):
    """The next `times` upload requests (every one with None) get `status`."""
    original = proxy._forward
    left = {"n": times}

    def forward(method, path, body, hdrs):
        if path.startswith("/upload/") and (left["n"] is None or left["n"] > 0):
            if left["n"] is not None:
                left["n"] -= 1
            return Canned(status), None
        return original(method, path, body, hdrs)

    proxy._forward = forward


def test_cp_shell_redirects_and_python_writes(mount, bucket, client):
    m, _ = mount_rw(mount, bucket)
    src = os.path.join(SESSION_TMP, "src.txt")
    with open(src, "w") as f:
        f.write("copied\n")
    run(["cp", src, m.p("copy.txt")])
    assert client.download(bucket, "copy.txt") == b"copied\n"
    assert client.get(bucket, "copy.txt")["contentType"] == "text/plain"

    run(["sh", "-c", f"echo one > '{m.p('shell.log')}'"])
    run(["sh", "-c", f"echo two >> '{m.p('shell.log')}'"])
    assert client.download(bucket, "shell.log") == b"one\ntwo\n"
    run(["sh", "-c", f"echo three > '{m.p('shell.log')}'"])
    assert client.download(bucket, "shell.log") == b"three\n"

    with open(m.p("data.json"), "w") as f:
        f.write('{"a": 1}')
        f.flush()
        os.fsync(f.fileno())
        assert client.download(bucket, "data.json") == b'{"a": 1}'
        f.write("\n")
    assert client.download(bucket, "data.json") == b'{"a": 1}\n'
    assert client.get(bucket, "data.json")["contentType"] == "application/json"
    with open(m.p("data.json")) as f:
        assert f.read() == '{"a": 1}\n'
    assert os.stat(m.p("data.json")).st_size == 9


def test_a_temporary_file_unlinked_before_its_first_close_leaves_nothing(mount, bucket, client):
    m, _ = mount_rw(mount, bucket)
    with tempfile.TemporaryFile(dir=m.path) as f:
        f.write(b"scratch")
        f.seek(0)
        assert f.read() == b"scratch"
    assert os.listdir(m.path) == []
    assert client.list(bucket, "")[0] == []


def test_dd_notrunc_truncate_and_touch(mount, bucket, client):
    client.upload(bucket, "blob.bin", b"0123456789", content_type="application/x-demo",
                  metadata={"keep": "me"})
    m, _ = mount_rw(mount, bucket)
    run(["dd", "if=/dev/zero", f"of={m.p('blob.bin')}", "bs=1", "count=2", "seek=3", "conv=notrunc",
         "status=none"])
    assert client.download(bucket, "blob.bin") == b"012\x00\x0056789"
    meta = client.get(bucket, "blob.bin")
    assert meta["contentType"] == "application/x-demo"
    assert meta["metadata"]["keep"] == "me"

    run(["truncate", "-s", "4", m.p("blob.bin")])
    assert client.download(bucket, "blob.bin") == b"012\x00"
    run(["truncate", "-s", "6", m.p("blob.bin")])
    assert client.download(bucket, "blob.bin") == b"012\x00\x00\x00"
    assert os.stat(m.p("blob.bin")).st_size == 6

    run(["touch", "-m", "-d", "2020-01-02 03:04:05 UTC", m.p("blob.bin")])
    assert client.get(bucket, "blob.bin")["metadata"]["goog-reserved-file-mtime"] == "1577934245"
    assert int(os.stat(m.p("blob.bin")).st_mtime) == 1577934245
    # chmod and chown succeed without changing anything
    os.chmod(m.p("blob.bin"), 0o600)
    os.chown(m.p("blob.bin"), os.getuid(), os.getgid())


def test_cp_preserve_xattr_and_rsync_carry_user_names(mount, bucket, client):
    m, _ = mount_rw(mount, bucket)
    src = os.path.join(SESSION_TMP, "tagged.dat")
    with open(src, "wb") as f:
        f.write(b"tagged")
    run(["setfattr", "-n", "user.custom.project", "-v", "apollo", src])
    run(["setfattr", "-n", "user.contentType", "-v", "text/x-apollo", src])
    # A read-only name, as a copy from another bucketfs mount carries: ignored quietly.
    run(["setfattr", "-n", "user.md5Hash", "-v", "bogus", src])
    m.proxy.reset()
    run(["cp", "--preserve=xattr", src, m.p("cp.dat")])
    meta = client.get(bucket, "cp.dat")
    assert meta["metadata"]["project"] == "apollo"
    assert meta["contentType"] == "text/x-apollo"
    assert m.proxy.count("patch") == 0, m.describe()
    assert len(uploads(m)) == 1, m.describe()

    if subprocess.run(["which", "rsync"], capture_output=True).returncode != 0:
        pytest.skip("rsync is not installed")
    # Its default: a temp file, closed, reopened for the xattrs, renamed.
    run(["rsync", "-X", src, m.p("rsync.dat")])
    meta = client.get(bucket, "rsync.dat")
    assert meta["metadata"]["project"] == "apollo"
    assert meta["contentType"] == "text/x-apollo"
    assert client.download(bucket, "rsync.dat") == b"tagged"
    run(["rsync", "-X", "--inplace", src, m.p("inplace.dat")])
    assert client.get(bucket, "inplace.dat")["metadata"]["project"] == "apollo"


def test_a_40_mib_file_by_md5(mount, bucket, client):
    m, _ = mount_rw(mount, bucket)
    src = os.path.join(SESSION_TMP, "big.bin")
    with open(src, "wb") as f:
        f.write(os.urandom(40 << 20))
    run(["cp", src, m.p("big.bin")], timeout=300)
    with open(src, "rb") as f:
        want = hashlib.md5(f.read()).hexdigest()
    assert hashlib.md5(client.download(bucket, "big.bin")).hexdigest() == want
    assert int(client.get(bucket, "big.bin")["size"]) == 40 << 20
    with open(m.p("big.bin"), "rb") as f:
        assert hashlib.md5(f.read()).hexdigest() == want


def test_a_concurrent_upload_between_open_and_close_survives(mount, bucket, client):
    client.upload(bucket, "shared.txt", b"original")
    m, cache = mount_rw(mount, bucket)
    fd = os.open(m.p("shared.txt"), os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, b"mine")
        client.upload(bucket, "shared.txt", b"theirs")
    finally:
        with pytest.raises(OSError) as failure:
            os.close(fd)
    assert failure.value.errno == errno.ESTALE
    assert client.download(bucket, "shared.txt") == b"theirs"
    kept = stage_files(cache)
    assert len(kept) == 1, kept
    with open(kept[0], "rb") as f:
        assert f.read() == b"mine"
    assert kept[0] in m.log_tail(), m.log_tail()


def test_a_transient_503_on_upload_is_retried(mount, bucket, client):
    m, _ = mount_rw(mount, bucket)
    fail_uploads(m.proxy, times=2)
    with open(m.p("flaky.txt"), "w") as f:
        f.write("made it")
    assert client.download(bucket, "flaky.txt") == b"made it"
    assert len(uploads(m)) == 3, m.describe()


def test_a_persistent_503_fails_close_within_the_deadline_and_leaves_no_object(mount, bucket, client):
    m, cache = mount_rw(mount, bucket, "--retry-deadline", "3")
    fail_uploads(m.proxy, times=None)
    fd = os.open(m.p("doomed.txt"), os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"unsaved")
    import time
    started = time.monotonic()
    with pytest.raises(OSError) as failure:
        os.close(fd)
    assert failure.value.errno == errno.EIO
    assert time.monotonic() - started < 20
    assert not client.exists(bucket, "doomed.txt")
    assert len(stage_files(cache)) == 1, "the bytes are kept for the user"


def test_cp_r_of_small_files_costs_one_upload_each(mount, bucket, client):
    client.upload(bucket, "dest/.keep", b"")
    m, _ = mount_rw(mount, bucket)
    src = os.path.join(SESSION_TMP, "tree")
    os.makedirs(src, exist_ok=True)
    for i in range(20):
        with open(os.path.join(src, f"f{i:02d}.txt"), "w") as f:
            f.write(f"file {i}\n")
    os.listdir(m.p("dest"))  # a fresh, complete listing of the destination
    m.proxy.reset()
    run(["sh", "-c", f"cp '{src}'/* '{m.p('dest')}/'"])
    m.proxy.settle(0.2, 3)
    assert len(uploads(m)) == 20, m.describe()
    assert m.proxy.count() == 20, m.describe()
    assert client.download(bucket, "dest/f07.txt") == b"file 7\n"


def test_leftover_stages_are_listed_at_the_next_mount(mount, bucket, client, bucketfs_bin):
    cache = tempfile.mkdtemp(prefix="cache-", dir=SESSION_TMP)
    m = mount(bucket, "", "--cache-dir", cache, foreground=True)
    fd = os.open(m.p("unsaved.txt"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"precious")
    finally:
        kill_and_unmount(m, fd)
    kept = stage_files(cache)
    assert len(kept) == 1, kept
    again = mount(bucket, "", "--cache-dir", cache, mountpoint=m.path)
    assert wait_for(lambda: "unsaved.txt" in again.log_tail(200), 10), again.log_tail()
    assert kept[0] in again.log_tail(200)
    assert not client.exists(bucket, "unsaved.txt"), "never uploaded silently"
    assert stage_files(cache) == kept


def test_o_direct_mmap_shared_and_fallocate(mount, bucket, client):
    import mmap
    m, _ = mount_rw(mount, bucket)
    # O_DIRECT: the kernel sends the writes straight through; they are staged like any other.
    fd = os.open(m.p("direct.bin"), os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
    buf = mmap.mmap(-1, 4096)
    buf.write(b"d" * 4096)
    os.write(fd, buf)
    os.close(fd)
    assert client.download(bucket, "direct.bin") == b"d" * 4096

    # MAP_SHARED writes reach the stage by writeback, which close (flush) waits for.
    # In a child process: a page fault here would hold this process's GIL,
    # and the counting proxy that must answer it runs in this process.
    with open(m.p("mapped.bin"), "wb") as f:
        f.write(b"\0" * 8192)
    run([sys.executable, "-c", (
        "import mmap, sys\n"
        "with open(sys.argv[1], 'r+b') as f:\n"
        "    with mmap.mmap(f.fileno(), 8192, mmap.MAP_SHARED) as mem:\n"
        "        mem[0:5] = b'hello'\n"
        "        mem.flush()\n"), m.p("mapped.bin")])
    assert client.download(bucket, "mapped.bin")[:6] == b"hello\0"

    # fallocate(2) is not offered: EOPNOTSUPP from the kernel. (glibc's
    # posix_fallocate then writes zeros, which works like any write.)
    with open(m.p("alloc.bin"), "wb"):
        pass
    p = run(["fallocate", "-l", "4096", m.p("alloc.bin")], check=False)
    assert p.returncode != 0 and "not supported" in p.stderr, p.stderr
    fd = os.open(m.p("alloc.bin"), os.O_WRONLY)
    try:
        os.posix_fallocate(fd, 0, 4096)
    finally:
        os.close(fd)
    assert client.download(bucket, "alloc.bin") == b"\0" * 4096


def test_cp_p_carries_the_mtime_in_the_upload(mount, bucket, client):
    m, _ = mount_rw(mount, bucket)
    src = os.path.join(SESSION_TMP, "dated.txt")
    with open(src, "w") as f:
        f.write("dated\n")
    os.utime(src, (1_500_000_000, 1_500_000_000))
    m.proxy.reset()
    run(["cp", "-p", src, m.p("dated.txt")])
    meta = client.get(bucket, "dated.txt")
    assert meta["metadata"]["goog-reserved-file-mtime"] == "1500000000"
    assert m.proxy.count("patch") == 0, m.describe()
    assert len(uploads(m)) == 1, m.describe()
    assert int(os.stat(m.p("dated.txt")).st_mtime) == 1_500_000_000

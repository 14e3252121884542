"""End to end (issue 30): a file written in order from its start streams.
Its full parts go up while it is written and leave the stage, so local disk
stays under --stream-disk-limit; close uploads the last part and composes
(docs/SEMANTICS.md#writes-streaming).

Small parts keep most files small: composite above 1 MiB, 1 MiB parts, a
2 MiB bound. The large write runs on a 64 MiB tmpfs with the defaults; it is
BUCKETFS_E2E_STREAM_MIB MiB (256 unless set; the issue's figure is 1024).
Objects are checked through the JSON API (the emulator, never the mount).
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from conftest import SESSION_TMP, deviates, kill_and_unmount, run, wait_for
from parts import close_refused_with_estale, composes, mount_rw, part_uploads, parts_left

SMALL = ("--composite-upload-threshold", "1", "--composite-part-size", "1", "--stream-disk-limit", "2")
STREAM_MIB = int(os.environ.get("BUCKETFS_E2E_STREAM_MIB", "256"))
TMPFS_MIB = 64

# The pattern the large writes use: a random MiB, each copy stamped with its index.
BLOCK = os.urandom(1 << 20)
WRITER = (
    "import sys\n"
    "block = open(sys.argv[1], 'rb').read()\n"
    "out = sys.stdout.buffer\n"
    "for i in range(int(sys.argv[2])):\n"
    "    out.write(i.to_bytes(8, 'little') + block[8:])\n"
)


def pattern(mib: int) -> bytes:
    return b"".join(i.to_bytes(8, "little") + BLOCK[8:] for i in range(mib))


def pattern_md5(mib: int) -> str:
    h = hashlib.md5()
    for i in range(mib):
        h.update(i.to_bytes(8, "little"))
        h.update(BLOCK[8:])
    return base64.b64encode(h.digest()).decode()


def object_md5(client, bucket: str, name: str, size: int) -> str:
    """The object's MD5 as the emulator reports it, else read in ranges."""
    md5 = client.get(bucket, name).get("md5Hash")
    if md5:
        return md5
    h = hashlib.md5()
    for start in range(0, size, 64 << 20):
        h.update(client.download(bucket, name, start, min(start + (64 << 20), size) - 1))
    return base64.b64encode(h.digest()).decode()


@pytest.fixture
def tmpfs():
    """A 64 MiB tmpfs, unmounted whatever happens."""
    path = tempfile.mkdtemp(prefix="tmpfs-", dir=SESSION_TMP)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MIB}m", "tmpfs", path],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield path
    finally:
        for _ in range(50):
            if subprocess.run(["umount", path], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        else:
            subprocess.run(["umount", "-l", path], capture_output=True)


def test_dd_of_a_large_file_with_the_stage_on_a_small_tmpfs(mount, client, bucket, tmpfs):
    m = mount(bucket, "", "--cache-dir", tmpfs)
    block = os.path.join(SESSION_TMP, "block.bin")
    with open(block, "wb") as f:
        f.write(BLOCK)
    peak = [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            st = os.statvfs(tmpfs)
            peak[0] = max(peak[0], (st.f_blocks - st.f_bfree) * st.f_frsize)
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        gen = subprocess.Popen([sys.executable, "-c", WRITER, block, str(STREAM_MIB)], stdout=subprocess.PIPE)
        dd = subprocess.run(["dd", f"of={m.p('big.bin')}", "bs=1M", "iflag=fullblock"], stdin=gen.stdout,
                            capture_output=True, text=True, timeout=600)
        gen.stdout.close()
        gen.wait(30)
    finally:
        stop.set()
        sampler.join(5)
    assert dd.returncode == 0, dd.stderr + m.describe()
    # The documented bound: 128 MiB, at most half the room of --cache-dir (a
    # little more for the sidecar, the read cache's files and tmpfs itself).
    assert peak[0] <= (TMPFS_MIB << 20) // 2 + (1 << 20), f"{peak[0] >> 10} KiB used at the peak"
    meta = client.get(bucket, "big.bin")
    assert int(meta["size"]) == STREAM_MIB << 20
    assert object_md5(client, bucket, "big.bin", STREAM_MIB << 20) == pattern_md5(STREAM_MIB)
    assert wait_for(lambda: parts_left(client, bucket) == [], 30), "every part deleted"
    calls = composes(m)
    assert calls and calls[-1].path.endswith("/big.bin/compose"), m.describe()
    # dd's open may store the empty file first: then its generation is the precondition.
    assert calls[-1].params.get("ifGenerationMatch"), "the compose carries a precondition"


def test_each_fallback_gives_exactly_the_bytes_written(mount, client, bucket):
    m = mount_rw(mount, bucket, *SMALL)
    # pwrite behind the stream
    data = bytearray(pattern(6))
    with open(m.p("behind.bin"), "wb") as f:
        f.write(data)
        os.pwrite(f.fileno(), b"\xab" * 5000, 100_000)
        data[100_000:105_000] = b"\xab" * 5000
        more = os.urandom(2 << 20)
        f.write(more)
        data += more
    assert client.download(bucket, "behind.bin") == bytes(data)
    # ftruncate down, then up
    data = pattern(6)
    with open(m.p("trunc.bin"), "wb") as f:
        f.write(data)
        f.truncate(3_000_001)
        f.truncate(3_500_000)
    assert client.download(bucket, "trunc.bin") == data[:3_000_001] + b"\0" * 499_999
    # read-your-writes of an uploaded part
    data = pattern(6)
    with open(m.p("read.bin"), "w+b") as f:
        f.write(data)
        f.flush()
        assert os.pread(f.fileno(), 65536, 0) == data[:65536]
        f.seek(0, os.SEEK_END)
        f.write(data)
    assert client.download(bucket, "read.bin") == data + data
    # two handles: one appends, the other reads and writes behind
    data = bytearray(pattern(5))
    with open(m.p("two.bin"), "wb") as a:
        a.write(data)
        a.flush()
        with open(m.p("two.bin"), "r+b") as b:
            assert b.read() == bytes(data)
            b.seek(10)
            b.write(b"X")
            data[10:11] = b"X"
        more = os.urandom(1 << 20)
        a.write(more)
        data += more
    assert client.download(bucket, "two.bin") == bytes(data)
    assert wait_for(lambda: parts_left(client, bucket) == [], 10), parts_left(client, bucket)


def test_parts_go_up_before_close(mount, client, bucket):
    m = mount_rw(mount, bucket, *SMALL)
    with open(m.p("early.bin"), "wb") as f:
        f.write(pattern(8))
        f.flush()
        assert len(part_uploads(m)) >= 5, m.describe()
        assert not client.exists(bucket, "early.bin")
    assert client.download(bucket, "early.bin") == pattern(8)
    assert len([r for r in composes(m) if r.path.endswith("/early.bin/compose")]) == 1, m.describe()
    assert wait_for(lambda: parts_left(client, bucket) == [], 10), "parts deleted after the close"


def test_kill_mid_stream_leaves_no_object_and_clean_parts_removes_the_parts(mount, client, bucket, gcs,
                                                                          bucketfs_bin):
    m = mount_rw(mount, bucket, *SMALL, foreground=True)
    fd = os.open(m.p("killed.bin"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, pattern(6))
        assert wait_for(lambda: parts_left(client, bucket) != [], 10), m.describe()
    finally:
        kill_and_unmount(m, fd)
    assert not client.exists(bucket, "killed.bin"), "no object, no partial object"
    assert parts_left(client, bucket) != []
    done = run([bucketfs_bin, "clean-parts", f"gs://{bucket}", "--endpoint", gcs.url, "--anonymous",
                "--older-than", "0"])
    assert "deleted" in done.stdout, done.stdout
    assert parts_left(client, bucket) == []


def test_fsync_makes_what_was_written_the_object_and_survives_kill(mount, client, bucket):
    m = mount_rw(mount, bucket, *SMALL, foreground=True)
    first = pattern(3) + b"tail"
    fd = os.open(m.p("synced.bin"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, first)
        os.fsync(fd)
        assert client.download(bucket, "synced.bin") == first
        os.write(fd, os.urandom(3 << 20))
    finally:
        kill_and_unmount(m, fd)
    assert client.download(bucket, "synced.bin") == first, "what fsync stored stays"


def test_fsync_then_more_writes_compose_onto_the_synced_generation(mount, client, bucket):
    m = mount_rw(mount, bucket, *SMALL)
    first = pattern(3) + b"tail"
    second = os.urandom(3 << 20)
    with open(m.p("grown.bin"), "wb") as f:
        f.write(first)
        f.flush()
        os.fsync(f.fileno())
        synced = client.get(bucket, "grown.bin")
        f.write(second)
    assert client.download(bucket, "grown.bin") == first + second
    assert composes(m)[-1].params.get("ifGenerationMatch") == [synced["generation"]]
    assert wait_for(lambda: parts_left(client, bucket) == [], 10)


@deviates("fake-gcs-server", "compose ignores ifGenerationMatch on the destination")
def test_an_object_that_appeared_meanwhile_gives_estale_and_no_parts(mount, client, bucket):
    m = mount_rw(mount, bucket, *SMALL)
    f = open(m.p("race.bin"), "wb")
    try:
        f.write(pattern(5))
        f.flush()
        assert wait_for(lambda: parts_left(client, bucket) != [], 10), m.describe()
        theirs = client.upload(bucket, "race.bin", b"theirs")
    finally:
        close_refused_with_estale(f)
    assert client.get(bucket, "race.bin")["generation"] == theirs["generation"], "theirs stands"
    assert parts_left(client, bucket) == [], "parts deleted before close returned"

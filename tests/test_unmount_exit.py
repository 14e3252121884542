"""End to end: the daemon exits soon after `bucketfs unmount` (docs/ARCHITECTURE.md, Shutdown).

The daemon holds its cache directory until it exits, so a remount waits on
that exit. Two ways it could linger: a mount namespace made while the mount
was live (unshare -m, a container, a service with PrivateTmp) holds a copy
that keeps the kernel's connection open, and the daemon's own work at
unmount (held fills, read-ahead in flight).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

import fakegcs as F
import pytest
from conftest import SESSION_TMP, _unescape_mount, pids_with_arg, unmount_and_wait, wait_for

MiB = 1 << 20


def holds(pid: int, place: str) -> bool:
    try:
        with open(f"/proc/{pid}/mountinfo") as f:
            return any(_unescape_mount(line.split()[4]) == place for line in f)
    except OSError:
        return False


def test_unmount_ends_the_daemon_while_another_namespace_holds_a_copy(client, bucket, mount, bucketfs_bin):
    if shutil.which("unshare") is None:
        pytest.skip("no unshare")
    client.upload(bucket, F.Obj("f.txt", b"hello"))
    m = mount(bucket)
    place = os.path.realpath(m.path)
    holder = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "60"],
                              stderr=subprocess.PIPE)
    try:
        if not wait_for(lambda: holds(holder.pid, place) or holder.poll() is not None, 10) \
                or holder.poll() is not None:
            pytest.skip(f"cannot make a mount namespace here: {holder.stderr.read().decode(errors='replace')}")
        start = time.monotonic()
        unmount_and_wait(m, bucketfs_bin, timeout=10)
        took = time.monotonic() - start
        assert "another mount namespace holds a copy" in m.log_tail(), m.describe()
        assert took < 10, f"{took:.1f} s"
    finally:
        holder.kill()
        holder.wait(10)


def test_the_daemon_exits_promptly_after_reads_with_fills_held(client, bucket, mount, bucketfs_bin):
    data = os.urandom(24 * MiB)
    client.upload(bucket, F.Obj("big.bin", data))
    cache = tempfile.mkdtemp(prefix="exit-cache-", dir=SESSION_TMP)
    m = mount(bucket, "", "--cache-dir", cache, "--read-cache-size", "64")
    # Read part of it and close: read-ahead may still be in flight and fills are held for a pause.
    with open(m.p("big.bin"), "rb") as f:
        assert f.read(6 * MiB) == data[:6 * MiB]
    start = time.monotonic()
    unmount_and_wait(m, bucketfs_bin, timeout=15)
    took = time.monotonic() - start
    assert "still running" not in m.log_tail(), m.describe()
    # What the read held landed or was dropped; either way a remount reads the right bytes.
    again = mount(bucket, "", "--cache-dir", cache, "--read-cache-size", "64", mountpoint=m.path)
    with open(again.p("big.bin"), "rb") as f:
        assert f.read() == data
    assert took < 15, f"{took:.1f} s"


def test_a_lazy_unmount_serves_open_files_until_they_are_closed(client, bucket, mount):
    data = os.urandom(3 * MiB)
    client.upload(bucket, F.Obj("open.bin", data))
    m = mount(bucket, "", "--read-cache-size", "0")
    place = os.path.realpath(m.path)
    f = open(m.p("open.bin"), "rb")
    try:
        assert f.read(MiB) == data[:MiB]
        subprocess.run(["umount", "-l", m.path], check=True)
        assert wait_for(lambda: not holds(os.getpid(), place), 10)
        # The watch gives a plain unmount a second, then checks every second: an
        # open file must keep the daemon serving past that. (Only a daemon that
        # ends too early fails here, so a slow machine cannot make this fail.)
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            assert pids_with_arg(place), f"the daemon ended with a file open\n{m.describe()}"
            time.sleep(0.1)
        assert f.read() == data[MiB:]
    finally:
        f.close()
    assert wait_for(lambda: not pids_with_arg(place), 15), f"daemon still running after the last close\n{m.describe()}"

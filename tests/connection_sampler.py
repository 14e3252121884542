"""Counts the TCP connections of a mount's bucketfs processes, sampled in a
process of its own (tests/test_connection_limit.py runs it), so the proxy's
threads in the test's process never hold the sampling up. Stdlib only: it
imports nothing of the tests (conftest's exit hooks would act on the
session's mounts).

    python connection_sampler.py MOUNTPOINT STOP_FILE
        prints "sampling" when it starts, and a line of JSON once STOP_FILE exists
"""

from __future__ import annotations

import json
import os
import sys
import time


def socket_inodes(pid: int) -> set[str]:
    """The inodes of the process's open sockets."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def established_tcp(pid: int) -> dict[str, tuple[int, int]]:
    """The process's ESTABLISHED TCP connections, by socket inode, as (local
    port, remote port): its sockets looked up in its network namespace's
    tables. Only a socket open both before and after the tables are read
    counts, so every one counted was open at one moment (while they were
    read), however the descriptors churn meanwhile. Keyed by inode because
    the tables are no snapshot: read while other sockets open and close,
    they list a socket that stays open twice or more now and then."""
    try:
        before = socket_inodes(pid)
        rows = []
        for table in ("tcp", "tcp6"):
            with open(f"/proc/{pid}/net/{table}") as f:
                rows += f.read().splitlines()[1:]
        both = before & socket_inodes(pid)
    except OSError:
        return {}  # the process is gone
    found = {}
    for row in rows:
        fields = row.split()
        # local and remote address "HEX:PORT", state "01" is ESTABLISHED, field 9 the inode
        if fields[3] == "01" and fields[9] in both:
            found[fields[9]] = (int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16))
    return found


def bucketfs_pids(mountpoint: str) -> list[int]:
    """bucketfs processes naming `mountpoint`: the mount command, its daemon once spawned."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            exe = os.path.basename(os.readlink(f"/proc/{entry}/exe"))
        except OSError:
            continue
        if mountpoint.encode() in argv and exe.startswith("bucketfs"):
            found.append(int(entry))
    return found


def sample(mountpoint: str, stop_file: str) -> None:
    """Polls every 2 ms (plus the time a sample takes) until `stop_file` exists, then prints as JSON the most
    TCP connections one sample saw (and which), the samples and the pids seen."""
    peak: dict[str, tuple[int, int]] = {}
    samples, pids_seen = 0, set()
    print("sampling", flush=True)  # the test mounts only once this is read
    while not os.path.exists(stop_file):
        connections: dict[str, tuple[int, int]] = {}  # one socket held by two processes is one connection
        for pid in bucketfs_pids(mountpoint):
            pids_seen.add(pid)
            connections |= established_tcp(pid)
        if len(connections) > len(peak):
            peak = connections
        samples += 1
        time.sleep(0.002)
    print(json.dumps({"peak": len(peak), "connections": sorted(peak.values()), "samples": samples,
                      "pids": sorted(pids_seen)}))


if __name__ == "__main__":
    sample(sys.argv[1], sys.argv[2])

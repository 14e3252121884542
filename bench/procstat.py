"""CPU seconds of processes, and a command measured by them (bench/tls.py):
a process's from its threads' run time (/proc/PID/task/*/schedstat, as
bench/readcpu.py), the command's own from the children's rusage."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as R  # noqa: E402  (bench/run.py: the tools' environment)

# The commands' environment, taken before bench/tls.py's --daemon-env adds to the mounts' (R.ENV).
ENV = dict(R.ENV)


def process_tree(pid: int) -> list[int]:
    """`pid` and its children (nginx's master and its worker)."""
    out = [pid]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return out


def cpu(pids: list[int]) -> float:
    """CPU seconds of every live thread of `pids` (/proc/PID/task/*/schedstat)."""
    total = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, IndexError, ValueError):
                continue
    return total / 1e9


def child_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def quiet(pids: list[int], window: float = 0.4, busy: float = 0.004, bound: float = 5.0) -> float:
    """Waits until `pids` spend less than `busy` CPU seconds in `window` (bounded): the work a
    daemon does after a command returned (the read cache's fill after a pause, the crc32c of
    an upload's blocks). Returns the seconds waited."""
    t0 = time.monotonic()
    last = cpu(pids)
    while time.monotonic() - t0 < bound:
        time.sleep(window)
        now = cpu(pids)
        if now - last < busy:
            break
        last = now
    return time.monotonic() - t0


def measured(command, pids: dict[str, list[int]]) -> dict:
    """Runs `command` (a list, or a string for /bin/sh): its wall time, its own CPU
    (rusage of the children) and that of each of `pids`, and its stderr. With a daemon
    among `pids`, also its CPU until it is quiet after the command ("daemon after")."""
    before = {name: cpu(p) for name, p in pids.items()}
    client0 = child_seconds()
    t0, wall0 = time.perf_counter(), time.time()
    p = subprocess.run(command, shell=isinstance(command, str), env=ENV, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=900)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{command!r} failed ({p.returncode}): {p.stderr.decode(errors='replace')[-500:]}")
    out = {"wall": wall, "client": child_seconds() - client0, "began": wall0, "ended": wall0 + wall,
           "stdout": p.stdout.decode(errors="replace"), "stderr": p.stderr.decode(errors="replace")}
    for name, ps in pids.items():
        out[name] = cpu(ps) - before[name]
    if "daemon" in pids:
        out["quiet after"] = quiet(pids["daemon"])
        out["daemon after"] = cpu(pids["daemon"]) - before["daemon"] - out["daemon"]
    return out

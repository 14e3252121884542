#!/usr/bin/env python3
"""Where a daemon's samples go, by what they do: one `perf record -g`
recording read with `perf script`, each sample's call chain sorted into one
cost (the first rule that matches, below) and charged to the nearest frame
of bucketfs's own modules (which of its functions paid). Swift symbols are
demangled with swift-demangle when it is installed.

    .venv/bin/python bench/perfstacks.py FILE.data [--top 20]

Heuristic by design: the rules name a cost by the kernel or library frames
on the stack (fuse_dev_do_write is a FUSE reply, tcp_sendmsg a socket send,
a CNIOBoringSSL frame TLS, ...); a sample matching none is "other".
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections import Counter

# bucketfs's own Swift modules, as their mangled prefix ($s<length><name>)
OWN = ("BucketFS", "FUSE", "ObjectStore", "IOThreads", "ContentCache", "CloudStorage", "TLSTrust",
       "Credentials", "MetricsExport", "TraceExport", "MountOptionTable", "ServiceAccess", "TimeFormats")
OWN_PREFIXES = tuple(f"$s{len(m)}{m}" for m in OWN)
NIO_PREFIXES = ("$s7NIOCore", "$s8NIOPosix", "$s6NIOSSL", "$s8NIOHTTP1", "$s15AsyncHTTPClient", "$s7NIOHTTP2",
                "$s21NIOConcurrencyHelpers", "c_nio_")
COPY = ("__memmove", "__memcpy", "memcpy", "memmove", "__pi_memcpy")

# (cost, kernel frames any of which marks it), tried in order for samples in the kernel
KERNEL = (
    ("kernel: FUSE replies (the copy into the page cache, waking the reader)", ("fuse_dev_do_write",)),
    ("kernel: FUSE requests read by the daemon (incl. write data copied out)", ("fuse_dev_do_read",)),
    ("kernel: socket send (TCP, loopback delivery)", ("tcp_sendmsg", "sock_sendmsg", "__sys_sendmsg",
                                                       "__sys_sendto", "sock_write_iter")),
    ("kernel: socket receive (TCP)", ("tcp_recvmsg", "sock_recvmsg", "sock_read_iter", "__sys_recvfrom",
                                      "__sys_recvmsg")),
    ("kernel: page faults", ("exc_page_fault", "asm_exc_page_fault")),
    ("kernel: file I/O (stage and cache files)", ("vfs_write", "vfs_read", "__x64_sys_pwrite64",
                                                   "__x64_sys_pread64", "vfs_fallocate", "do_truncate",
                                                   "vfs_fsync_range", "do_sys_openat2", "__x64_sys_copy_file_range")),
    ("kernel: memory (mmap, munmap, madvise)", ("__x64_sys_munmap", "__x64_sys_madvise", "__x64_sys_mmap",
                                               "__x64_sys_mprotect", "__x64_sys_brk", "__vm_munmap")),
    ("kernel: futex (waits and wake-ups)", ("__x64_sys_futex", "do_futex")),
    ("kernel: epoll, eventfd, timers", ("do_epoll_wait", "__x64_sys_epoll_wait", "eventfd_write",
                                        "__x64_sys_epoll_ctl", "do_nanosleep", "__x64_sys_timerfd_settime")),
)


def parse(text: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """(thread name, [(symbol, object), leaf first]) of each sample of `perf script`."""
    samples, comm, frames = [], None, []
    frame = re.compile(r"^\s+[0-9a-f]+ (.+?) \((.*)\)$")
    for line in text.splitlines():
        if not line.strip():
            if comm is not None:
                samples.append((comm, frames))
            comm, frames = None, []
        elif not line[0].isspace():
            comm = line.split(None, 1)[0]
            frames = []
        else:
            m = frame.match(line)
            if m:
                frames.append((re.sub(r"\+0x[0-9a-f]+$", "", m.group(1)), os.path.basename(m.group(2))))
    if comm is not None:
        samples.append((comm, frames))
    return samples


def cost(frames: list[tuple[str, str]]) -> str:
    if not frames:
        return "other (no call chain)"
    syms = [s for s, _ in frames]
    leaf, obj = frames[0]
    if obj == "[kernel.kallsyms]":
        on = set(syms)
        for name, marks in KERNEL:
            if on.intersection(marks):
                return name
        return "kernel: other (syscall entry and exit, scheduling)"
    user = [s for s, o in frames if o != "[kernel.kallsyms]"]
    if any("BoringSSL" in s or "boringssl" in s.lower() for s in user[:6]):
        return "TLS: BoringSSL (encrypt, decrypt, records)"
    if leaf.startswith(COPY):
        caller = next((s for s in user[1:] if not s.startswith(COPY)), "")
        if caller.startswith("$s6NIOSSL"):
            return "memmove: NIOSSL's buffers"
        if caller.startswith(OWN_PREFIXES):
            return "memmove: bucketfs's own copies"
        if caller.startswith(NIO_PREFIXES):
            return "memmove: NIO, AsyncHTTPClient"
        return "memmove: other callers"
    low = " ".join(s.lower() for s in user[:2])
    if "crc32" in low or "md5" in low or "checksum" in low:
        return "checksums (crc32c, md5)"
    if leaf.startswith(("swift_retain", "swift_release", "swift_allocObject", "swift_deallocObject",
                        "swift_slowAlloc", "swift_slowDealloc", "malloc", "free", "_int_", "cfree",
                        "swift_bridgeObject", "swift_getGenericMetadata", "_swift_getGenericMetadata",
                        "getCache", "swift_unknownObject", "swift_isUniquelyReferenced", "tcache", "__libc_malloc",
                        "__libc_free", "__swift_instantiate", "swift_beginAccess", "swift_endAccess")):
        return "Swift runtime and malloc (ARC, allocation, metadata)"
    if leaf.startswith(("swift_task", "swift_job", "_dispatch", "swift::", "dispatch_", "swift_continuation",
                        "__futex", "pthread_", "sem_", "__lll_", "___pthread")):
        return "Swift concurrency, dispatch, locks (user side)"
    if leaf.startswith(NIO_PREFIXES):
        return "NIO, NIOSSL, AsyncHTTPClient (Swift)"
    if leaf.startswith(OWN_PREFIXES):
        return "bucketfs's own code"
    if obj.startswith("libc"):
        return "libc: other (" + leaf + ")"
    return "other user code"


def own_frame(frames: list[tuple[str, str]]) -> str:
    """The nearest frame of bucketfs's own modules (mangled), or ''."""
    return next((s for s, _ in frames if s.startswith(OWN_PREFIXES)), "")


def own_path(frames: list[tuple[str, str]], depth: int = 3) -> tuple[str, ...]:
    """The nearest `depth` distinct frames of bucketfs's own modules, leaf first (mangled)."""
    out: list[str] = []
    for s, _ in frames:
        if s.startswith(OWN_PREFIXES) and s not in out:
            out.append(s)
            if len(out) == depth:
                break
    return tuple(out)


def swift_frame(frames: list[tuple[str, str]]) -> str:
    """The nearest Swift function (bucketfs's, NIO's, AsyncHTTPClient's, ...), or ''."""
    return next((s for s, _ in frames if s.startswith(("$s", "c_nio_")) and not s.startswith("$ss")), "")


def demangled(symbols: list[str]) -> dict[str, str]:
    tool = shutil.which("swift-demangle") or ("/opt/swift/usr/bin/swift-demangle"
                                              if os.path.exists("/opt/swift/usr/bin/swift-demangle") else None)
    if not tool or not symbols:
        return {s: s for s in symbols}
    p = subprocess.run([tool, "--simplified", "--compact"], input="\n".join(symbols) + "\n", capture_output=True,
                       text=True, timeout=120)
    out = p.stdout.splitlines()
    return dict(zip(symbols, out)) if len(out) == len(symbols) else {s: s for s in symbols}


def short(name: str, width: int = 110) -> str:
    name = re.sub(r"\s+", " ", name)
    return name if len(name) <= width else name[: width - 1] + "…"


def analyse(data: str) -> dict:
    """{"samples": n, "costs": [(share %, cost)], "functions": [(share %, bucketfs function)], "threads": [...]}"""
    p = subprocess.run(["perf", "script", "-i", data], capture_output=True, text=True, timeout=1800)
    samples = parse(p.stdout)
    n = len(samples) or 1
    costs = Counter(cost(f) for _, f in samples)
    owns = Counter(own_frame(f) for _, f in samples)
    swifts = Counter(swift_frame(f) for _, f in samples)
    paths = Counter((cost(f), own_path(f)) for _, f in samples)
    threads = Counter(re.sub(r"\d+$", "N", c) for c, _ in samples)
    names = demangled(sorted({s for s in (*owns, *swifts, *(x for _, p in paths for x in p)) if s}))
    return {"samples": len(samples),
            "costs": [(100 * k / n, c) for c, k in costs.most_common()],
            "functions": [(100 * k / n, short(names.get(s, s)) if s else "(no bucketfs frame: NIO's, the "
                           "runtime's or the kernel's own threads)") for s, k in owns.most_common()],
            "swift": [(100 * k / n, short(names.get(s, s)) if s else "(no Swift frame)")
                      for s, k in swifts.most_common()],
            "paths": [(100 * k / n, c, " ← ".join(short(names.get(x, x), 60) for x in p) or "(no bucketfs frame)")
                      for (c, p), k in paths.most_common()],
            "threads": [(100 * k / n, t) for t, k in threads.most_common()]}


def markdown(found: dict, top: int = 15) -> list[str]:
    lines = ["| share | cost (by call chain) |", "|---|---|"]
    lines += [f"| {p:.1f}% | {c} |" for p, c in found["costs"] if p >= 0.5]
    lines += ["", "| share | nearest bucketfs function on the stack |", "|---|---|"]
    lines += [f"| {p:.1f}% | `{f}` |" for p, f in found["functions"][:top]]
    lines += ["", "| share | cost | bucketfs's frames on the stack, nearest first |", "|---|---|---|"]
    lines += [f"| {p:.1f}% | {c} | `{f}` |" for p, c, f in found["paths"][:top]]
    lines += ["", "| share | nearest Swift function on the stack (any module) |", "|---|---|"]
    lines += [f"| {p:.1f}% | `{f}` |" for p, f in found["swift"][:top]]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data")
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()
    found = analyse(a.data)
    print(f"{found['samples']} samples; threads: " + ", ".join(f"{t} {p:.0f}%" for p, t in found["threads"]))
    print("\n".join(markdown(found, a.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

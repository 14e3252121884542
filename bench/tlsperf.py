"""Where the daemon's cycles go over TLS (bench/tls.py --perf DIR): one cold
read with the defaults and one cp with the defaults (and each with
--read-cache-size 0), each on a fresh mount, recorded with
`perf record -g -F FREQ -p DAEMON` from just before the command to just
after it; then `perf report` by thread, by shared object and by symbol
(self time), and each sample's call chain sorted by cost (bench/perfstacks.py),
written beside each recording (DIR/NAME.txt, and the call graphs in
DIR/NAME.callers.txt).

perf adds its own cost to the daemon: the walls and CPU of these runs are
not the benchmark's figures.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time

import perfstacks

PROFILES = (("read defaults", "read-defaults", lambda b, w, around: b.dd_read(w, True, around)),
            ("read cache off", "read-cache-off", lambda b, w, around: b.dd_read(w, False, around)),
            ("cp defaults", "cp-defaults", lambda b, w, around: b.cp(w, True, around)),
            ("cp cache off", "cp-cache-off", lambda b, w, around: b.cp(w, False, around)))


def recorder(data: str, frequency: int):
    """around(pid): a context that records the daemon `pid` with perf while it is open."""
    @contextlib.contextmanager
    def around(pid: int):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(data)
        perf = subprocess.Popen(["perf", "record", "-g", "-F", str(frequency), "-p", str(pid), "-o", data],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 10  # perf writes its header once it is attached
            while time.monotonic() < deadline and perf.poll() is None:
                if os.path.exists(data) and os.path.getsize(data) > 0:
                    break
                time.sleep(0.02)
            time.sleep(0.1)
            yield
        finally:
            if perf.poll() is None:
                perf.send_signal(signal.SIGINT)
            try:
                perf.wait(60)
            except subprocess.TimeoutExpired:
                perf.kill()
                perf.wait(10)
    return around


def report(data: str, sort: str, limit: float = 0.5) -> list[tuple[float, str]]:
    """(share %, key) of the self samples by `sort`, from perf report."""
    p = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "-g", "none", "--sort", sort,
                        "--percent-limit", str(limit), "-q"], capture_output=True, text=True, timeout=600)
    out = []
    for line in p.stdout.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(.*\S)", line)
        if m:
            out.append((float(m.group(1)), re.sub(r"\s{2,}", "  ", m.group(2))))
    return out


def profile(bench, directory: str, frequency: int) -> dict:
    os.makedirs(directory, exist_ok=True)
    wire = next(w for w in bench.wires if w.tls)
    out = {}
    for label, name, run in PROFILES:
        data = os.path.join(directory, name + ".data")
        r = run(bench, wire, recorder(data, frequency))
        found = {"wall": r["wall"], "daemon": r["daemon"], "data": data,
                 "threads": report(data, "comm", 1), "objects": report(data, "dso", 0.5),
                 "symbols": report(data, "dso,sym", 0.7), "stacks": perfstacks.analyse(data)}
        with open(os.path.join(directory, name + ".txt"), "w") as f:
            for k in ("threads", "objects", "symbols"):
                f.write(f"# by {k}\n" + "".join(f"{p:6.2f}%  {key}\n" for p, key in found[k]) + "\n")
            f.write("\n".join(perfstacks.markdown(found["stacks"], 40)) + "\n")
        with open(os.path.join(directory, name + ".callers.txt"), "w") as f:
            subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "-G", "--percent-limit", "1.5"],
                           stdout=f, stderr=subprocess.DEVNULL, timeout=900)
        out[label] = found
    return out


def summary(profiles: dict) -> str:
    lines = ["### Where the daemon's cycles go over TLS (perf record -g, self time)"]
    for label, p in profiles.items():
        lines += ["", f"**{label}** (profiled run: {p['wall']:.2f} s, daemon {p['daemon']:.2f} s CPU; {p['data']})", "",
                  "| share | thread | | share | object |", "|---|---|---|---|---|"]
        threads, objects = p["threads"][:8], p["objects"][:8]
        for i in range(max(len(threads), len(objects))):
            t = threads[i] if i < len(threads) else (None, "")
            o = objects[i] if i < len(objects) else (None, "")
            lines.append(f"| {'' if t[0] is None else f'{t[0]:.1f}%'} | {t[1]} | | "
                         f"{'' if o[0] is None else f'{o[0]:.1f}%'} | `{o[1]}` |" if o[1] else
                         f"| {'' if t[0] is None else f'{t[0]:.1f}%'} | {t[1]} | | | |")
        lines += ["", f"{p['stacks']['samples']} samples.", "", *perfstacks.markdown(p["stacks"], 12)]
        lines += ["", "| share | object, symbol (self) |", "|---|---|"]
        lines += [f"| {share:.1f}% | `{key[:110]}` |" for share, key in p["symbols"][:15]]
    return "\n".join(lines)

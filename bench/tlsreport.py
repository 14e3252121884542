"""The tables of bench/tls.py: times, CPU, the cp's requests and the walks'
connections, TLS and plain side by side. Medians of the repetitions, the
best (shortest) in brackets where it is a time."""

from __future__ import annotations

import os
import statistics
import sys
import urllib.parse
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import fakegcs as F  # noqa: E402

LABELS = {"curl read": "curl into tmpfs (ALPN: h2 over TLS)", "curl read h1": "curl --http1.1 into tmpfs",
          "dd defaults": "bucketfs, defaults, cold `dd bs=1M`", "dd cache off": "bucketfs, `--read-cache-size 0`",
          "curl upload": "curl's one-request upload (ALPN: h2 over TLS)",
          "curl upload h1": "curl --http1.1 one-request upload",
          "cp defaults": "`cp` into the mount, defaults", "cp cache off": "`cp` into the mount, `--read-cache-size 0`"}
READS, WRITES = ("curl read", "curl read h1", "dd defaults", "dd cache off"), \
    ("curl upload", "curl upload h1", "cp defaults", "cp cache off")


def upload_timeline(entries: list[dict], began: float, ended: float) -> dict:
    """What nginx saw of a cp's requests: by operation, and when its parts and its
    compose ran, in seconds from the cp's start (nginx's $msec and $request_time)."""
    rows = []
    for e in entries:
        path, _, query = e["uri"].partition("?")
        op = F.operation(e["method"], urllib.parse.unquote(path), query)
        start = e["ended"] - e["seconds"]
        rows.append({"op": op, "start": start - began, "end": e["ended"] - began, "seconds": e["seconds"],
                     "bytes": e["bytes_in"], "connection": e["connection"]})
    parts = [r for r in rows if r["op"].startswith("upload")]
    composes = [r for r in rows if r["op"] == "compose"]
    out = {"by operation": dict(Counter(r["op"] for r in rows)), "cp": ended - began,
           "connections": len({r["connection"] for r in rows}), "parts": len(parts),
           "part bytes": sum(r["bytes"] for r in parts), "composes": len(composes),
           "compose seconds": sum(r["seconds"] for r in composes)}
    if parts:
        out |= {"parts from": min(r["start"] for r in parts), "parts to": max(r["end"] for r in parts),
                "part seconds": statistics.median(r["seconds"] for r in parts),
                "parts at once": max(sum(1 for q in parts if q["start"] <= p["start"] < q["end"]) for p in parts)}
    if composes:
        last = max(composes, key=lambda r: r["end"])
        out |= {"compose from": min(r["start"] for r in composes), "compose to": last["end"],
                "last compose from": last["start"], "last compose to": last["end"],
                "last compose seconds": last["seconds"]}
    deletes = [r for r in rows if r["op"] == "delete"]
    if deletes:
        out["deletes to"] = max(r["end"] for r in deletes)
    return out


def med(runs: list[dict], key: str) -> float | None:
    xs = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(xs) if xs else None


def best(runs: list[dict], key: str) -> float | None:
    xs = [r[key] for r in runs if r.get(key) is not None]
    return min(xs) if xs else None


def median_run(runs: list[dict]) -> dict:
    return sorted(runs, key=lambda r: r["wall"])[(len(runs) - 1) // 2]


def s(x: float | None, digits: int = 2) -> str:
    return "—" if x is None else f"{x:.{digits}f} s"


def x(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}×"


def div(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def heading(a, binary: str, load0, load1, took: float) -> str:
    env = f"; the daemon's environment adds {', '.join(a.daemon_env)}" if a.daemon_env else ""
    return (f"bucketfs {binary}{env}; {a.size_mib} MiB object and file, 500 small files; "
            f"{a.repeat} repetitions interleaved (TLS and plain alternate first), median (best in brackets); "
            f"{os.cpu_count()} cores shared by the client, the daemon, nginx and the emulator; "
            f"load average {load0[0]:.2f} at the start, {load1[0]:.2f} at the end; {took:.0f} s")


def ref_runs(res: dict, wire: str, label: str, h1: bool = False) -> list[dict] | None:
    """The curl runs a case is held against: the read's or the upload's, ALPN's or --http1.1."""
    base = "curl read" if label in READS else "curl upload"
    return res.get(wire, {}).get(base + (" h1" if h1 else ""))


def speed(label: str, runs: list[dict], ref: list[dict] | None) -> str:
    """Reads: curl's time ÷ this (speed against curl's); writes: this ÷ curl's time."""
    if label.startswith("curl") or not ref:
        return ""
    if label in READS:
        return (f"**{x(div(med(ref, 'wall'), med(runs, 'wall')))}** "
                f"[{x(div(best(ref, 'wall'), best(runs, 'wall')))}]")
    return f"**{x(div(med(runs, 'wall'), med(ref, 'wall')))}** [{x(div(best(runs, 'wall'), best(ref, 'wall')))}]"


def time_table(res: dict) -> list[str]:
    out = ["| | TLS | against curl (h2) | against curl --http1.1 | plain HTTP | against curl |",
           "|---|---|---|---|---|---|"]
    for label in (*READS, *WRITES):
        cells = []
        for wire in ("TLS", "plain"):
            runs = res.get(wire, {}).get(label)
            if not runs:
                cells += ["—", "—"] + (["—"] if wire == "TLS" else [])
                continue
            proto = ""
            if runs[0].get("protocol"):
                proto = f" ({', '.join(p.replace('HTTP/', 'h').replace('h2.0', 'h2') for p in runs[0]['protocol'])})"
            cells.append(f"{s(med(runs, 'wall'))} [{s(best(runs, 'wall'))}]{proto}")
            cells.append(speed(label, runs, ref_runs(res, wire, label)))
            if wire == "TLS":
                cells.append(speed(label, runs, ref_runs(res, wire, label, h1=True)))
        out.append(f"| {LABELS[label]} | " + " | ".join(cells) + " |")
    return out


def with_after(runs: list[dict]) -> float | None:
    return med([{"t": r["daemon"] + r.get("daemon after", 0.0)} for r in runs], "t") if runs else None


def cpu_table(res: dict) -> list[str]:
    out = ["| CPU seconds (median) | TLS: client | daemon | + after | daemon ÷ curl's (h2; --http1.1) | nginx "
           "| emulator | plain: client | daemon | + after | daemon ÷ curl's | emulator |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label in (*READS, *WRITES):
        cells = []
        for wire in ("TLS", "plain"):
            runs = res.get(wire, {}).get(label)
            if not runs:
                cells += ["—"] * (6 if wire == "TLS" else 5)
                continue
            daemon = med(runs, "daemon")
            cells += [s(med(runs, "client")), s(daemon), s(med(runs, "daemon after"))]
            if daemon is None:
                cells.append("")
            else:
                total = with_after(runs)
                refs = [ref_runs(res, wire, label)] + ([ref_runs(res, wire, label, True)] if wire == "TLS" else [])
                cells.append("; ".join(f"{x(div(daemon, med(r, 'client')))} ({x(div(total, med(r, 'client')))})"
                                       for r in refs if r))
            if wire == "TLS":
                cells.append(s(med(runs, "nginx")))
            cells.append(s(med(runs, "emulator")))
        out.append(f"| {LABELS[label]} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("client: curl, dd or cp (rusage); daemon: its threads' schedstat while the command ran; + after: "
               "the daemon's CPU from the command's return until it was quiet (less than 4 ms in 400 ms: the read "
               "cache's fill after a pause, an upload's background checks); the ratio in brackets counts it. "
               "nginx and the emulator likewise (plain HTTP has no nginx).")
    return out


def cp_table(res: dict) -> list[str]:
    out = ["| the cp's requests over TLS (its median run; nginx's log), seconds from the cp's start "
           "| defaults | cache off |", "|---|---|---|"]
    rows: dict[str, list[str]] = {}
    for label in ("cp defaults", "cp cache off"):
        runs = res.get("TLS", {}).get(label)
        t = median_run(runs).get("requests", {}) if runs else {}
        probe_tls = med([{"p": r["compose probe"]} for r in runs], "p") if runs else None
        plain = res.get("plain", {}).get(label)
        probe_plain = med([{"p": r["compose probe"]} for r in plain], "p") if plain else None

        def at(a, b):
            return f"{t[a]:.2f} → {t[b]:.2f}" if a in t and b in t else "—"
        tail = div(t.get("cp", 0) - t.get("parts to", 0), 1) if "parts to" in t else None
        for k, v in (("cp, wall", s(t.get("cp"))),
                     ("requests by operation", ", ".join(f"{n} {op}" for op, n in sorted(t.get("by operation", {}).items()))),
                     ("TLS connections", str(t.get("connections", "—"))),
                     ("parts (uploads): count, MiB", f"{t.get('parts', 0)}, {t.get('part bytes', 0) / 2**20:.0f}"),
                     ("parts: first start → last end", at("parts from", "parts to")),
                     ("parts: median time each, most at once", f"{s(t.get('part seconds'))}, {t.get('parts at once', '—')}"),
                     ("composes before the last (of parts already up): count, time", f"{t.get('composes', 1) - 1 if t.get('composes') else 0}, "
                      f"{s((t.get('compose seconds') or 0) - (t.get('last compose seconds') or 0))}"),
                     ("the last compose: start → end", at("last compose from", "last compose to")),
                     ("**the last compose's time** (share of the cp)",
                      f"**{s(t.get('last compose seconds'))}** ({x(div(t.get('last compose seconds'), t.get('cp'))).replace('×', '')})"),
                     ("the cp's time after its last part was stored", s(tail)),
                     ("parts deleted: last end", f"{t['deletes to']:.2f}" if "deletes to" in t else "—"),
                     ("a compose of the stored object alone, curl over TLS (median)", s(probe_tls)),
                     ("the same, plain HTTP straight at the emulator (median)", s(probe_plain))):
            rows.setdefault(k, []).append(v)
    out += [f"| {k} | " + " | ".join(v) + " |" for k, v in rows.items()]
    return out


def walk_table(res: dict) -> list[str]:
    out = ["| walk of 500 small files, fresh mount (defaults) | limit | TLS: connections | of them in the walk "
           "| resumed | accepted | requests | wall | plain: connections | accepted | requests | wall |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label in ("walk", "walk -c4", "walk ×8", "walk ×8 -c4"):
        t, p = res.get("TLS", {}).get(label), res.get("plain", {}).get(label)
        if not t and not p:
            continue
        how = ("`find \\| xargs -0 cat`" if "×8" not in label else "`find \\| xargs -0 -n 10 -P 8 cat`")
        limit = (t or p)[0]["limit"]
        cells = [how, f"{limit}" + (" (default)" if "-c4" not in label else "")]
        for runs, tls in ((t, True), (p, False)):
            if not runs:
                cells += ["—"] * (6 if tls else 4)
                continue
            most = lambda k: max(r[k] for r in runs)  # noqa: E731  (the worst repetition)
            cells.append(f"**{most('connections')}**")
            if tls:
                cells += [str(most("walk connections")), str(most("handshakes resumed"))]
            cells += [str(most("accepted")), str(most("requests")), s(med(runs, "wall"))]
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out.append("connections: those that carried the mount's requests from mount to unmount (nginx's $connection), "
               "the most of any repetition; resumed: of them, TLS sessions resumed; accepted: every connection nginx "
               "accepted meanwhile (stub_status), used or not.")
    return out


def tables(res: dict, size_mib: int) -> str:
    parts = [f"### {size_mib} MiB: wall time\n", *time_table(res), "",
             "Reads: curl's time ÷ bucketfs's (≥ 1.00× is as fast as curl); writes: bucketfs's time ÷ curl's "
             "(≤ 1.00× is as fast). Ratios of the medians, of the bests in brackets.", "",
             "### CPU\n", *cpu_table(res)]
    if any(k.startswith("cp") for k in res.get("TLS", {})):
        parts += ["", "### The cp and the emulator's compose\n", *cp_table(res)]
    if any(k.startswith("walk") for k in res.get("TLS", {})):
        parts += ["", "### TLS connections of a walk\n", *walk_table(res)]
    return "\n".join(parts)

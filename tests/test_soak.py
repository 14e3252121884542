"""Soak: six worker processes, four on one mount and two on a second mount of
the same bucket, make seeded random changes (mkdir, rmdir, mv of files and
directories, cp, rm, write, append, truncate, setfattr of user.custom.* and
user.contentType, read) for BUCKETFS_SOAK_SECONDS (default 50) while both
mounts' proxies inject 503s, resets (before the service sees a request, or
after it acted: a lost answer) and 0.2-2 s stalls. Each worker owns a subtree
(own-<worker>/) and also works in shared/, which all workers change. Files hold
32-byte records that carry their own CRC (or zeros, from truncate).

Then, faults off, it checks: both daemons live and both mounts answer, and no
operation met ENOTCONN or an errno racing cannot explain; no stage is left
under either --cache-dir but those the log says it kept (after a 412, or a
failed upload: SEMANTICS.md#writes-preconditions); every object (JSON API,
never the mount) and every read is whole records; in own subtrees, every
object's bytes and custom metadata, and every read, are what the worker's log
allows (an acknowledged operation's result; before or after a failed one); in
shared/, the bytes of every acknowledged write or cp are at their name or where
moves took them, unless an operation that overlapped or followed it may have
replaced them ("may": failed operations may have acted, and the emulator
ignores some preconditions, tests/EMULATOR-NOTES.md).
BUCKETFS_SOAK_SEED repeats a run's choices (printed at the start); the proxies
draw faults from it in the order requests arrive, which threads vary.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter

SECONDS = float(os.environ.get("BUCKETFS_SOAK_SECONDS") or 50)
SEED = int(os.environ.get("BUCKETFS_SOAK_SEED") or random.SystemRandom().randrange(1_000_000))
WORKERS = {"a": 4, "b": 2}  # per mount
FAULT_RATE = 0.03
# Stalls (at most 2 s) stay well below --request-timeout: no attempt is abandoned because of one.
OPTS = ("--request-timeout", "8", "--retry-deadline", "20", "--metadata-ttl", "5")
OP_BOUND = 180.0  # an operation under way at the end finishes within this (every request has a deadline)
LATE = 30.0  # a failed operation may have acted until this long after it returned (an abandoned attempt)
REC = 32
CRASH = {errno.ENOTCONN, errno.ECONNABORTED}
# Racing operations and exhausted retries end in these (SEMANTICS.md#errors, #tree-errno); EINVAL: a
# directory moved into itself, EAGAIN: a setfattr that met 412 five times. Anything else is a finding
# (it found EBADF from a read handle opened on a staged file once the writer closed: fixed in dd7ff09).
EXPECTED = {"ENOENT", "ENOTEMPTY", "EEXIST", "ESTALE", "EIO", "EINVAL", "ENOTDIR", "EISDIR", "EAGAIN"}
MTIME = "goog-reserved-file-mtime"
OPS = {"write": 3, "append": 1.5, "truncate": 1, "rm": 1, "mkdir": 1, "rmdir": 1, "mv": 1.5, "mvdir": 1,
       "cp": 1, "setfattr": 1.5, "read": 2}


def records(tag: str, n: int) -> bytes:
    heads = (f"{tag}:{i}".encode().ljust(24, b".")[:24] for i in range(n))
    return b"".join(h + b"%08x" % zlib.crc32(h) for h in heads)


def valid(data: bytes) -> bool:
    recs = (data[i:i + REC] for i in range(0, len(data), REC))
    return len(data) % REC == 0 and all(r == bytes(REC) or b"%08x" % zlib.crc32(r[:24]) == r[24:] for r in recs)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------
# a worker process: `python test_soak.py CONFIG-JSON` (stdlib only)


class Worker:
    def __init__(self, cfg: dict):
        self.mnt, self.wid, self.end = cfg["mnt"], cfg["wid"], cfg["end"]
        self.rng = random.Random(f"{cfg['seed']}/{self.wid}")
        self.own, self.files, self.seq = f"own-{self.wid}", set(), 0
        self.dirs = {self.own}
        self.log = open(cfg["log"], "a", buffering=1)

    def path(self, rel: str) -> str:
        return os.path.join(self.mnt, rel)

    def run(self) -> int:
        while time.monotonic() < self.end:
            self.seq += 1
            e = {"w": self.wid, "i": self.seq, "area": "own" if self.rng.random() < 0.6 else "shared",
                 "op": self.rng.choices(list(OPS), list(OPS.values()))[0], "ok": False}
            try:
                self.plan(e)
                e["t0"] = time.monotonic()
                self.act(e)
                e["ok"] = True
            except OSError as ex:
                e["err"], e["crash"] = errno.errorcode.get(ex.errno, str(ex)), ex.errno in CRASH
                if "t0" not in e:  # choosing a target (a listing) failed
                    e["op"], e["t0"] = "list", time.monotonic()
            e["t1"] = time.monotonic()
            self.log.write(json.dumps(e) + "\n")
            if e.get("crash"):
                return 3
            if e["area"] == "own":
                self.update_view(e)
        return 0

    def act(self, e: dict) -> None:
        op, p, q = e["op"], self.path(e["p"]), self.path(e.get("q", ""))
        if op in ("write", "append"):
            self.put(p, records(e["tag"], e["n"]), os.O_TRUNC | os.O_CREAT if op == "write" else os.O_APPEND)
        elif op in ("read", "cp"):
            with open(p, "rb") as f:
                data = f.read()
            e["rd"], e["valid"] = sha(data), valid(data)
            if op == "cp":
                self.put(q, data, os.O_TRUNC | os.O_CREAT)
        elif op == "truncate":
            os.truncate(p, e["k"] * REC)
        elif op == "setfattr":
            os.setxattr(p, e["key"], e["val"].encode())
        elif op in ("mv", "mvdir"):
            os.rename(p, q)
        else:
            {"rm": os.unlink, "mkdir": os.mkdir, "rmdir": os.rmdir}[op](p)

    @staticmethod
    def put(p: str, data: bytes, flags: int) -> None:
        fd = os.open(p, os.O_WRONLY | flags, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)  # uploads: its error is the operation's

    def plan(self, e: dict) -> None:
        """Targets and data. Own subtree: from what the worker knows it holds; shared/: from listings."""
        r, files, dirs, name = self.rng, sorted(self.files), sorted(self.dirs), f"{self.wid}-{self.seq}"
        if e["area"] == "own":
            pick_file, pick_dir = lambda: files and r.choice(files), lambda: r.choice(dirs)  # noqa: E731
            subdirs = [d for d in dirs if d != self.own]
            subdir = lambda: subdirs and r.choice(subdirs)  # noqa: E731
            dst_parent = lambda s: r.choice([d for d in dirs if d != s and not d.startswith(s + "/")])  # noqa: E731
        else:  # shared/ itself stays
            pick_file, pick_dir, dst_parent = self.pick_file, self.pick_dir, lambda src: self.pick_dir()
            subdir = lambda: (d := self.pick_dir(below=True)) != "shared" and d  # noqa: E731
        op = e["op"]
        if op in ("rmdir", "mvdir") and (src := subdir()):
            e["p"] = src
            if op == "mvdir":
                e["q"] = f"{dst_parent(src)}/d{name}"
            return
        if op in ("rmdir", "mvdir", "mkdir"):
            e["op"], e["p"] = "mkdir", f"{pick_dir()}/d{name}"
            return
        file = pick_file()
        e["p"] = file if file and (op != "write" or r.random() < 0.5) else f"{pick_dir()}/f{name}.dat"
        e["op"] = op = op if file else "write"  # needs a file and finds none: writes a new one
        if op in ("write", "append"):
            e["tag"], x = f"{self.wid}.{self.seq}", r.random()
            e["n"] = r.randint(0, 64) if x < 0.8 else r.randint(64, 4096) if x < 0.95 else r.randint(4096, 40000)
        elif op == "truncate":
            e["k"] = r.randint(0, 80)
        elif op == "setfattr":
            e["key"] = r.choice(["user.custom.k0", "user.custom.k1", "user.contentType"])
            e["val"] = r.choice(["text/plain", "application/x-soak", "image/png"]) \
                if e["key"] == "user.contentType" else f"{self.wid}.{self.seq}"
        elif op in ("mv", "cp"):  # onto an existing file, or to a new name
            q = r.random() < 0.3 and pick_file()
            e["q"] = q if q and q != e["p"] else f"{pick_dir()}/f{name}.dat"

    def listing(self, d: str) -> tuple[list[str], list[str]]:
        entries = sorted(os.scandir(self.path(d)), key=lambda x: x.name)
        dirs = [x.name for x in entries if x.is_dir(follow_symlinks=False)]
        return [x.name for x in entries if x.name not in dirs], dirs

    def pick_dir(self, below: bool = False) -> str:
        d = "shared"
        while below or self.rng.random() < 0.6:
            if not (subs := self.listing(d)[1]):
                break
            d, below = f"{d}/{self.rng.choice(subs)}", False
        return d

    def pick_file(self) -> str | None:
        for d in (self.pick_dir() for _ in range(3)):
            if files := self.listing(d)[0]:
                return f"{d}/{self.rng.choice(files)}"
        return None

    def update_view(self, e: dict) -> None:
        op, p, q = e["op"], e.get("p"), e.get("q")
        if not e["ok"]:  # what it did is unknown: look
            self.files, self.dirs = set(), {self.own}
            for root, ds, fs in os.walk(self.path(self.own)):
                rel = os.path.relpath(root, self.mnt)
                self.dirs |= {f"{rel}/{d}" for d in ds}
                self.files |= {f"{rel}/{f}" for f in fs}
        elif op in ("mv", "rm"):
            self.files.discard(p)
            self.files |= {q} if op == "mv" else set()
        elif op in ("write", "cp"):
            self.files.add(p if op == "write" else q)
        elif op in ("mkdir", "rmdir"):
            (self.dirs.add if op == "mkdir" else self.dirs.discard)(p)
        elif op == "mvdir":
            move = lambda x: q + x[len(p):] if x == p or x.startswith(p + "/") else x  # noqa: E731
            self.files, self.dirs = {move(f) for f in self.files}, {move(d) for d in self.dirs}


# ---------------------------------------------------------------------------
# the oracle

ANY = "any"  # a name whose possible states grew too many to follow: not checked


def tell(e: dict) -> str:
    dst = f" -> {e['q']}" if "q" in e else ""
    return f"{e['w']}#{e['i']} {e['op']} {e.get('p')}{dst} [{'ok' if e['ok'] else e.get('err')}]"


def show(s) -> str:
    tag = "" if s is None else s[0][:24].split(b":")[0].decode(errors="replace")
    return "absent" if s is None else f"{len(s[0])} bytes tagged {tag!r} {dict(s[1])}"


def check_own(own: str, entries: list[dict], objs: dict) -> tuple[list[str], int]:
    """Replays one worker's operations on its subtree: per name, the states (bytes,
    custom metadata) the bucket may hold, None for absent. An acknowledged
    operation maps each state; a failed one may or may not have acted."""
    model, problems = {}, []
    poss = lambda p: model.get(p, {None})  # noqa: E731

    def put(p, new, ok):
        old = poss(p)
        got = ANY if old is ANY or new is ANY else new if ok else old | new
        model[p] = ANY if got == ANY or len(got) > 32 or not got else got

    def change(e, p, new):
        if e["ok"] and not new:
            problems.append(f"{tell(e)}: acknowledged, but no earlier operation left that file")
        put(p, new, e["ok"])

    def read(e, p):
        states = poss(p)
        if states is not ANY and "rd" in e and e["rd"] not in {sha(s[0]) for s in states if s}:
            problems.append(f"{tell(e)}: read bytes its history does not allow: {[show(s) for s in states]}")
        return states

    def move(e, p, q, must_exist):
        sp, sq = poss(p), poss(q)
        if sp is ANY or sq is ANY:
            model[p] = model[q] = ANY
            return
        # onto a file: the source's custom keys (all set by setfattr, so explicit) win, the replaced file's stay
        new = {(a[0], frozenset({**dict(b[1] if b else ()), **dict(a[1])}.items())) for a in sp if a for b in sq}
        change(e, q, new | (sq if None in sp and not must_exist else set()))
        put(p, {None}, e["ok"])

    def each(p, f):
        states = poss(p)
        return ANY if states is ANY else {f(s) for s in states if s is not None}

    for e in entries:
        op, p, q, ok = e["op"], e["p"], e.get("q"), e["ok"]
        if op in ("write", "cp") and (op == "write" or "rd" in e):  # a cp whose read failed wrote nothing
            src = read(e, p) if op == "cp" else {(records(e["tag"], e["n"]), None)}
            match = lambda s: s and (op == "write" or sha(s[0]) == e["rd"])  # noqa: E731
            data = None if src is ANY else next((s[0] for s in src if match(s)), None)
            dst = p if op == "write" else q
            st = poss(dst)  # an overwrite keeps the file's custom metadata
            put(dst, ANY if data is None or st is ANY else {(data, s[1] if s else frozenset()) for s in st}, ok)
        elif op == "append":
            more = records(e["tag"], e["n"])
            change(e, p, each(p, lambda s: (s[0] + more, s[1])))
        elif op == "truncate":
            n = e["k"] * REC
            change(e, p, each(p, lambda s: (s[0][:n].ljust(n, b"\0"), s[1])))
        elif op == "rm":
            change(e, p, each(p, lambda s: None))
        elif op == "setfattr":
            key = e["key"].removeprefix("user.custom.")  # contentType: not followed (inferred, carried, merged)
            set_key = lambda s: (s[0], frozenset({**dict(s[1]), key: e["val"]}.items()))  # noqa: E731
            change(e, p, each(p, lambda s: s if key == e["key"] else set_key(s)))
        elif op == "read":
            read(e, p)
        elif op == "mv":
            move(e, p, q, True)
        elif op == "mvdir":
            for x in [x for x, st in model.items() if x.startswith(p + "/") and st != {None}]:
                move(e, x, q + x[len(p):], False)
        elif op == "rmdir" and ok:
            held = [x for x, st in model.items() if x.startswith(p + "/") and st is not ANY and None not in st]
            if held:
                problems.append(f"{tell(e)}: acknowledged while it held {held[:3]}")
    names = sorted(set(model) | {n for n in objs if n.startswith(own + "/") and not n.endswith("/")})
    for name in [n for n in names if model.get(n, {None}) is not ANY]:
        if objs.get(name) not in model.get(name, {None}):
            history = [tell(e) for e in entries if any(x and (name == x or name.startswith(x + "/"))
                                                       for x in (e["p"], e.get("q")))][-6:]
            problems.append(f"{name}: the bucket has {show(objs.get(name))}; acknowledged operations allow only "
                            f"{[show(s) for s in model.get(name, {None})]}; its last operations: {history}")
    return problems, len(names)


def check_shared(entries: list[dict], objs: dict) -> tuple[list[str], int, int]:
    """Acknowledged writes and cps in shared/: their bytes are at their name or
    where moves may have taken them, unless an operation that did not end before
    the write began (a failed one: LATE after) may have replaced or removed them.
    (Overlap counts: a file renamed or truncated through the same mount while a
    handle has it open takes that handle's bytes along, SEMANTICS.md#writes-unlink-rename.)"""
    have = {name: sha(d) for name, (d, _) in objs.items()}
    ends = [e["t1"] + (0 if e["ok"] else LATE) for e in entries]
    under = lambda x, d: x.startswith(d + "/")  # noqa: E731
    problems, checked, excused = [], 0, 0
    for c in [c for c in entries if c["ok"] and c["op"] in ("write", "cp")]:
        t, h = c["t1"], sha(records(c["tag"], c["n"])) if c["op"] == "write" else c["rd"]
        later = [e for e, end in zip(entries, ends) if e is not c and end > c["t0"]]
        moves = [e for e in later if e["op"] == "mv" or e["op"] == "mvdir" and not under(e["q"], e["p"])]
        where = {c["p"] if c["op"] == "write" else c["q"]}
        for _ in range(8):  # racing moves may have run in any order: follow them all, a few hops deep
            new = {e["q"] + x[len(e["p"]):] for e in moves for x in where if x == e["p"] or under(x, e["p"])}
            if new <= where:
                break
            where |= new

        def threat(e):  # may have replaced or removed the bytes (a move that began before: by its delete)
            op, p, q, during = e["op"], e["p"], e.get("q"), e["t0"] < t
            return (op in ("write", "append", "truncate", "rm") and p in where or op == "cp" and q in where
                    or op == "mv" and (q in where or during and p in where)
                    or op == "mvdir" and any(under(x, q) or during and under(x, p) for x in where))

        if not new <= where or any(threat(e) for e in later):
            excused += 1
        elif not any(have.get(x) == h for x in where):
            problems.append(f"{tell(c)}: acknowledged bytes are nowhere in {sorted(where)}; the bucket has "
                            f"{[show(objs.get(x)) for x in sorted(where)]}")
        checked += 1
    return problems, checked - excused, excused


# ---------------------------------------------------------------------------
# the test

if __name__ != "__main__":  # the workers run this file as a script and need none of this
    from conftest import LOG_DIR, SESSION_TMP, wait_for


def kept(m) -> set[str]:
    """Stages the mount's log says it kept (after a 412, or a close whose upload failed)."""
    with open(m.log_path, errors="replace") as f:
        return set(re.findall(r"kept in (\S+)", f.read()))


def leaked(m, cache: str) -> list[str]:
    """Files under the cache dir but kept stages and their sidecars, and the
    read cache (<cache>/read-cache, kept across mounts on purpose; tests/test_read_cache.py)."""
    files = []
    for root, dirs, names in os.walk(cache):
        if root == cache and "read-cache" in dirs:
            dirs.remove("read-cache")
        files += [os.path.join(root, f) for f in names]
    logged = kept(m)
    return [f for f in files if f.removesuffix(".tmp").removesuffix(".json") not in logged]


def test_soak(mount, bucket, client, capsys):
    repro = f"BUCKETFS_SOAK_SEED={SEED} BUCKETFS_SOAK_SECONDS={SECONDS:g}"
    with capsys.disabled():
        print(f"\nsoak: {repro} (logs: {LOG_DIR})", flush=True)
    wids = [f"{k}{i}" for k, n in WORKERS.items() for i in range(n)]
    for name in ["shared/", *(f"shared/s{i}/" for i in range(4)), *(f"own-{w}/" for w in wids)]:
        client.upload(bucket, name, b"")
    mounts = {}
    for k in WORKERS:
        cache = tempfile.mkdtemp(prefix=f"cache-{k}-", dir=SESSION_TMP)
        mounts[k] = (mount(bucket, "", "--cache-dir", cache, *OPTS), cache)
    for k, (m, _) in mounts.items():
        m.proxy.set_random_faults(FAULT_RATE, f"{SEED}/{k}")
    problems, procs, end = [], {}, time.monotonic() + SECONDS
    for w in wids:
        log = os.path.join(LOG_DIR, f"soak-{w}.jsonl")
        cfg = {"mnt": mounts[w[0]][0].path, "wid": w, "seed": SEED, "end": end, "log": log}
        with open(log + ".stderr", "w") as err:
            procs[w] = (subprocess.Popen([sys.executable, __file__, json.dumps(cfg)], stdin=subprocess.DEVNULL,
                                         stdout=err, stderr=err), log)
    try:
        for w, (proc, log) in procs.items():
            try:
                rc = proc.wait(timeout=max(1.0, end + OP_BOUND - time.monotonic()))
                if rc not in (0, 3):  # 3: it saw ENOTCONN, reported from its log below
                    problems.append(f"worker {w} failed (rc {rc}): {open(log + '.stderr').read()[-2000:]}")
            except subprocess.TimeoutExpired:
                problems.append(f"worker {w}: an operation still under way {OP_BOUND:.0f} s after the end "
                                f"(the one after its last line in {log})")
    finally:
        for proc, _ in procs.values():
            proc.kill()  # only those still running; one stuck in the mount ends with the fixture's unmount
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        for m, _ in mounts.values():
            m.proxy.set_random_faults(0)

    for k, (m, _) in mounts.items():
        problems += [] if m.pids else [f"mount {k}: the bucketfs process is gone"]
        try:  # in a child process: a hung mount must not hang the test
            r = subprocess.run(["ls", m.path, m.p("shared")], capture_output=True, text=True, timeout=60)
            problems += [f"mount {k} does not answer: {r.stderr.strip()}"] if r.returncode else []
        except subprocess.TimeoutExpired:
            problems.append(f"mount {k}: ls got no answer within 60 s")
    # A stage goes at the last handle's release, which reaches the daemon after close returned.
    wait_for(lambda: not any(leaked(*mc) for mc in mounts.values()), 30, 0.5)
    problems += [f"mount {k}: a stage left behind, not logged as kept: {p}" for k, mc in mounts.items()
                 for p in leaked(*mc)]

    entries = []
    for _, log in procs.values():
        with open(log) as f:
            entries += [json.loads(line) for line in f if line.endswith("\n")]  # a killed worker's torn line
    problems += [f"{tell(e)}: the mount is gone (ENOTCONN)" for e in entries if e.get("crash")]
    problems += [f"{tell(e)}: read bytes that are not whole records" for e in entries if e.get("valid") is False]
    problems += [f"{tell(e)}: unexpected errno" for e in entries if not e["ok"] and e["err"] not in EXPECTED
                 and not e["crash"]]
    objs = {}
    for it in client.list(bucket, prefix="", delimiter=None)[0]:
        name = it["name"]
        # storage-testbench leaves a size of 0 out (tests/EMULATOR-NOTES.md).
        data = client.download(bucket, name) if int(it.get("size", 0)) else b""
        objs[name] = (data, frozenset((k, v) for k, v in (it.get("metadata") or {}).items() if k != MTIME))
        if (len(data) > 0) if name.endswith("/") else not valid(data):
            problems.append(f"partial or garbled object {name}: {show(objs[name])}")
    entries = [e for e in entries if e["op"] != "list"]
    own_checked = 0
    for w in wids:
        found, n = check_own(f"own-{w}", [e for e in entries if e["w"] == w and e["area"] == "own"], objs)
        problems, own_checked = problems + found, own_checked + n
    found, checked, excused = check_shared([e for e in entries if e["area"] == "shared"], objs)
    problems += found

    failed = Counter(f"{e['area']}:{e['op']}:{e.get('err')}" for e in entries if not e["ok"])
    with capsys.disabled():
        print(f"soak: {len(entries)} operations, {sum(e['ok'] for e in entries)} acknowledged; failed: "
              f"{dict(sorted(failed.items()))}\nsoak: faults {[m.proxy.fault_counts for m, _ in mounts.values()]}; "
              f"stages kept (logged) {sum(len(kept(m)) for m, _ in mounts.values())}; {len(objs)} objects; "
              f"own names checked {own_checked}; shared writes checked {checked}, excused {excused}", flush=True)
    tails = "".join(f"\n\nmount {k}: {m.args}\nlog tail:\n{m.log_tail(25)}" for k, (m, _) in mounts.items())
    assert not problems, f"soak failed: {repro}; logs in {LOG_DIR}\n" + "\n".join(problems[:30]) + tails


if __name__ == "__main__":
    sys.exit(Worker(json.loads(sys.argv[1])).run())

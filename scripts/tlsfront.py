#!/usr/bin/env python3
"""A TLS front for bucketfs's end-to-end tests: nginx from Debian's packages
before an emulator (or a counting proxy), as Google's front ends stand before
the service: TLS 1.2 and 1.3, ALPN offering h2 and http/1.1.

* ``Certificates``: a private CA and server certificates made with ``openssl``
  at run time in a directory: one for localhost and 127.0.0.1 signed by the CA,
  one from another (untrusted) CA, one for another host name, one expired.
* ``TLSFront``: one nginx on a free loopback port, proxying to a plain-HTTP
  upstream, requests and responses streamed (not buffered to disk). Each
  request is logged with its connection number and whether its TLS session
  was resumed (``connections()``), and with its time and URI (``entries()``,
  for bench/tls.py). ``plain=True`` adds a plain-HTTP listener before the
  same upstream with the same log (``plain_url``: counting a plain-HTTP
  client's connections the same way) and nginx's connection counters
  (``accepted()``). Always stopped: ``stop()``, the context manager and an
  ``atexit`` hook.

Stdlib only.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.parse
import urllib.request

NGINX = os.environ.get("BUCKETFS_NGINX") or shutil.which("nginx") or "/usr/sbin/nginx"


def _openssl(*args: str, cwd: str) -> None:
    p = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {p.stderr.strip()}")


class Certificates:
    """A private CA and the server certificates the tests present."""

    def __init__(self, directory: str):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.ca = self.path("ca.pem")
        if not os.path.exists(self.ca):
            self._make()

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def pair(self, name: str) -> tuple[str, str]:
        """(certificate, key) of ``good``, ``untrusted``, ``wrong-name`` or ``expired``."""
        return self.path(f"{name}.pem"), self.path(f"{name}.key")

    def _ca(self, name: str, subject: str) -> None:
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "3650", "-subj", subject,
                 cwd=self.dir)

    def _server(self, name: str, ca: str, names: str, dates: tuple[str, str] | None = None) -> None:
        d = self.dir
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                 f"{name}.key", "-out", f"{name}.csr", "-subj", "/CN=bucketfs test server", cwd=d)
        db = os.path.join(d, f"db-{name}")
        os.makedirs(db, exist_ok=True)
        open(os.path.join(db, "index.txt"), "w").close()
        with open(os.path.join(db, "serial"), "w") as f:
            f.write(os.urandom(8).hex() + "\n")
        with open(os.path.join(d, f"{name}.cnf"), "w") as f:
            f.write(f"[ca]\ndefault_ca = test\n[test]\ndatabase = {db}/index.txt\nserial = {db}/serial\n"
                    f"new_certs_dir = {db}\ndefault_md = sha256\npolicy = any\nunique_subject = no\n"
                    "default_days = 3650\n[any]\ncommonName = supplied\n"
                    f"[ext]\nsubjectAltName = {names}\nbasicConstraints = CA:FALSE\n"
                    "extendedKeyUsage = serverAuth\n")
        args = ["ca", "-batch", "-config", f"{name}.cnf", "-cert", f"{ca}.pem", "-keyfile", f"{ca}.key",
                "-in", f"{name}.csr", "-out", f"{name}.pem", "-extensions", "ext", "-notext"]
        if dates:  # openssl ca takes past dates: an expired certificate without faking the clock
            args += ["-startdate", dates[0], "-enddate", dates[1]]
        _openssl(*args, cwd=d)

    def _make(self) -> None:
        self._ca("ca", "/CN=bucketfs test CA")
        self._ca("other-ca", "/CN=bucketfs untrusted CA")
        local = "DNS:localhost,IP:127.0.0.1,IP:::1"
        self._server("good", "ca", local)
        self._server("untrusted", "other-ca", local)
        self._server("wrong-name", "ca", "DNS:elsewhere.example")
        self._server("expired", "ca", local, ("20200101000000Z", "20210101000000Z"))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_LIVE: set["TLSFront"] = set()


@atexit.register
def _stop_all() -> None:
    for front in list(_LIVE):
        front.stop()


class TLSFront:
    """One nginx: https://localhost:PORT -> ``upstream`` (http://host:port)."""

    def __init__(self, upstream: str, certificate: str, key: str, directory: str, plain: bool = False):
        u = urllib.parse.urlsplit(upstream)
        assert u.scheme == "http", "only plain http upstreams"
        self.upstream = f"{u.hostname}:{u.port or 80}"
        self.certificate, self.key = certificate, key
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.port: int | None = None
        self.plain = plain
        self.plain_port: int | None = None
        self._status_asked = 0
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}"

    @property
    def plain_url(self) -> str:
        assert self.plain_port, "a front started with plain=True"
        return f"http://127.0.0.1:{self.plain_port}"

    @property
    def access_log(self) -> str:
        return os.path.join(self.dir, "access.log")

    def _config(self, port: int, plain_port: int | None) -> str:
        d = self.dir
        location = """location / {
            proxy_pass http://emulator;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_request_buffering off;
            proxy_buffering off;
            proxy_read_timeout 300s;
            proxy_send_timeout 300s;
        }"""
        plain = ""
        if plain_port:
            plain = f"""
    server {{
        listen 127.0.0.1:{plain_port};
        server_name localhost;
        access_log {self.access_log} conns;
        client_max_body_size 0;
        keepalive_requests 100000;
        keepalive_timeout 120s;
        location = /.tlsfront/status {{ access_log off; stub_status; }}
        {location}
    }}"""
        return f"""
daemon off;
master_process on;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    log_format conns '$connection $ssl_session_reused $ssl_protocol $request_method $status '
                     '$request_time $server_protocol $request_length $bytes_sent $msec $request_uri';
    upstream emulator {{ server {self.upstream}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port} ssl http2;
        server_name localhost;
        access_log {self.access_log} conns;
        ssl_certificate {self.certificate};
        ssl_certificate_key {self.key};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:tls:1m;
        client_max_body_size 0;
        keepalive_requests 100000;
        keepalive_timeout 120s;
        {location}
    }}{plain}
}}
"""

    def start(self) -> "TLSFront":
        last = ""
        for _ in range(5):  # a free port can be taken between probe and bind: retry
            port = _free_port()
            plain_port = _free_port() if self.plain else None
            last = self._launch(port, plain_port)
            if not last:
                return self
            self.stop()
        raise RuntimeError(f"nginx did not start: {last}")

    def _launch(self, port: int, plain_port: int | None) -> str:
        """Starts nginx on these ports; "" once it answers, else what its log says."""
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(self._config(port, plain_port))
        log = open(os.path.join(self.dir, "nginx.out"), "ab")
        self.proc = subprocess.Popen([NGINX, "-p", self.dir, "-c", conf], stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=log, start_new_session=True)
        log.close()
        self.port, self.plain_port = port, plain_port
        _LIVE.add(self)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                for p in (port, plain_port) if plain_port else (port,):
                    socket.create_connection(("127.0.0.1", p), timeout=0.5).close()
                return ""
            except OSError:
                time.sleep(0.02)
        try:
            with open(os.path.join(self.dir, "error.log")) as f:
                return f.read()[-500:] or "no answer"
        except OSError:
            return "no answer"

    def present(self, certificate: str, key: str, timeout: float = 10.0) -> None:
        """Serves another certificate from now on, on the same port: nginx is
        stopped (its connections go with it, as when a server is replaced)
        and started again with it. Returns once a new connection is
        presented with it (bounded)."""
        assert self.port is not None
        port, plain_port = self.port, self.plain_port
        self.certificate, self.key = certificate, key
        self.stop()
        with open(certificate) as f:
            first = f.read().split("-----END CERTIFICATE-----")[0] + "-----END CERTIFICATE-----\n"
        wanted = ssl.PEM_cert_to_DER_cert(first)
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                if self._launch(port, plain_port):  # the port not free yet: again
                    self.stop()
                    time.sleep(0.1)
                    continue
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as raw:
                    with context.wrap_socket(raw, server_hostname="localhost") as tls:
                        if tls.getpeercert(binary_form=True) == wanted:
                            return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"nginx on port {port} does not present {certificate} after {timeout} s")

    def stop(self) -> None:
        _LIVE.discard(self)
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        os.killpg(p.pid, signal.SIGTERM)  # the master and its worker
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=5)

    def requests(self) -> list[tuple[int, bool, str]]:
        """(connection number, session resumed, protocol) of each request logged so far."""
        out = []
        try:
            with open(self.access_log) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 3:
                        out.append((int(parts[0]), parts[1] == "r", parts[2]))
        except OSError:
            pass
        return out

    def log_size(self) -> int:
        """Where the access log ends now: ``entries(since=...)`` of what comes after."""
        try:
            return os.path.getsize(self.access_log)
        except OSError:
            return 0

    def entries(self, since: int = 0) -> list[dict]:
        """Every request logged after byte ``since`` of the access log: connection, resumed
        (TLS session resumed; None on the plain listener), tls (protocol or None), method, status,
        seconds (nginx's $request_time: first byte read to last byte sent), protocol (HTTP/1.1,
        HTTP/2.0), bytes in and out, ended (the wall clock, time.time(), when it was logged), uri."""
        out = []
        try:
            with open(self.access_log, "rb") as f:
                f.seek(since)
                text = f.read().decode(errors="replace")
        except OSError:
            return out
        for line in text.splitlines():
            p = line.split(" ", 10)
            if len(p) < 11:
                continue
            out.append({"connection": int(p[0]), "resumed": None if p[1] == "-" else p[1] == "r",
                        "tls": None if p[2] == "-" else p[2], "method": p[3], "status": int(p[4]),
                        "seconds": float(p[5]), "protocol": p[6], "bytes_in": int(p[7]),
                        "bytes_out": int(p[8]), "ended": float(p[9]), "uri": p[10]})
        return out

    def accepted(self) -> int:
        """Connections nginx has accepted since it started, on both listeners (stub_status),
        not counting the ones these questions were asked on."""
        self._status_asked += 1
        with urllib.request.urlopen(self.plain_url + "/.tlsfront/status", timeout=10) as r:
            lines = r.read().decode().splitlines()
        return int(lines[2].split()[0]) - self._status_asked

    def connections(self) -> set[int]:
        """The TLS connections that carried requests."""
        return {c for c, _, _ in self.requests()}

    def __enter__(self) -> "TLSFront":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

"""Credentials (issue 4), end to end: real mounts of fake-gcs-server buckets
whose storage requests must carry a bearer token that bucketfs got from a
local server playing Google's part honestly.

* a token endpoint (threaded http.server on 127.0.0.1) that verifies the
  RS256 JWT of a service-account key generated here, with the key's public
  half, and its claims; or checks an authorized-user refresh-token grant;
* a Compute Engine metadata-server stand-in (GCE_METADATA_HOST) that insists
  on ``Metadata-Flavor: Google``;
* the storage requests go through fakegcs.CountingProxy, which records every
  request's headers, so each one's Authorization header is checked.

No test here reads a real credential: every mount runs with HOME set to an
empty temp dir and without GOOGLE_APPLICATION_CREDENTIALS, CLOUDSDK_CONFIG,
BUCKETFS_ACCESS_TOKEN, GCE_METADATA_HOST (unless the test sets it) or
STORAGE_EMULATOR_HOST. Every mount is undone in a finally (``bucketfs
unmount``, then ``fusermount3 -u -z``, then the process is killed) and every
server is stopped."""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import os
import secrets
import socketserver
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

import fakegcs as F
from conftest import (LOG_DIR, SESSION_TMP, TOOL_ENV, force_unmount, is_mounted, pids_with_arg, run,
                      wait_for)

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
METADATA_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"
# Variables that would let bucketfs find credentials other than the test's.
FOREIGN_VARIABLES = ("GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG", "BUCKETFS_ACCESS_TOKEN",
                     "GCE_METADATA_HOST", "STORAGE_EMULATOR_HOST")


# ---------------------------------------------------------------------------
# keys, JWTs


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    """A fresh 2048-bit key for this module (generating one costs ~0.1 s)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def pem_of(key: rsa.RSAPrivateKey) -> str:
    # PKCS#8 ("BEGIN PRIVATE KEY"), as the Cloud console's key files have it.
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def pem_body(pem: str) -> str:
    return "".join(line for line in pem.splitlines() if line and not line.startswith("-----"))


def verify_jwt(assertion: str, public_key, *, iss: str, aud: str, kid: str | None) -> dict:
    """Checks an RS256 JWT's signature and claims; returns the claims. Raises
    AssertionError with the reason."""
    parts = assertion.split(".")
    assert len(parts) == 3, f"a JWT has 3 parts, got {len(parts)}"
    header = json.loads(b64url_decode(parts[0]))
    claims = json.loads(b64url_decode(parts[1]))
    signature = b64url_decode(parts[2])
    assert header.get("alg") == "RS256", f"alg {header.get('alg')!r}"
    assert header.get("typ", "JWT") == "JWT", f"typ {header.get('typ')!r}"
    if kid is not None:
        assert header.get("kid") == kid, f"kid {header.get('kid')!r}, want {kid!r}"
    try:
        public_key.verify(signature, f"{parts[0]}.{parts[1]}".encode(), padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        raise AssertionError("the JWT's RS256 signature does not verify with the test key") from None
    assert claims.get("iss") == iss, f"iss {claims.get('iss')!r}, want {iss!r}"
    assert claims.get("aud") == aud, f"aud {claims.get('aud')!r}, want {aud!r}"
    scopes = str(claims.get("scope", "")).split()
    assert any("devstorage" in s for s in scopes), f"scope {claims.get('scope')!r} names no devstorage scope"
    iat, exp = claims.get("iat"), claims.get("exp")
    assert isinstance(iat, int) and isinstance(exp, int), f"iat {iat!r} / exp {exp!r} are not integers"
    now = time.time()
    assert now - 300 <= iat <= now + 60, f"iat {iat} is not about now ({int(now)})"
    assert 0 < exp - iat <= 3600, f"exp - iat = {exp - iat}"
    return claims


# ---------------------------------------------------------------------------
# local servers


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int = 0
    note: str = ""  # why a request was refused

    @property
    def form(self) -> dict[str, list[str]]:
        return urllib.parse.parse_qs(self.body.decode(errors="replace"), keep_blank_values=True)


class _Threaded(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class LocalServer:
    """A threaded HTTP/1.1 server on 127.0.0.1:0. ``answer(seen)`` returns
    (status, json-able body), sent with ``headers``; every request is recorded."""

    def __init__(self, answer, headers: dict[str, str] | None = None):
        self.answer = answer
        self.headers = dict(headers or {})
        self._lock = threading.Lock()
        self.seen: list[Seen] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):
                pass

            def _handle(self):
                n = int(self.headers.get("Content-Length") or 0)
                seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                            self.rfile.read(n) if n else b"")
                with server._lock:
                    server.seen.append(seen)
                try:
                    status, body = server.answer(seen)
                except AssertionError as e:  # a check failed: refuse, and remember why
                    seen.note = str(e)
                    status, body = 400, {"error": "invalid_request", "error_description": "test check failed"}
                except Exception as e:  # noqa: BLE001
                    seen.note = f"{type(e).__name__}: {e}"
                    status, body = 500, {"error": "internal"}
                seen.status = status
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in server.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self.httpd = _Threaded(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), name="local-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "LocalServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)

    def requests(self) -> list[Seen]:
        with self._lock:
            return list(self.seen)

    def describe(self) -> str:
        return "\n".join(f"  {s.method} {s.path} -> {s.status} {s.note}" for s in self.requests()) or "  (none)"


@pytest.fixture
def servers():
    """start(server) -> server; all stopped at the end of the test."""
    started: list = []

    def start(s):
        s.start()
        started.append(s)
        return s

    try:
        yield start
    finally:
        for s in started:
            try:
                s.stop()
            except Exception:  # noqa: BLE001
                pass


def token_answer(token: str, expires_in: int = 3600) -> dict:
    return {"access_token": token, "expires_in": expires_in, "token_type": "Bearer"}


class ServiceAccountEndpoint:
    """The token endpoint for one service-account key: verifies each JWT."""

    def __init__(self, key: rsa.RSAPrivateKey, email: str, kid: str):
        self.public_key = key.public_key()
        self.email, self.kid = email, kid
        self.token = "ya29.test-" + secrets.token_urlsafe(32)
        self.assertions: list[str] = []
        self.claims: list[dict] = []
        self.server = LocalServer(self._answer)
        self.token_uri = f"{self.server.url}/token"

    def _answer(self, seen: Seen):
        assert seen.method == "POST", f"method {seen.method}"
        assert seen.path == "/token", f"path {seen.path}"
        ctype = seen.headers.get("content-type", "")
        assert ctype.split(";")[0].strip() == "application/x-www-form-urlencoded", f"content-type {ctype!r}"
        form = seen.form
        assert form.get("grant_type") == [JWT_BEARER], f"grant_type {form.get('grant_type')}"
        assert len(form.get("assertion", [])) == 1, "no single assertion"
        assertion = form["assertion"][0]
        self.assertions.append(assertion)
        self.claims.append(verify_jwt(assertion, self.public_key, iss=self.email, aud=self.token_uri,
                                      kid=self.kid))
        return 200, token_answer(self.token)


class AuthorizedUserEndpoint:
    """The token endpoint for one authorized user: the refresh-token grant."""

    def __init__(self):
        self.client_id = f"{secrets.randbelow(10**12)}-test.apps.googleusercontent.com"
        self.client_secret = "GOCSPX-" + secrets.token_urlsafe(24)
        self.refresh_token = "1//0g" + secrets.token_urlsafe(48)
        self.token = "ya29.user-" + secrets.token_urlsafe(32)
        self.server = LocalServer(self._answer)
        self.token_uri = f"{self.server.url}/token"

    def _answer(self, seen: Seen):
        assert seen.method == "POST" and seen.path == "/token", f"{seen.method} {seen.path}"
        ctype = seen.headers.get("content-type", "")
        assert ctype.split(";")[0].strip() == "application/x-www-form-urlencoded", f"content-type {ctype!r}"
        form = seen.form
        want = {"grant_type": ["refresh_token"], "client_id": [self.client_id],
                "client_secret": [self.client_secret], "refresh_token": [self.refresh_token]}
        for k, v in want.items():
            assert form.get(k) == v, f"{k}: got {form.get(k)!r}"
        return 200, token_answer(self.token)


# ---------------------------------------------------------------------------
# credentials files


def write_secret_file(directory: str, name: str, obj, mode: int = 0o600) -> str:
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(obj if isinstance(obj, str) else json.dumps(obj, indent=2))
    os.chmod(path, mode)  # whatever the umask
    return path


def service_account_json(key: rsa.RSAPrivateKey, email: str, kid: str, token_uri: str) -> dict:
    return {
        "type": "service_account",
        "project_id": "bucketfs-test",
        "private_key_id": kid,
        "private_key": pem_of(key),
        "client_email": email,
        "client_id": "1234567890",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
    }


def authorized_user_json(ep: AuthorizedUserEndpoint) -> dict:
    return {"type": "authorized_user", "client_id": ep.client_id, "client_secret": ep.client_secret,
            "refresh_token": ep.refresh_token, "token_uri": ep.token_uri}


@pytest.fixture
def tmp() -> str:
    d = tempfile.mkdtemp(prefix="cred-", dir=SESSION_TMP)
    os.chmod(d, 0o700)
    return d


# ---------------------------------------------------------------------------
# mounting with credentials (the conftest Mounter always passes --anonymous)


_seq = iter(range(1, 10**6))


@dataclass
class CredMount:
    path: str
    proxy: F.CountingProxy
    log_path: str
    args: list[str]
    result: subprocess.CompletedProcess | None = None

    def p(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def describe(self) -> str:
        reqs = "\n".join(f"  {r}  auth={r.headers.get('Authorization', '(none)')[:20]}..."
                         for r in self.proxy.records()) or "  (none)"
        return f"mount {self.args}\nstorage requests:\n{reqs}\nlog tail:\n{self.log()[-3000:]}"


class Mounter:
    def __init__(self, gcs: F.FakeGCS, binary: str, home: str):
        self.gcs, self.binary, self.home = gcs, binary, home
        self.mounts: list[CredMount] = []
        self.proxies: list[F.CountingProxy] = []

    def env(self, **extra: str) -> dict:
        env = {k: v for k, v in TOOL_ENV.items() if k not in FOREIGN_VARIABLES}
        env["HOME"] = self.home  # no gcloud application-default file there
        env.update(extra)
        return env

    def run(self, bucket: str, *extra: str, env: dict | None = None,
            log_level: str = "debug") -> CredMount:
        """Runs ``bucketfs mount gs://bucket MP --endpoint PROXY *extra`` (in the
        background, as a user would); returns whatever happened."""
        proxy = F.CountingProxy(self.gcs.url).start()
        self.proxies.append(proxy)
        mp = tempfile.mkdtemp(prefix="mnt-", dir=SESSION_TMP)
        log_path = os.path.join(LOG_DIR, f"cred-{next(_seq):03d}-bucketfs.log")
        args = [self.binary, "mount", f"gs://{bucket}", mp, "--endpoint", proxy.url,
                "--log-level", log_level, "--log-file", log_path, *extra]
        m = CredMount(mp, proxy, log_path, args)
        self.mounts.append(m)
        try:
            m.result = subprocess.run(args, env=env or self.env(), capture_output=True, text=True, timeout=90,
                                      stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            pytest.fail(f"bucketfs mount did not return within 90s\n{m.describe()}")
        return m

    def mount(self, bucket: str, *extra: str, env: dict | None = None, log_level: str = "debug") -> CredMount:
        m = self.run(bucket, *extra, env=env, log_level=log_level)
        if m.result.returncode != 0:
            pytest.fail(f"bucketfs mount failed ({m.result.returncode}): {m.result.stderr.strip()}\n{m.describe()}")
        assert is_mounted(m.path), f"bucketfs mount returned 0 but {m.path} is not a FUSE mount\n{m.describe()}"
        return m

    def unmount(self, m: CredMount) -> None:
        """``bucketfs unmount``, then wait for the process to end (its log complete)."""
        run([self.binary, "unmount", m.path], env=self.env())
        assert wait_for(lambda: not is_mounted(m.path), 10), f"{m.path} still mounted"
        assert wait_for(lambda: not pids_with_arg(os.path.realpath(m.path)), 15), \
            f"bucketfs still running after unmount: {pids_with_arg(os.path.realpath(m.path))}"

    def teardown(self) -> None:
        for m in self.mounts:
            force_unmount(m.path)
            if not is_mounted(m.path):
                with contextlib.suppress(OSError):
                    os.rmdir(m.path)
        for p in self.proxies:
            with contextlib.suppress(Exception):
                p.stop()


@pytest.fixture
def cmount(gcs, bucketfs_bin, tmp):
    home = os.path.join(tmp, "home")
    os.makedirs(home)
    m = Mounter(gcs, bucketfs_bin, home)
    try:
        yield m
    finally:
        m.teardown()


@pytest.fixture
def seeded(client, bucket) -> dict:
    """A bucket with one object in a sub-directory and one at the top."""
    body = b"hello through a bearer token\n" * 3
    client.upload(bucket, F.Obj("dir/note.txt", body, content_type="text/plain"))
    client.upload(bucket, F.Obj("top.txt", b"top\n"))
    return {"bucket": bucket, "body": body}


def exercise(m: CredMount, seeded: dict, client) -> None:
    """ls, cat and setfattr on the mount, each checked."""
    assert sorted(os.listdir(m.path)) == ["dir", "top.txt"], m.describe()
    p = run(["ls", "-l", m.p("dir")])
    assert "note.txt" in p.stdout, p.stdout
    p = run(["cat", m.p("dir", "note.txt")], binary=True)
    assert p.stdout == seeded["body"]
    run(["setfattr", "-n", "user.custom.k", "-v", "v", "--", m.p("dir", "note.txt")])
    meta = client.get(seeded["bucket"], "dir/note.txt")
    assert (meta.get("metadata") or {}).get("k") == "v", f"metadata after setfattr: {meta.get('metadata')}"
    kinds = {r.kind for r in m.proxy.records()}
    assert {"list", "media", "patch"} <= kinds, f"expected list, media and patch requests\n{m.describe()}"


def assert_all_bearer(m: CredMount, token: str) -> None:
    records = m.proxy.records()
    assert records, f"no storage request went through the proxy\n{m.describe()}"
    want = f"Bearer {token}"
    bad = [r for r in records if r.headers.get("Authorization") != want
           and {k.lower(): v for k, v in r.headers.items()}.get("authorization") != want]
    assert not bad, (f"{len(bad)} of {len(records)} storage requests lack 'Authorization: Bearer <the token>':\n"
                     + "\n".join(f"  {r} authorization={_auth(r)!r}" for r in bad[:10]))


def _auth(r: F.Record) -> str | None:
    v = {k.lower(): v for k, v in r.headers.items()}.get("authorization")
    return None if v is None else (v[:14] + "..." if len(v) > 14 else v)


def leaked(text: str, secret_strings: dict[str, str], pem: str | None = None) -> list[str]:
    """Which secrets ``text`` holds: whole strings, and any 40-char slice of the
    PEM body (also with line breaks or escaped "\\n" removed from ``text``)."""
    found = [name for name, s in secret_strings.items() if s and s in text]
    if pem:
        body = pem_body(pem)
        flat = text.replace("\\n", "").replace("\\/", "/").replace("\n", "").replace("\r", "").replace(" ", "")
        for i in range(0, len(body) - 40 + 1):
            piece = body[i:i + 40]
            if piece in flat:
                found.append(f"private key PEM slice at {i}: {piece}")
                break
    return found


def assert_no_mount_left(m: CredMount) -> None:
    assert not is_mounted(m.path), f"{m.path} is mounted after a failed mount"
    assert wait_for(lambda: not pids_with_arg(os.path.realpath(m.path)), 10), \
        f"bucketfs process left after a failed mount: {pids_with_arg(os.path.realpath(m.path))}"


# ---------------------------------------------------------------------------
# 1. service account: JWT verified, bearer token on every storage request


def sa_setup(servers, rsa_key, tmp, mode: int = 0o600):
    email = f"bucketfs-test-{secrets.token_hex(3)}@bucketfs-test.iam.gserviceaccount.com"
    kid = secrets.token_hex(20)
    ep = ServiceAccountEndpoint(rsa_key, email, kid)
    servers(ep.server)
    key_json = service_account_json(rsa_key, email, kid, ep.token_uri)
    path = write_secret_file(tmp, "key.json", key_json, mode)
    return ep, path, key_json


def test_service_account_jwt_and_bearer_on_every_request(servers, rsa_key, tmp, cmount, seeded, client):
    ep, key_path, _ = sa_setup(servers, rsa_key, tmp)
    m = cmount.mount(seeded["bucket"], "--credentials", key_path)
    try:
        exercise(m, seeded, client)
        assert_all_bearer(m, ep.token)
        reqs = ep.server.requests()
        assert len(reqs) == 1, f"token endpoint requests (want 1):\n{ep.server.describe()}"
        assert reqs[0].status == 200, f"the token endpoint refused the JWT:\n{ep.server.describe()}"
        assert len(ep.claims) == 1
        assert ep.claims[0]["scope"].split() == ["https://www.googleapis.com/auth/devstorage.read_write"], \
            ep.claims[0]
    finally:
        force_unmount(m.path)


def test_token_endpoint_check_rejects_a_foreign_key(servers, rsa_key, tmp, cmount, seeded):
    """The endpoint really verifies: a key file with another RSA key is refused
    (and the mount says so), so the checks above can fail."""
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    email = "other@bucketfs-test.iam.gserviceaccount.com"
    ep = ServiceAccountEndpoint(rsa_key, email, "kid1")  # verifies with rsa_key's public half
    servers(ep.server)
    path = write_secret_file(tmp, "other.json", service_account_json(other, email, "kid1", ep.token_uri))
    m = cmount.run(seeded["bucket"], "--credentials", path)
    assert m.result.returncode != 0, m.describe()
    reqs = ep.server.requests()
    assert len(reqs) == 1 and "signature" in reqs[0].note, ep.server.describe()
    assert_no_mount_left(m)


def test_short_lived_token_is_refreshed_before_it_expires(servers, rsa_key, tmp, cmount, seeded):
    """expires_in 4 s (shorter than the refresh margin): a new JWT and a new token
    after about half its life, and the storage requests switch to it."""
    email = "short@bucketfs-test.iam.gserviceaccount.com"
    ep = ServiceAccountEndpoint(rsa_key, email, "k-short")
    issued: list[str] = []
    check = ep._answer

    def answer(seen: Seen):
        check(seen)
        issued.append("ya29.short-" + secrets.token_urlsafe(24))
        return 200, token_answer(issued[-1], 4)

    ep.server.answer = answer
    servers(ep.server)
    path = write_secret_file(tmp, "short.json", service_account_json(rsa_key, email, "k-short", ep.token_uri))
    m = cmount.mount(seeded["bucket"], "--credentials", path, "--metadata-ttl", "0", "--negative-ttl", "0")
    try:
        assert sorted(os.listdir(m.path)) == ["dir", "top.txt"]
        assert len(issued) == 1, ep.server.describe()
        assert_all_bearer(m, issued[0])
        time.sleep(4.5)  # past the first token's whole life
        m.proxy.reset()
        assert sorted(os.listdir(m.path)) == ["dir", "top.txt"]
        assert len(issued) >= 2, f"no refresh:\n{ep.server.describe()}"
        assert all(s.status == 200 for s in ep.server.requests()), ep.server.describe()
        assert_all_bearer(m, issued[-1])
        assert len(set(ep.assertions)) == len(ep.assertions), "a JWT was reused"
    finally:
        force_unmount(m.path)


# ---------------------------------------------------------------------------
# 2. no secret in a debug log


@pytest.mark.parametrize("kind,level", [("service_account", "debug"), ("authorized_user", "debug"),
                                        ("service_account", "trace")])
def test_debug_log_holds_no_secret(kind, level, servers, rsa_key, tmp, cmount, seeded, client):
    if kind == "service_account":
        ep, path, key_json = sa_setup(servers, rsa_key, tmp)
        pem = key_json["private_key"]
    else:
        ep = AuthorizedUserEndpoint()
        servers(ep.server)
        path = write_secret_file(tmp, "adc.json", authorized_user_json(ep))
        pem = None
    m = cmount.mount(seeded["bucket"], "--credentials", path, log_level=level)
    try:
        exercise(m, seeded, client)
        assert_all_bearer(m, ep.token)
        cmount.unmount(m)
    finally:
        force_unmount(m.path)
    log = m.log()
    assert f" {level}: " in log, f"no {level} line in the log: is --log-level {level} honoured?\n{log[-2000:]}"
    assert "mounted" in log and "unmounted" in log, log[-2000:]
    secret_strings = {"access token": ep.token}
    if kind == "service_account":
        assert ep.assertions, ep.server.describe()
        for i, a in enumerate(ep.assertions):
            secret_strings[f"JWT assertion {i}"] = a
            secret_strings[f"JWT signature {i}"] = a.rsplit(".", 1)[1]
    else:
        secret_strings["refresh token"] = ep.refresh_token
        secret_strings["client secret"] = ep.client_secret
    bad = leaked(log, secret_strings, pem)
    assert not bad, f"the debug log ({m.log_path}) holds: {bad}"
    assert not leaked(m.result.stdout + m.result.stderr, secret_strings, pem)


# ---------------------------------------------------------------------------
# 3. authorized user


def test_authorized_user_refresh_grant(servers, tmp, cmount, seeded, client):
    ep = AuthorizedUserEndpoint()
    servers(ep.server)
    path = write_secret_file(tmp, "adc.json", authorized_user_json(ep))
    m = cmount.mount(seeded["bucket"], "--credentials", path)
    try:
        exercise(m, seeded, client)
        assert_all_bearer(m, ep.token)
        reqs = ep.server.requests()
        assert len(reqs) == 1 and reqs[0].status == 200, ep.server.describe()
    finally:
        force_unmount(m.path)


def test_authorized_user_via_google_application_credentials(servers, tmp, cmount, seeded):
    ep = AuthorizedUserEndpoint()
    servers(ep.server)
    path = write_secret_file(tmp, "adc.json", authorized_user_json(ep))
    m = cmount.mount(seeded["bucket"], env=cmount.env(GOOGLE_APPLICATION_CREDENTIALS=path))
    try:
        assert sorted(os.listdir(m.path)) == ["dir", "top.txt"]
        assert_all_bearer(m, ep.token)
        assert [s.status for s in ep.server.requests()] == [200], ep.server.describe()
    finally:
        force_unmount(m.path)


# ---------------------------------------------------------------------------
# 4. refused credentials and broken key files: one clear line, no secret, no mount


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"want exactly one line on stderr, got {len(lines)}:\n{stderr}"
    return lines[0]


@pytest.mark.parametrize("kind", ["service_account", "authorized_user"])
def test_token_endpoint_refusal_is_one_clear_line(kind, servers, rsa_key, tmp, cmount, seeded):
    # The endpoint's description echoes what it was sent (as careless servers do):
    # bucketfs must still not print it.
    def refuse(seen: Seen):
        form = seen.form
        echoed = (form.get("assertion") or form.get("refresh_token") or [""])[0]
        return 400, {"error": "invalid_grant", "error_description": f"Invalid grant: {echoed}"}

    server = servers(LocalServer(refuse))
    token_uri = f"{server.url}/token"
    if kind == "service_account":
        key_json = service_account_json(rsa_key, "refused@bucketfs-test.iam.gserviceaccount.com", "k1", token_uri)
        secret_strings = {}
        pem = key_json["private_key"]
    else:
        key_json = {"type": "authorized_user", "client_id": "cid-123.apps.googleusercontent.com",
                    "client_secret": "GOCSPX-" + secrets.token_urlsafe(24),
                    "refresh_token": "1//0g" + secrets.token_urlsafe(48), "token_uri": token_uri}
        secret_strings = {"refresh token": key_json["refresh_token"], "client secret": key_json["client_secret"]}
        pem = None
    path = write_secret_file(tmp, "refused.json", key_json)
    m = cmount.run(seeded["bucket"], "--credentials", path)
    try:
        assert m.result.returncode != 0, m.describe()
        line = one_line(m.result.stderr)
        assert "invalid_grant" in line and "400" in line, line
        assert "token endpoint" in line and token_uri in line, line
        reqs = server.requests()
        assert len(reqs) == 1, f"a 400 is not worth retrying; token endpoint saw:\n{server.describe()}"
        if kind == "service_account":
            secret_strings["JWT assertion"] = reqs[0].form["assertion"][0]
            secret_strings["JWT signature"] = secret_strings["JWT assertion"].rsplit(".", 1)[1]
        bad = leaked(m.result.stderr + m.result.stdout, secret_strings, pem)
        assert not bad, f"stderr holds {bad}: {line}"
        bad = leaked(m.log(), secret_strings, pem)
        assert not bad, f"the log holds {bad}"
        assert not m.proxy.records(), "storage was asked without a token"
        assert_no_mount_left(m)
    finally:
        force_unmount(m.path)


def test_key_file_without_private_key(servers, rsa_key, tmp, cmount, seeded):
    server = servers(LocalServer(lambda seen: (200, token_answer("never"))))
    key_json = service_account_json(rsa_key, "broken@bucketfs-test.iam.gserviceaccount.com", "k2",
                                     f"{server.url}/token")
    del key_json["private_key"]
    path = write_secret_file(tmp, "no-private-key.json", key_json)
    m = cmount.run(seeded["bucket"], "--credentials", path)
    try:
        assert m.result.returncode != 0, m.describe()
        line = one_line(m.result.stderr)
        assert "private_key" in line and path in line, line
        assert not server.requests(), server.describe()
        assert not m.proxy.records()
        assert_no_mount_left(m)
    finally:
        force_unmount(m.path)


def test_key_file_with_a_broken_private_key(servers, rsa_key, tmp, cmount, seeded):
    """A PEM that does not parse: the message names the field and quotes none of it."""
    server = servers(LocalServer(lambda seen: (200, token_answer("never"))))
    key_json = service_account_json(rsa_key, "broken@bucketfs-test.iam.gserviceaccount.com", "k3",
                                    f"{server.url}/token")
    pem = key_json["private_key"]
    lines = pem.splitlines()
    key_json["private_key"] = "\n".join(lines[:5] + lines[7:]) + "\n"  # two lines of the body gone
    path = write_secret_file(tmp, "bad-pem.json", key_json)
    m = cmount.run(seeded["bucket"], "--credentials", path)
    try:
        assert m.result.returncode != 0, m.describe()
        line = one_line(m.result.stderr)
        assert "private_key" in line and path in line, line
        assert not leaked(m.result.stderr, {}, pem), line
        assert not leaked(m.log(), {}, pem), "the log quotes the private key"
        assert not server.requests(), server.describe()
        assert_no_mount_left(m)
    finally:
        force_unmount(m.path)


def test_key_file_not_json(tmp, cmount, seeded):
    secret = "SECRET-" + secrets.token_urlsafe(30)
    path = write_secret_file(tmp, "garbage.json", '{"type": "service_account", "private_key": "' + secret)
    m = cmount.run(seeded["bucket"], "--credentials", path)
    try:
        assert m.result.returncode != 0, m.describe()
        line = one_line(m.result.stderr)
        assert path in line and "JSON" in line, line
        assert secret not in m.result.stderr and secret not in m.log()
        assert_no_mount_left(m)
    finally:
        force_unmount(m.path)


# ---------------------------------------------------------------------------
# 5. metadata server


def test_metadata_server_via_gce_metadata_host(servers, cmount, seeded, client):
    token = "ya29.metadata-" + secrets.token_urlsafe(32)

    def answer(seen: Seen):
        if seen.headers.get("metadata-flavor") != "Google":
            return 403, {"error": "Missing Metadata-Flavor:Google header"}
        if seen.method != "GET" or seen.path.split("?")[0] != METADATA_PATH:
            return 404, {"error": "not found"}
        return 200, token_answer(token, 3599)

    # A metadata server says so in every answer (bucketfs takes none without it).
    md = servers(LocalServer(answer, headers={"Metadata-Flavor": "Google"}))
    # the stand-in is honest: without the header it refuses
    req = urllib.request.Request(md.url + METADATA_PATH)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 403
    md.seen.clear()

    env = cmount.env(GCE_METADATA_HOST=f"127.0.0.1:{md.port}")
    assert "GOOGLE_APPLICATION_CREDENTIALS" not in env and not os.listdir(env["HOME"])
    m = cmount.mount(seeded["bucket"], env=env)
    try:
        exercise(m, seeded, client)
        assert_all_bearer(m, token)
        reqs = md.requests()
        assert len(reqs) == 1, f"metadata server requests (want 1):\n{md.describe()}"
        assert reqs[0].method == "GET" and reqs[0].path.split("?")[0] == METADATA_PATH, md.describe()
        assert reqs[0].status == 200, md.describe()
        assert "metadata server" in m.log(), m.log()[-2000:]
    finally:
        force_unmount(m.path)


def test_no_credentials_anywhere_is_one_clear_line(cmount, seeded):
    """No file, no variable, no metadata server (this is not a Google VM): the
    mount says so instead of sending requests without a token."""
    m = cmount.run(seeded["bucket"])
    try:
        assert m.result.returncode != 0, m.describe()
        line = one_line(m.result.stderr)
        assert "no credentials" in line and "--anonymous" in line, line
        assert not m.proxy.records()
        assert_no_mount_left(m)
    finally:
        force_unmount(m.path)


# ---------------------------------------------------------------------------
# static tokens


def test_access_token_file_and_variable(tmp, cmount, seeded):
    token = "ya29.static-" + secrets.token_urlsafe(32)
    path = write_secret_file(tmp, "token", token + "\n")
    m = cmount.mount(seeded["bucket"], "--access-token-file", path)
    try:
        assert sorted(os.listdir(m.path)) == ["dir", "top.txt"]
        assert_all_bearer(m, token)
    finally:
        force_unmount(m.path)
    token2 = "ya29.env-" + secrets.token_urlsafe(32)
    m2 = cmount.mount(seeded["bucket"], env=cmount.env(BUCKETFS_ACCESS_TOKEN=token2))
    try:
        assert sorted(os.listdir(m2.path)) == ["dir", "top.txt"]
        assert_all_bearer(m2, token2)
        cmount.unmount(m2)
    finally:
        force_unmount(m2.path)
    assert token2 not in m2.log() and token not in m.log()


# ---------------------------------------------------------------------------
# 6. a credentials file others can read: mounts, with a warning


def test_world_readable_key_file_warns(servers, rsa_key, tmp, cmount, seeded):
    ep, path, _ = sa_setup(servers, rsa_key, tmp, mode=0o644)
    assert os.stat(path).st_mode & 0o777 == 0o644
    m = cmount.mount(seeded["bucket"], "--credentials", path, log_level="info")
    try:
        assert sorted(os.listdir(m.path)) == ["dir", "top.txt"]
        assert_all_bearer(m, ep.token)
    finally:
        force_unmount(m.path)
    warnings = [line for line in m.log().splitlines()
                if "warning" in line and path in line and "644" in line and "other users" in line]
    assert len(warnings) >= 1, f"no permission warning in the log:\n{m.log()[-2000:]}"
    assert "chmod 600" in warnings[0], warnings[0]
    assert not m.result.stderr.strip(), f"a successful mount printed: {m.result.stderr}"

    # and a 0600 file draws no such warning
    os.chmod(path, 0o600)
    m2 = cmount.mount(seeded["bucket"], "--credentials", path, log_level="info")
    force_unmount(m2.path)
    assert "other users" not in m2.log(), m2.log()[-2000:]

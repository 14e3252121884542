"""Federated and impersonated credentials (issue 38), end to end: real mounts whose
storage requests must carry the token bucketfs got through loopback stand-ins for
Google's Security Token Service, IAM Credentials API and OAuth token endpoint.

The stand-ins check every request (the RFC 8693 form, the bearer token given to
generateAccessToken, basic client authentication) and issue short-lived tokens
(6 s), so a mount is seen to refresh past an expiry within seconds. The storage
requests go through the CountingProxy of test_credentials, which records their
headers: storage must see only the final token, and x-goog-user-project when a
quota project is named."""

from __future__ import annotations

import base64
import datetime
import json
import os
import secrets
import time

import pytest

from conftest import force_unmount, wait_for
from test_credentials import (LocalServer, Seen, assert_all_bearer, cmount, leaked, seeded,  # noqa: F401
                              servers, tmp, write_secret_file)

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
JWT_TYPE = "urn:ietf:params:oauth:token-type:jwt"
AUDIENCE = "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool/providers/prov"
EMAIL = "target@bucketfs-test.iam.gserviceaccount.com"
STORAGE_SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"
# Seconds every token the stand-ins issue: shorter than the 5-minute refresh
# margin, as the issue's 90 s token is, so each token is refreshed on its next
# use after it expired. CI uses 6 s; BUCKETFS_TOKEN_LIFETIME=90 runs the issue's.
LIFETIME = int(os.environ.get("BUCKETFS_TOKEN_LIFETIME", "6"))


class Google:
    """/sts, /iam/...:generateAccessToken, /oauth (refresh grant), /wf (workforce
    refresh with basic auth), /subject (a subject-token URL) on one server."""

    def __init__(self):
        self.subject_token = "eyJhbGciOiJSUzI1NiJ9." + secrets.token_urlsafe(40) + ".sig"
        self.client_secret = "GOCSPX-" + secrets.token_urlsafe(20)
        self.refresh_token = "1//0g" + secrets.token_urlsafe(40)
        self.sts_issued: list[str] = []
        self.iam_issued: list[str] = []
        self.user_issued: list[str] = []
        self.server = LocalServer(self._answer)

    @property
    def url(self) -> str:
        return self.server.url

    def iam_url(self) -> str:
        return f"{self.url}/iam/v1/projects/-/serviceAccounts/{EMAIL}:generateAccessToken"

    def _issue(self, into: list[str], prefix: str) -> str:
        into.append(f"ya29.{prefix}-{len(into) + 1}-" + secrets.token_urlsafe(16))
        return into[-1]

    def _answer(self, seen: Seen):
        path = seen.path.split("?")[0]
        form = {k: v[0] for k, v in seen.form.items()}
        if path == "/subject":
            assert seen.headers.get("x-fake-header") == "yes", "the file's headers were not sent"
            return 200, {"value": self.subject_token}
        if path == "/sts":
            assert seen.method == "POST", seen.method
            want = {"grant_type": TOKEN_EXCHANGE, "audience": AUDIENCE, "requested_token_type": ACCESS_TOKEN_TYPE,
                    "subject_token_type": JWT_TYPE, "subject_token": self.subject_token}
            for k, v in want.items():
                assert form.get(k) == v, f"{k}: {form.get(k)!r}"
            assert form.get("scope"), "no scope"
            assert "x-goog-user-project" not in seen.headers, "quota project sent to STS"
            return 200, {"access_token": self._issue(self.sts_issued, "sts"), "issued_token_type": ACCESS_TOKEN_TYPE,
                         "token_type": "Bearer", "expires_in": LIFETIME}
        if path.endswith(":generateAccessToken"):
            bearer = seen.headers.get("authorization", "").removeprefix("Bearer ")
            assert bearer in self.sts_issued + self.user_issued, "generateAccessToken without an issued token"
            assert path == f"/iam/v1/projects/-/serviceAccounts/{EMAIL}:generateAccessToken", path
            body = json.loads(seen.body)
            assert body.get("scope") == [STORAGE_SCOPE], body
            expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=LIFETIME)
            seen.note = json.dumps(body.get("delegates"))
            return 200, {"accessToken": self._issue(self.iam_issued, "impersonated"),
                         "expireTime": expiry.strftime("%Y-%m-%dT%H:%M:%SZ")}
        if path == "/oauth":
            assert form.get("grant_type") == "refresh_token" and form.get("refresh_token") == self.refresh_token
            assert form.get("client_secret") == self.client_secret
            return 200, {"access_token": self._issue(self.user_issued, "user"), "expires_in": LIFETIME,
                         "token_type": "Bearer"}
        if path == "/wf":
            basic = "Basic " + base64.b64encode(f"wf-client:{self.client_secret}".encode()).decode()
            assert seen.headers.get("authorization") == basic, "no basic client authentication"
            assert form.get("grant_type") == "refresh_token" and form.get("refresh_token") == self.refresh_token
            return 200, {"access_token": self._issue(self.user_issued, "workforce"), "expires_in": LIFETIME,
                         "token_type": "Bearer"}
        return 404, {"error": "not found"}

    def external_account(self, source: dict, impersonate: bool, **extra) -> dict:
        d = {"type": "external_account", "audience": AUDIENCE, "subject_token_type": JWT_TYPE,
             "token_url": f"{self.url}/sts", "credential_source": source, **extra}
        if impersonate:
            d["service_account_impersonation_url"] = self.iam_url()
        return d

    def secrets(self) -> dict[str, str]:
        found = {"subject token": self.subject_token, "client secret": self.client_secret,
                 "refresh token": self.refresh_token}
        for i, t in enumerate(self.sts_issued + self.iam_issued + self.user_issued):
            found[f"token {i}"] = t
        return found


def final_tokens(g: Google, kind: str) -> list[str]:
    return g.iam_issued if kind in ("file-impersonated", "executable", "impersonated_service_account") else (
        g.user_issued if kind == "external_account_authorized_user" else g.sts_issued)


def credentials_file(g: Google, kind: str, tmp: str) -> tuple[dict, dict]:
    """The file for `kind`, and the environment it needs."""
    token_file = write_secret_file(tmp, "subject-token", g.subject_token + "\n", mode=0o644)
    if kind == "file-impersonated":
        return g.external_account({"file": token_file}, impersonate=True), {}
    if kind == "url-json":
        return g.external_account({"url": f"{g.url}/subject", "headers": {"X-Fake-Header": "yes"},
                                   "format": {"type": "json", "subject_token_field_name": "value"}},
                                  impersonate=False), {}
    if kind == "executable":
        answer = json.dumps({"version": 1, "success": True, "token_type": JWT_TYPE, "id_token": g.subject_token,
                             "expiration_time": int(time.time()) + 3600})
        script = write_secret_file(tmp, "token.sh", f"#!/bin/sh\necho '{answer}'\n", mode=0o700)
        return (g.external_account({"executable": {"command": script, "timeout_millis": 5000}}, impersonate=True),
                {"GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": "1"})
    if kind == "impersonated_service_account":
        return {"type": "impersonated_service_account", "service_account_impersonation_url": g.iam_url(),
                "delegates": [f"projects/-/serviceAccounts/middle@bucketfs-test.iam.gserviceaccount.com"],
                "source_credentials": {"type": "authorized_user", "client_id": "cid", "client_secret": g.client_secret,
                                       "refresh_token": g.refresh_token, "token_uri": f"{g.url}/oauth"}}, {}
    if kind == "external_account_authorized_user":
        return {"type": "external_account_authorized_user", "audience": AUDIENCE, "token_url": f"{g.url}/wf",
                "client_id": "wf-client", "client_secret": g.client_secret, "refresh_token": g.refresh_token}, {}
    raise AssertionError(kind)


def header(r, name: str) -> str | None:
    return {k.lower(): v for k, v in r.headers.items()}.get(name)


@pytest.mark.parametrize("kind", ["file-impersonated", "url-json", "executable", "impersonated_service_account",
                                  "external_account_authorized_user"])
def test_mount_authenticates_and_survives_expiry(kind, servers, tmp, cmount, seeded):  # noqa: F811
    g = Google()
    servers(g.server)
    doc, env = credentials_file(g, kind, tmp)
    path = write_secret_file(tmp, "cred.json", doc)
    m = cmount.mount(seeded["bucket"], "--credentials", path, "--metadata-ttl", "0", "--negative-ttl", "0",
                     env=cmount.env(**env))
    try:
        assert sorted(os.listdir(m.path)) == ["dir", "top.txt"], m.describe()
        bad = [s for s in g.server.requests() if s.status != 200]
        assert not bad, f"a stand-in refused:\n{g.server.describe()}"
        tokens = final_tokens(g, kind)
        assert tokens, g.server.describe()
        assert_all_bearer(m, tokens[-1])  # only the final token reaches storage
        if kind == "impersonated_service_account":
            iam = [s for s in g.server.requests() if s.path.endswith(":generateAccessToken")]
            assert json.loads(iam[0].note) == ["projects/-/serviceAccounts/middle@bucketfs-test.iam.gserviceaccount.com"]
        first = tokens[-1]
        time.sleep(LIFETIME + 1)  # past the token's whole life
        m.proxy.reset()
        with open(m.p("dir", "note.txt"), "rb") as f:
            assert f.read() == seeded["body"]
        assert wait_for(lambda: final_tokens(g, kind)[-1] != first, 10), f"no refresh:\n{g.server.describe()}"
        assert_all_bearer(m, final_tokens(g, kind)[-1])
        assert not [s for s in g.server.requests() if s.status != 200], g.server.describe()
        cmount.unmount(m)
    finally:
        force_unmount(m.path)
    bad = leaked(m.log() + m.result.stdout + m.result.stderr, g.secrets())
    assert not bad, f"the log holds {bad}"


def test_quota_project_on_every_request_and_the_variable_wins(servers, tmp, cmount, seeded):  # noqa: F811
    g = Google()
    servers(g.server)
    token_file = write_secret_file(tmp, "subject-token", g.subject_token)
    path = write_secret_file(tmp, "cred.json", g.external_account({"file": token_file}, impersonate=False,
                                                                   quota_project_id="file-project"))
    for env, want in [({}, "file-project"), ({"GOOGLE_CLOUD_QUOTA_PROJECT": "env-project"}, "env-project")]:
        m = cmount.mount(seeded["bucket"], "--credentials", path, env=cmount.env(**env))
        try:
            assert {"dir", "top.txt"} <= set(os.listdir(m.path))
            with open(m.p("top.txt"), "rb") as f:
                assert f.read() == b"top\n"
            with open(m.p("new.txt"), "wb") as f:
                f.write(b"written\n")
            records = m.proxy.records()
            assert len(records) >= 3, m.describe()
            bad = [r for r in records if header(r, "x-goog-user-project") != want]
            assert not bad, f"{len(bad)} of {len(records)} requests lack x-goog-user-project {want}\n{m.describe()}"
        finally:
            force_unmount(m.path)
    assert not [s for s in g.server.requests() if s.status != 200], g.server.describe()


def test_executable_not_allowed_is_one_clear_line(servers, tmp, cmount, seeded):  # noqa: F811
    g = Google()
    servers(g.server)
    doc, _ = credentials_file(g, "executable", tmp)
    path = write_secret_file(tmp, "cred.json", doc)
    m = cmount.run(seeded["bucket"], "--credentials", path)
    try:
        assert m.result.returncode != 0, m.describe()
        assert "GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES=1" in m.result.stderr, m.result.stderr
        assert not g.server.requests() and not m.proxy.records()
    finally:
        force_unmount(m.path)

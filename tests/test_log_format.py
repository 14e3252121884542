"""End to end (issue 42 item 2): `--log-format json` writes one JSON object a
line, with time, severity, message and component, through a session with
errors (a missing object, a conflicting overwrite, retried 503s, a read
refused with 403, answered EACCES); the session's access token appears in
none of them."""

from __future__ import annotations

import errno
import json
import os
import re
import secrets

import pytest

import fakegcs as F
from conftest import run

SEVERITIES = {"DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL"}
RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def test_json_log_lines_of_a_session_with_errors(client, bucket, mount, tmp_path):
    token = "ya29.json-log-" + secrets.token_urlsafe(32)
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    client.upload(bucket, F.Obj("gone.txt", b"soon deleted"))
    client.upload(bucket, F.Obj("kept.txt", b"x" * 1000))
    client.upload(bucket, F.Obj("denied.txt", b"private"))
    m = mount(bucket, "", "--access-token-file", str(token_file), "--log-format", "json",
              "--log-level", "debug", "--retry-deadline", "3", "--request-timeout", "1", "--read-cache-size", "0",
              anonymous=False)
    # A 404: the object goes behind the mount's back after its lookup.
    run(["stat", m.p("gone.txt")])
    client.delete(bucket, "gone.txt")
    run(["cat", m.p("gone.txt")], check=False)
    # A conflict: another client replaces a file the mount has open for writing.
    # (Whatever errno the writer gets, the lines it logs must parse.)
    try:
        with open(m.p("new.txt"), "w") as f:
            f.write("first")
            f.flush()
            client.upload(bucket, F.Obj("new.txt", b"other client"))
            f.write(" second")
    except OSError:
        pass
    # Retries: downloads answered 503 until the deadline.
    m.proxy.set_fault("503", ["media"])
    try:
        run(["cat", m.p("kept.txt")], check=False)
    finally:
        m.proxy.set_fault(None)
    # A refusal: the service answers the download 403, the reader gets EACCES.
    m.proxy.set_fault("403", ["media"])
    try:
        with pytest.raises(PermissionError):
            with open(m.p("denied.txt"), "rb") as f:
                f.read()
    finally:
        m.proxy.set_fault(None)
    assert any(r.status == 403 for r in m.proxy.records("media")), m.describe()

    with open(m.log_path, encoding="utf-8") as f:
        text = f.read()
    assert token not in text, "the access token is in the log"
    lines = text.splitlines()
    assert len(lines) >= 5, text
    severities = set()
    for line in lines:
        entry = json.loads(line)  # every line is one JSON object
        assert isinstance(entry, dict), line
        assert RFC3339_UTC.match(entry["time"]), line
        assert entry["severity"] in SEVERITIES, line
        assert isinstance(entry["message"], str) and entry["message"], line
        assert entry["component"] == "bucketfs", line
        severities.add(entry["severity"])
    messages = "\n".join(json.loads(line)["message"] for line in lines)
    assert "mounted gs://" in messages, messages
    assert "retrying" in messages, messages  # the 503s were retried, and said so
    # The 403, logged once where it left the filesystem as EACCES ("Permission denied").
    denied = [e for e in map(json.loads, lines)
              if e["severity"] == "ERROR" and "denied.txt" in e["message"] and "access denied" in e["message"]]
    assert len(denied) == 1, messages
    assert os.strerror(errno.EACCES) in denied[0]["message"], denied
    assert {"DEBUG", "INFO", "WARNING"} <= severities, severities


def test_unknown_log_format_is_one_line_and_fails(mount, bucket):
    mp = mount.new_mountpoint()
    r = mount.try_mount(f"gs://{bucket}", mp, "--log-format", "xml", endpoint=mount.gcs.url)
    assert r.returncode != 0
    assert "--log-format" in r.stderr and "xml" in r.stderr, r.stderr
    assert not os.path.ismount(mp)

"""Mounts over TLS (an nginx front with a private CA, scripts/tlsfront.py):
--ca-file and SSL_CERT_FILE trust, certificate errors that fail the mount at
once with one line naming the problem, and connection reuse."""

from __future__ import annotations

import errno
import hashlib
import os
import time

import pytest

import fakegcs as F
from conftest import is_mounted, run, start_tls_front, tls_certificates, TOOL_ENV


def test_a_mount_over_tls_lists_reads_writes_and_removes(mount, bucket, client):
    client.upload(bucket, "hello.txt", b"hello over TLS\n")
    m = mount(bucket, tls=True)
    assert m.front is not None
    assert os.listdir(m.path) == ["hello.txt"]
    with open(m.p("hello.txt"), "rb") as f:
        assert f.read() == b"hello over TLS\n"
    data = os.urandom(40 << 20)
    with open(m.p("big.bin"), "wb") as f:
        f.write(data)
    got = client.get(bucket, "big.bin")
    assert int(got["size"]) == len(data)
    assert client.download(bucket, "big.bin") == data
    with open(m.p("big.bin"), "rb") as f:
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(data).digest()
    os.remove(m.p("big.bin"))
    assert not client.exists(bucket, "big.bin")
    assert {protocol for _, _, protocol in m.front.requests()} <= {"TLSv1.2", "TLSv1.3"}
    assert m.front.requests(), "nothing went through the TLS front"


@pytest.mark.parametrize("certificate, problem", [
    ("untrusted", "is not trusted (unknown issuer); --ca-file names a CA bundle"),
    ("wrong-name", "does not name localhost (name mismatch)"),
    ("expired", "has expired (not valid after 2021-01-01 00:00:00 UTC)"),
])
def test_a_refused_certificate_fails_the_mount_at_once(mount, bucket, gcs, certificate, problem):
    front = start_tls_front(gcs.url, certificate)
    try:
        mp = mount.new_mountpoint()
        start = time.monotonic()
        p = mount.try_mount(f"gs://{bucket}", mp, "--ca-file", tls_certificates().ca, endpoint=front.url)
        took = time.monotonic() - start
    finally:
        front.stop()
    assert p.returncode != 0
    assert took < 5, f"took {took:.1f} s"
    lines = p.stderr.strip().splitlines()
    assert lines == [f"bucketfs: TLS: certificate for localhost:{front.port} {problem}"], p.stderr
    assert not is_mounted(mp)


def test_ssl_cert_file_is_trusted_in_place_of_ca_file(mount, bucket, gcs, client):
    client.upload(bucket, "a.txt", b"a\n")
    front = start_tls_front(gcs.url)
    mount.fronts.append(front)
    mp = mount.new_mountpoint()
    p = mount.try_mount(f"gs://{bucket}", mp, endpoint=front.url,
                        env={**TOOL_ENV, "SSL_CERT_FILE": tls_certificates().ca})
    assert p.returncode == 0, p.stderr
    assert is_mounted(mp)
    assert os.listdir(mp) == ["a.txt"]
    # Without it (nor --ca-file) the private CA is not trusted.
    other = mount.new_mountpoint()
    p = mount.try_mount(f"gs://{bucket}", other, endpoint=front.url)
    assert p.returncode != 0 and "unknown issuer" in p.stderr, p.stderr


def test_a_missing_ca_file_is_one_line_at_mount(mount, bucket, gcs):
    mp = mount.new_mountpoint()
    start = time.monotonic()
    p = mount.try_mount(f"gs://{bucket}", mp, "--ca-file", "/nonexistent/ca.pem", endpoint=gcs.url)
    assert p.returncode != 0 and time.monotonic() - start < 5
    assert p.stderr.strip() == "bucketfs: TLS: --ca-file /nonexistent/ca.pem: No such file or directory"
    assert not is_mounted(mp)


def test_a_walk_of_500_files_reuses_its_tls_connections(mount, bucket, client):
    client.upload_many(bucket, (F.Obj(f"d{i % 10}/f{i:03d}", b"x%d\n" % i) for i in range(500)))
    m = mount(bucket, tls=True)
    read = 0
    for root, _, files in os.walk(m.path):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                read += len(f.read()) > 0
    assert read == 500
    time.sleep(0.3)  # nginx writes a request's line once it is answered
    requests = m.front.requests()
    connections = {c for c, _, _ in requests}
    assert len(requests) >= 500
    # The mount's connection limit (makeHTTPClient: 64 per host); in practice far fewer.
    assert len(connections) <= 64, f"{len(connections)} TLS connections for {len(requests)} requests"


def test_a_certificate_refused_during_a_mount_is_eio_logged_once_per_host(mount, bucket, client):
    """Issue 41 item 3: during a mount, a certificate the mount does not trust
    (here the front starts presenting one of an unknown CA) gives EIO, not a
    hang or retries to the deadline, and one log line for the host however
    many requests meet it; once the front presents a trusted one again,
    the same mount works."""
    for name in ("a.txt", "b0.txt", "b1.txt", "b2.txt"):
        client.upload(bucket, name, name.encode())
    m = mount(bucket, "", "--metadata-ttl", "0", "--negative-ttl", "0", "--read-cache-size", "0", tls=True)
    assert open(m.p("a.txt"), "rb").read() == b"a.txt"
    certificates = tls_certificates()
    m.front.present(*certificates.pair("untrusted"))
    failures = []
    for name in ("b0.txt", "b1.txt", "b2.txt"):
        start = time.monotonic()
        try:
            with open(m.p(name), "rb") as f:
                f.read()
            failures.append(f"{name} was read through a certificate of an unknown CA")
        except OSError as e:
            if e.errno != errno.EIO:
                failures.append(f"{name}: {e}")
        if time.monotonic() - start > 5:
            failures.append(f"{name} took {time.monotonic() - start:.1f} s to fail")
    assert not failures, "\n".join(failures) + "\n" + m.describe()
    with open(m.log_path, errors="replace") as f:
        named = [line for line in f if f"TLS: certificate for localhost:{m.front.port}" in line]
    assert len(named) == 1 and "is not trusted (unknown issuer)" in named[0], "".join(named) or m.log_tail()
    m.front.present(*certificates.pair("good"))
    assert open(m.p("b0.txt"), "rb").read() == b"b0.txt"

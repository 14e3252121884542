"""End to end (issue 39): every byte that comes down or goes up is checked.

Each case has a mount of its own, through its counting proxy set to flip one
byte in the middle of a body (scripts/corruption.py): of a download's answer
(its x-goog-hash unchanged), or of an upload's media, where the proxy then
refuses bytes that do not match a declared CRC-32C with the service's 400
(the emulators do not: tests/EMULATOR-NOTES.md). What must hold:

- a download corrupted once: ``cat`` gives exactly the object's bytes, or
  EIO; never other bytes with success (and a cat after it, the right ones);
- a download corrupted always: the read fails with EIO; once the fault is
  gone the same mount reads the right bytes (no bad page or cache entry
  survives), and so does a remount with the same --cache-dir;
- an upload corrupted once: close succeeds and the object holds exactly the
  bytes written (through the JSON API: bytes, size and crc32c);
- an upload corrupted always: close fails with EIO, and no object holds
  bytes other than those written.

Downloads run with the defaults and with the read cache off
(--read-cache-size 0); the sizes are the issue's: 1 MiB (one GET of the
whole object), 64 MiB (read ahead in segments); uploads of 100 KiB (one
multipart request), 20 MiB (a resumable session) and 64 MiB (streamed
parts, composed), written with cp and dd. Small retry deadlines keep the
failures quick.
"""

from __future__ import annotations

import errno
import http.client
import json
import os
import subprocess
import tempfile
import urllib.parse

import pytest

import corruption as C
import fakegcs as F
from conftest import SESSION_TMP, run, unmount_and_wait, wait_for
from parts import parts_left

KiB, MiB = 1 << 10, 1 << 20
# An operation gives up within about 4 s; an attempt without a byte for 2 s is abandoned.
QUICK = ("--retry-deadline", "4", "--request-timeout", "2")
CACHES = {"defaults": (), "read-cache-off": ("--read-cache-size", "0")}
DOWNLOADS = {"1MiB": MiB, "64MiB": 64 * MiB}
UPLOADS = {"100KiB-cp": (100 * KiB, "cp"), "20MiB-cp": (20 * MiB, "cp"), "64MiB-dd": (64 * MiB, "dd")}
EIO = b"Input/output error"
# A write of 64 MiB and its close take seconds; failing ones give up within the retry deadline.
WRITE_TIMEOUT = 30


def integrity_mount(mount, bucket: str, *extra: str, cache: str | None = None, mountpoint: str | None = None):
    """A mount with a --cache-dir of its own (or `cache`) and quick failures; returns (mount, cache)."""
    cache = cache or tempfile.mkdtemp(prefix="integrity-", dir=SESSION_TMP)
    return mount(bucket, "", "--cache-dir", cache, *QUICK, *extra, mountpoint=mountpoint), cache


def report(m, last: int = 25) -> str:
    """The mount's command, its last requests and its log's tail."""
    records = m.proxy.records()
    shown = "\n".join(brief(r) for r in records[-last:])
    return (f"mount {m.args}\n{len(records)} requests, the last {min(last, len(records))}:\n{shown}\n"
            f"log tail:\n{m.log_tail(30)}")


def brief(r) -> str:
    """A request in one short line: operation, method, path, range, status."""
    ranged = next((f" [{k}: {v}]" for k, v in r.headers.items() if k.lower() in ("range", "content-range")), "")
    return f"{r.operation:16} {r.method} {r.path}{ranged} -> {r.status}"


def cat(path: str):
    return run(["cat", path], check=False, binary=True, timeout=120)


def differ(got: bytes, want: bytes) -> str:
    if len(got) != len(want):
        return f"{len(got)} bytes, not the object's {len(want)}"
    at = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
    return f"the object's {len(want)} bytes but for offset {at}"


def outcome(r, data: bytes) -> str:
    """What a cat gave: the right bytes, EIO, or something else (a problem)."""
    if r.returncode == 0:
        return "right bytes" if r.stdout == data else f"success with wrong bytes: {differ(r.stdout, data)}"
    if EIO in r.stderr:
        return "EIO"
    return f"failed ({r.returncode}) without EIO: {r.stderr[-300:]!r}"


def crc_of(data: bytes) -> str:
    return C.b64(C.crc32c(data))


def wrong_objects(client, bucket: str, name: str, data: bytes, empty_ok: bool = False) -> list[str]:
    """Objects in the bucket that hold bytes other than those written: `name`
    with anything but `data`, or any other object (a part) whose bytes are not
    a piece of `data`. Parts are deleted after a close returns: waited for.
    `empty_ok`: `name` may be empty, what an earlier close of it stored (dd
    opens its output, moves it onto descriptor 1 and closes the first one:
    that close stores the file as it is then, empty, as every close does)."""
    wait_for(lambda: not parts_left(client, bucket), 15, 0.2)
    items, _ = client.list(bucket, delimiter=None)
    wrong = []
    for item in items:
        stored = client.download(bucket, item["name"])
        if item["name"] == name and empty_ok and stored == b"":
            continue
        if item["name"] == name and stored != data:
            wrong.append(f"{name}: {differ(stored, data)}")
        elif item["name"] != name and stored not in data:
            wrong.append(f"{item['name']}: {len(stored)} bytes that are no piece of those written")
    return wrong


# ---------------------------------------------------------------------------
# downloads


@pytest.mark.parametrize("size", DOWNLOADS.values(), ids=DOWNLOADS.keys())
@pytest.mark.parametrize("options", CACHES.values(), ids=CACHES.keys())
def test_a_download_corrupted_once_gives_the_objects_bytes_or_eio(client, bucket, mount, options, size):
    data = os.urandom(size)
    client.upload(bucket, F.Obj("f.bin", data))
    m, _ = integrity_mount(mount, bucket, *options)
    run(["stat", m.p("f.bin")])
    m.proxy.set_corruption("once", "download")
    first = outcome(cat(m.p("f.bin")), data)
    m.proxy.set_corruption(None, "download")
    assert m.proxy.corruption.counts["download"] == 1, report(m)
    assert first in ("right bytes", "EIO"), f"{first}\n{report(m)}"
    again = outcome(cat(m.p("f.bin")), data)
    assert again == "right bytes", f"after {first}: {again}\n{report(m)}"


@pytest.mark.parametrize("options", CACHES.values(), ids=CACHES.keys())
def test_a_read_while_the_failed_handle_is_still_open_gives_the_objects_bytes(client, bucket, mount, options):
    """The handle that read a changed byte stays open (its reads may still be under
    way in the kernel): another open reads around the page cache meanwhile, and
    once it is closed, the next open drops the pages it left."""
    data = os.urandom(16 * MiB)
    client.upload(bucket, F.Obj("f.bin", data))
    m, _ = integrity_mount(mount, bucket, *options)
    run(["stat", m.p("f.bin")])
    m.proxy.set_corruption("once", "download")
    fd = os.open(m.p("f.bin"), os.O_RDONLY)
    try:
        got, failed = b"", None
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except OSError as e:
                failed = e.errno
                break
            if not chunk:
                break
            got += chunk
        m.proxy.set_corruption(None, "download")
        assert m.proxy.corruption.counts["download"] == 1, report(m)
        assert failed == errno.EIO or got == data, f"the first read: {failed}, {differ(got, data)}\n{report(m)}"
        meanwhile = outcome(cat(m.p("f.bin")), data)
        assert meanwhile == "right bytes", f"while the failed handle is open: {meanwhile}\n{report(m)}"
    finally:
        _close_failing(fd)
    after = outcome(cat(m.p("f.bin")), data)
    assert after == "right bytes", f"after the failed handle closed: {after}\n{report(m)}"


def _close_failing(fd: int) -> None:
    """A close that may fail with EIO (a handle whose bytes did not match); the descriptor is gone either way."""
    try:
        os.close(fd)
    except OSError as e:
        assert e.errno == errno.EIO, e


@pytest.mark.parametrize("size", DOWNLOADS.values(), ids=DOWNLOADS.keys())
@pytest.mark.parametrize("options", CACHES.values(), ids=CACHES.keys())
def test_a_download_corrupted_always_fails_with_eio_and_leaves_nothing_bad(
        client, bucket, mount, bucketfs_bin, options, size):
    data = os.urandom(size)
    client.upload(bucket, F.Obj("f.bin", data))
    m, cache = integrity_mount(mount, bucket, *options)
    run(["stat", m.p("f.bin")])
    m.proxy.set_corruption("always", "download")
    try:
        corrupted = outcome(cat(m.p("f.bin")), data)
    finally:
        m.proxy.set_corruption(None, "download")
    assert m.proxy.corruption.counts["download"] >= 1, report(m)
    problems = [] if corrupted == "EIO" else [f"corrupted always, the read gave {corrupted}"]
    healed = outcome(cat(m.p("f.bin")), data)
    if healed != "right bytes":
        problems.append(f"the fault gone, the same mount's read gave {healed}")
    log = report(m)
    unmount_and_wait(m, bucketfs_bin)
    again, _ = integrity_mount(mount, bucket, *options, cache=cache, mountpoint=m.path)
    remounted = outcome(cat(again.p("f.bin")), data)
    if remounted != "right bytes":
        problems.append(f"a remount with the same --cache-dir read {remounted}")
    assert not problems, "\n".join(problems) + f"\n\nfirst mount:\n{log}\n\nremount:\n{report(again)}"


# ---------------------------------------------------------------------------
# uploads


def write(m, tool: str, source: str, target: str):
    """Copies `source` to `target` through the mount (the close stores it);
    one that does not end within WRITE_TIMEOUT fails the test."""
    args = (["cp", source, target] if tool == "cp"
            else ["dd", f"if={source}", f"of={target}", "bs=1M", "status=none"])
    try:
        return run(args, check=False, timeout=WRITE_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{tool} did not end within {WRITE_TIMEOUT} s (killed)\n{report(m)}")


def write_corrupted(mount, bucket, tmp_path, size: int, tool: str, mode: str):
    """Random bytes written into a fresh mount by `tool` while the proxy corrupts uploads
    (`mode`): the bytes, the mount and the tool's result."""
    data = os.urandom(size)
    source = tmp_path / "source.bin"
    source.write_bytes(data)
    m, _ = integrity_mount(mount, bucket)
    m.proxy.set_corruption(mode, "upload")
    try:
        r = write(m, tool, str(source), m.p("f.bin"))
    finally:
        m.proxy.set_corruption(None, "upload")
    return data, m, r


@pytest.mark.parametrize("size,tool", UPLOADS.values(), ids=UPLOADS.keys())
def test_an_upload_corrupted_once_stores_exactly_the_bytes_written(client, bucket, mount, tmp_path, size, tool):
    data, m, r = write_corrupted(mount, bucket, tmp_path, size, tool, "once")
    assert m.proxy.corruption.counts["upload"] == 1, report(m)
    assert r.returncode == 0, f"{tool} failed: {r.stderr.strip()}\n{report(m)}"
    assert client.exists(bucket, "f.bin"), report(m)
    stored = client.get(bucket, "f.bin")
    assert (int(stored["size"]), stored["crc32c"]) == (size, crc_of(data)), report(m)
    assert not wrong_objects(client, bucket, "f.bin", data), report(m)


@pytest.mark.parametrize("size,tool", UPLOADS.values(), ids=UPLOADS.keys())
def test_an_upload_corrupted_always_fails_with_eio_and_stores_no_wrong_bytes(
        client, bucket, mount, tmp_path, size, tool):
    data, m, r = write_corrupted(mount, bucket, tmp_path, size, tool, "always")
    assert m.proxy.corruption.counts["upload"] >= 1, report(m)
    problems = []
    if r.returncode == 0:
        problems.append(f"{tool} succeeded")
    elif EIO.decode() not in r.stderr:
        problems.append(f"{tool} failed without EIO: {r.stderr.strip()}")
    problems += wrong_objects(client, bucket, "f.bin", data, empty_ok=tool == "dd")
    assert not problems, "\n".join(problems) + f"\n{report(m)}"


# ---------------------------------------------------------------------------
# the proxy itself: what the cases above rely on


def ask(proxy, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def multipart(proxy, bucket: str, name: str, media: bytes, crc: str | None):
    meta = {"name": name, **({"crc32c": crc} if crc else {})}
    body = (b"--B\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n" + json.dumps(meta).encode()
            + b"\r\n--B\r\nContent-Type: application/octet-stream\r\n\r\n" + media + b"\r\n--B--\r\n")
    return ask(proxy, "POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=multipart", body,
               {"Content-Type": "multipart/related; boundary=B"})


def session(proxy, bucket: str, name: str, data: bytes, crc: str | None = None, final_hash: str | None = None):
    """A resumable upload of `data` in two chunks (the first 256 KiB, the rest);
    `crc` declared in the start's metadata, `final_hash` with the last chunk."""
    meta = {"name": name, **({"crc32c": crc} if crc else {})}
    _, headers, _ = ask(proxy, "POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=resumable",
                        json.dumps(meta).encode(), {"Content-Type": "application/json"})
    where = urllib.parse.urlsplit(headers["location"])
    path, cut = f"{where.path}?{where.query}", 256 * KiB
    status, headers, _ = ask(proxy, "PUT", path, data[:cut], {"Content-Range": f"bytes 0-{cut - 1}/{len(data)}"})
    assert status == 308, status
    last = {"Content-Range": f"bytes {cut}-{len(data) - 1}/{len(data)}"}
    if final_hash:
        last["X-Goog-Hash"] = f"crc32c={final_hash}"
    return ask(proxy, "PUT", path, data[cut:], last)


def refused_as_the_service_does(status: int, body: bytes, data: bytes) -> bool:
    error = json.loads(body)["error"]
    return (status == 400 and error["errors"][0]["reason"] == "invalid"
            and error["message"].startswith(f'Provided CRC32C "{crc_of(data)}" doesn\'t match calculated CRC32C'))


def test_the_proxy_flips_the_middle_byte_of_a_download_and_keeps_its_headers(client, bucket, gcs):
    data = os.urandom(MiB)
    client.upload(bucket, F.Obj("f.bin", data))
    with F.CountingProxy(gcs.url) as proxy:
        path = f"/storage/v1/b/{bucket}/o/f.bin?alt=media"
        _, clean, _ = ask(proxy, "GET", path)
        proxy.set_corruption("once", "download")
        # Once: the next answer only; always: every one, whole or ranged.
        for mode, first, last, flipped in (("once", 0, MiB - 1, True), ("once", 0, MiB - 1, False),
                                           ("always", 1000, 300_999, True)):
            if mode == "always":
                proxy.set_corruption("always", "download")
            status, headers, got = ask(proxy, "GET", path, headers={"Range": f"bytes={first}-{last}"})
            want = data[first:last + 1]
            assert status == 206 and headers["x-goog-hash"] == clean["x-goog-hash"]
            assert [i for i in range(len(want)) if got[i] != want[i]] == ([len(want) // 2] if flipped else [])
        assert proxy.corruption.counts["download"] == 2


def test_the_proxy_refuses_uploads_whose_declared_crc32c_does_not_match(client, bucket, gcs):
    media = os.urandom(300 * KiB)
    with F.CountingProxy(gcs.url) as proxy:
        proxy.set_corruption("always", "upload")
        status, _, body = multipart(proxy, bucket, "declared", media, crc_of(media))
        assert refused_as_the_service_does(status, body, media), body
        assert not client.exists(bucket, "declared")
        status, _, body = multipart(proxy, bucket, "undeclared", media, None)
        stored = client.download(bucket, "undeclared")
        assert status == 200 and json.loads(body)["name"] == "undeclared"
        assert [i for i in range(len(media)) if stored[i] != media[i]] == [len(media) // 2]
        # A session: the first chunk flipped, judged by the final chunk's X-Goog-Hash or the start's crc32c.
        proxy.set_corruption("once", "upload")
        status, _, body = session(proxy, bucket, "hashed", media, final_hash=crc_of(media))
        assert refused_as_the_service_does(status, body, media), body
        proxy.set_corruption("once", "upload")
        status, _, body = session(proxy, bucket, "started", media, crc=crc_of(media))
        assert refused_as_the_service_does(status, body, media), body
        assert not client.exists(bucket, "hashed") and not client.exists(bucket, "started")
        assert proxy.corruption.counts["upload"] == 4 and proxy.corruption.refusals == 3
        status, _, _ = session(proxy, bucket, "clean", media, final_hash=crc_of(media))
        assert status == 200 and client.download(bucket, "clean") == media

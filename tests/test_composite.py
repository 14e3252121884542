"""End to end (issue 21, part 3): a file above --composite-upload-threshold
goes up as parts in parallel under .bucketfs-parts/, one compose makes the
object, the parts are deleted (docs/SEMANTICS.md#writes-composite).

A 1 MiB threshold and 1 MiB parts keep the files small. Checked through the
JSON API directly (the emulator, never the mount) and the proxy's records.
fake-gcs-server ignores compose's preconditions and gives composites an
md5Hash (tests/EMULATOR-NOTES.md); the precondition and 412 paths are pinned
in-process (Tests/CloudStorageTests/CompositeUploadTests.swift).
"""

from __future__ import annotations

import os
import subprocess
import time

from conftest import deviates, getfattr_dump, getfattr_value, run, wait_for
from parts import PARTS, close_refused_with_estale, composes, mount_rw, part_uploads, parts_left, upload_name

SMALL = ("--composite-upload-threshold", "1", "--composite-part-size", "1")


def session_starts(m) -> list:
    return [r for r in m.proxy.records()
            if r.path.startswith("/upload/") and r.method == "POST" and "uploadType=resumable" in r.query]


def write_with_xattrs(path: str, data: bytes, xattrs: dict[str, bytes]) -> None:
    """Writes and sets xattrs before close: they go into the one upload."""
    with open(path, "wb") as f:
        f.write(data)
        for name, value in xattrs.items():
            os.setxattr(path, name, value)


def test_large_write_is_parts_then_one_compose_with_every_property(mount, client, bucket):
    m = mount_rw(mount, bucket, *SMALL)
    data = os.urandom((5 << 20) + 123)  # six parts, the last short
    write_with_xattrs(m.p("big.bin"), data, {
        "user.contentType": b"text/plain", "user.cacheControl": b"no-cache",
        "user.contentLanguage": b"en", "user.note": b"hello",
    })
    meta = client.get(bucket, "big.bin")
    assert client.download(bucket, "big.bin") == data
    assert int(meta["size"]) == len(data)
    assert meta["contentType"] == "text/plain"
    assert meta["cacheControl"] == "no-cache"
    assert meta["contentLanguage"] == "en"
    assert meta.get("metadata", {}).get("user.note") == "hello"
    calls = composes(m)
    assert len(calls) == 1, m.describe()
    assert calls[0].params.get("ifGenerationMatch") == ["0"], "a new file: ifGenerationMatch=0"
    parts = part_uploads(m)
    assert len(parts) == 6, m.describe()
    assert all(r.params.get("ifGenerationMatch") == ["0"] for r in parts)
    assert wait_for(lambda: parts_left(client, bucket) == [], 30), "every part deleted"
    # The mount shows what the service stored.
    assert os.path.getsize(m.p("big.bin")) == len(data)
    assert getfattr_dump(m.p("big.bin"))[m.p("big.bin")]["user.crc32c"] == meta["crc32c"]


def test_user_md5hash_mirrors_the_service(mount, client, bucket):
    """The service gives a composite no md5Hash, so user.md5Hash is absent
    there; both emulators compute one (tests/EMULATOR-NOTES.md), so here the
    mount is checked to show exactly what the service stored. Absence is
    pinned in-process (CompositeUploadTests)."""
    m = mount_rw(mount, bucket, *SMALL)
    with open(m.p("c.bin"), "wb") as f:
        f.write(os.urandom(3 << 20))
    assert len(composes(m)) == 1
    md5 = client.get(bucket, "c.bin").get("md5Hash")
    shown = getfattr_value(m.p("c.bin"), "user.md5Hash")
    if md5 is None:
        assert shown.returncode != 0, "user.md5Hash absent"
    else:
        assert shown.stdout.strip() == md5


@deviates("fake-gcs-server", "compose ignores ifGenerationMatch on the destination")
def test_a_file_changed_elsewhere_fails_the_compose_with_estale(mount, client, bucket):
    client.upload(bucket, "race.bin", b"first")
    m = mount_rw(mount, bucket, *SMALL)
    f = open(m.p("race.bin"), "r+b")
    try:
        f.write(os.urandom(3 << 20))
        theirs = client.upload(bucket, "race.bin", b"theirs")
    finally:
        close_refused_with_estale(f)
    assert client.get(bucket, "race.bin")["generation"] == theirs["generation"], "theirs stands"
    assert len(composes(m)) == 1
    assert wait_for(lambda: parts_left(client, bucket) == [], 30), "parts deleted after the 412"


def test_overwrite_keeps_metadata_and_carries_the_generation(mount, client, bucket):
    old = client.upload(bucket, "doc.txt", b"old", content_type="text/markdown",
                        metadata={"firebaseStorageDownloadTokens": "tok-1", "k": "v"})
    m = mount_rw(mount, bucket, *SMALL)
    data = os.urandom(3 << 20)
    with open(m.p("doc.txt"), "r+b") as f:
        f.truncate(0)
        f.write(data)
    meta = client.get(bucket, "doc.txt")
    assert client.download(bucket, "doc.txt") == data
    assert meta["contentType"] == "text/markdown"
    carried = meta.get("metadata", {})
    assert carried.get("firebaseStorageDownloadTokens") == "tok-1" and carried.get("k") == "v", carried
    calls = composes(m)
    assert len(calls) == 1, m.describe()
    assert calls[0].params.get("ifGenerationMatch") == [old["generation"]]
    assert wait_for(lambda: parts_left(client, bucket) == [], 30), parts_left(client, bucket)


def test_threshold_zero_is_one_upload_with_md5hash(mount, client, bucket):
    m = mount_rw(mount, bucket, "--composite-upload-threshold", "0")
    with open(m.p("one.bin"), "wb") as f:
        f.write(os.urandom(3 << 20))
    assert composes(m) == []
    assert len(session_starts(m)) <= 1, m.describe()
    md5 = client.get(bucket, "one.bin")["md5Hash"]
    assert getfattr_value(m.p("one.bin"), "user.md5Hash").stdout.strip() == md5


def test_leftover_parts_are_reported_at_mount_and_removed_by_the_command(mount, client, bucket, gcs,
                                                                          bucketfs_bin):
    old = int(time.time()) - 3 * 86400
    young = int(time.time())
    for name in (f"{old}-aaaaaaaaaa/0000", f"{old}-aaaaaaaaaa/0001", f"{young}-bbbbbbbbbb/0000"):
        client.upload(bucket, PARTS + name, b"part")
    client.upload(bucket, "keep.txt", b"x")
    m = mount_rw(mount, bucket)
    assert wait_for(lambda: "3 part object(s)" in m.log_tail(200), 10), m.log_tail()
    assert f"bucketfs clean-parts gs://{bucket}" in m.log_tail(200)

    clean = [bucketfs_bin, "clean-parts", f"gs://{bucket}", "--endpoint", gcs.url, "--anonymous"]
    done = run(clean)
    assert "deleted 2 part object(s)" in done.stdout and "spared 1" in done.stdout, done.stdout
    assert parts_left(client, bucket) == [PARTS + f"{young}-bbbbbbbbbb/0000"]
    done = run(clean + ["--older-than", "0"])
    assert "deleted 1 part object(s)" in done.stdout, done.stdout
    assert parts_left(client, bucket) == []
    assert client.exists(bucket, "keep.txt")
    bad = subprocess.run([bucketfs_bin, "clean-parts", "gs://"], capture_output=True, text=True)
    assert bad.returncode != 0 and "gs://BUCKET" in bad.stderr, bad.stderr


def test_a_mount_of_a_prefix_keeps_its_parts_inside(mount, client, bucket, gcs, bucketfs_bin):
    old = int(time.time()) - 3 * 86400
    client.upload(bucket, f"sub/{PARTS}{old}-cccccccccc/0000", b"part")
    client.upload(bucket, f"{PARTS}{old}-dddddddddd/0000", b"not this mount's")
    m = mount_rw(mount, bucket, *SMALL, prefix="sub")
    assert wait_for(lambda: "1 part object(s)" in m.log_tail(200), 10), m.log_tail()
    assert f"bucketfs clean-parts gs://{bucket}/sub" in m.log_tail(200)
    data = os.urandom(3 << 20)
    with open(m.p("f.bin"), "wb") as f:
        f.write(data)
    assert client.download(bucket, "sub/f.bin") == data
    assert len(composes(m)) == 1
    assert part_uploads(m) and all(upload_name(r).startswith("sub/" + PARTS) for r in part_uploads(m)), \
        m.describe()
    for r in m.proxy.records("list"):
        assert r.params.get("prefix", [""])[0].startswith("sub/"), str(r)
    done = run([bucketfs_bin, "clean-parts", f"gs://{bucket}/sub", "--endpoint", gcs.url, "--anonymous"])
    assert "deleted 1 part object(s)" in done.stdout, done.stdout
    assert parts_left(client, bucket) == [f"{PARTS}{old}-dddddddddd/0000"], "another prefix's parts untouched"

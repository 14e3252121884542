"""Backups round trip (issue 20): rsync -aX twice both ways, cp -a, tar --xattrs.

A prefix of the bucket is backed up to local disk and restored into a new
prefix; the second run of the same command over an unchanged tree exits 0
and sends no upload and no PATCH. What is restored is checked through the
JSON API: bytes, every writable property, custom keys (the Firebase download
token included) and mtimes.
"""

from __future__ import annotations

import os

import fakegcs as F
from conftest import EMULATOR, run

TOKEN = "firebaseStorageDownloadTokens"
MTIME = "goog-reserved-file-mtime"

TREE = [
    F.Obj("src/a.txt", b"alpha\n", content_type="text/plain", cache_control="no-store",
          metadata={TOKEN: "0d7c7f4e-token-a", "owner": "ana", MTIME: "1700000000"}),
    F.Obj("src/docs/b.json", b'{"b": 1}\n', content_type="application/json", content_language="en",
          metadata={TOKEN: "token-b", MTIME: "1700000100"}),
    F.Obj("src/docs/deep/c.bin", bytes(range(256)) * 40, content_type="application/octet-stream",
          content_disposition="attachment", metadata={"k": "v", MTIME: "1700000200"}),
    F.Obj("src/empty.dat", b"", content_type="application/octet-stream", metadata={MTIME: "1700000300"}),
]
WRITABLE = ("contentType", "cacheControl", "contentDisposition", "contentEncoding", "contentLanguage")


def seed(client, bucket) -> None:
    client.upload_many(bucket, TREE)


def writes(m) -> list:
    """Uploads, patches, copies, moves and deletes the proxy saw."""
    m.proxy.settle()
    return [r for r in m.proxy.records() if r.method not in ("GET", "HEAD")]


def stored_keys(meta: dict) -> dict:
    """Custom metadata as the real service would have it. rsync makes its
    temp file 0600 (stored as goog-reserved-posix-mode) and then chmods it
    to the default 0644, which removes the key with a JSON null; on
    fake-gcs-server a null leaves "" (tests/EMULATOR-NOTES.md, PATCH)."""
    keys = meta.get("metadata", {})
    if EMULATOR == "fake-gcs-server":
        keys = {k: v for k, v in keys.items() if not (k.startswith("goog-reserved-posix-") and v == "")}
    return keys


def assert_restored(client, bucket, prefix: str) -> None:
    for o in TREE:
        name = prefix + o.name[len("src/"):]
        got = client.get(bucket, name)
        src = client.get(bucket, o.name)
        assert client.download(bucket, name) == o.data, name
        for field in WRITABLE:
            assert got.get(field) == src.get(field), (name, field, got.get(field), src.get(field))
        assert stored_keys(got) == src.get("metadata", {}), (name, got.get("metadata"))


def test_rsync_ax_twice_both_ways(client, bucket, mount, tmp_path):
    seed(client, bucket)
    m = mount(bucket)
    local = tmp_path / "backup"
    # The mount to local disk, twice: the second run changes nothing.
    run(["rsync", "-aX", m.p("src") + "/", f"{local}/"])
    assert (local / "docs" / "deep" / "c.bin").read_bytes() == TREE[2].data
    assert os.stat(local / "a.txt").st_mtime == 1700000000
    assert os.getxattr(local / "a.txt", "user.custom." + TOKEN) == b"0d7c7f4e-token-a"
    m.proxy.reset()
    p = run(["rsync", "-aX", "--itemize-changes", m.p("src") + "/", f"{local}/"], check=False)
    assert p.returncode == 0, p.stderr
    assert writes(m) == [], m.describe()

    # Local disk into a new prefix, twice.
    run(["rsync", "-aX", f"{local}/", m.p("restored") + "/"])
    assert_restored(client, bucket, "restored/")
    m.proxy.reset()
    p = run(["rsync", "-aX", f"{local}/", m.p("restored") + "/"], check=False)
    assert p.returncode == 0, p.stderr
    assert writes(m) == [], [(r.method, r.path, r.body) for r in writes(m)][:6]


def test_cp_a_and_tar_xattrs_round_trip(client, bucket, mount, tmp_path):
    seed(client, bucket)
    m = mount(bucket)
    local = tmp_path / "copy"
    run(["cp", "-a", m.p("src"), str(local)])
    p = run(["cp", "-a", f"{local}/.", m.p("copied")], check=False)
    assert p.returncode == 0, p.stderr
    assert_restored(client, bucket, "copied/")
    p = run(["cp", "--preserve=all", "-r", f"{local}/.", m.p("preserved")], check=False)
    assert p.returncode == 0, p.stderr
    assert_restored(client, bucket, "preserved/")

    archive = tmp_path / "tree.tar"
    run(["tar", "--xattrs", "--xattrs-include=user.*", "-cf", str(archive), "-C", m.p("src"), "."])
    os.mkdir(m.p("untarred"))
    p = run(["tar", "--xattrs", "--xattrs-include=user.*", "-xf", str(archive), "-C", m.p("untarred")],
            check=False)
    assert p.returncode == 0, p.stderr
    assert_restored(client, bucket, "untarred/")

"""What tests/test_composite.py and tests/test_streaming.py share: mounts
that write through a stage of their own, and the parts a large upload
leaves under .bucketfs-parts/, seen through the JSON API and the proxy."""

from __future__ import annotations

import errno
import json
import tempfile

from conftest import SESSION_TMP

PARTS = ".bucketfs-parts/"


def mount_rw(mount, bucket, *extra, prefix: str = "", **kw):
    """A mount of the bucket (or of `prefix` in it) with a --cache-dir (its stages) of its own."""
    cache = tempfile.mkdtemp(prefix="cache-", dir=SESSION_TMP)
    return mount(bucket, prefix, "--cache-dir", cache, *extra, **kw)


def parts_left(client, bucket, prefix: str = "") -> list[str]:
    items, _ = client.list(bucket, prefix=prefix + PARTS, delimiter=None)
    return [i["name"] for i in items]


def composes(m) -> list:
    return [r for r in m.proxy.records() if r.method == "POST" and r.path.endswith("/compose")]


def part_uploads(m) -> list:
    """The requests that start each part: a multipart upload, or a resumable session's start."""
    return [r for r in m.proxy.records()
            if r.path.startswith("/upload/") and r.method == "POST" and PARTS in upload_name(r)]


def upload_name(record) -> str:
    """The object an upload request names: in its query (media), its JSON body
    (a resumable session's start) or its multipart body's metadata part."""
    params = record.params
    if "name" in params:
        return params["name"][0]
    body = record.body or b""
    if "uploadType=multipart" in record.query:
        body = body.split(b"\r\n\r\n", 1)[-1].split(b"\r\n--", 1)[0]
    try:
        return json.loads(body or b"{}").get("name", "")
    except ValueError:
        return ""


def close_refused_with_estale(f) -> None:
    """Closes `f`, which must fail with ESTALE (another writer's object won)."""
    try:
        f.close()
        raise AssertionError("close succeeded over another writer's object")
    except OSError as e:
        assert e.errno == errno.ESTALE, e
    finally:
        if not f.closed:
            try:
                f.close()
            except OSError:
                pass

"""End to end (issue 3): object metadata as extended attributes, through the
real getfattr and setfattr on a real mount, cross-checked through the JSON API
directly (the emulator, never the mount).

fake-gcs-server deviates from the real service in ways these tests cannot
paper over (see tests/EMULATOR-NOTES.md); where that matters the test checks
the request bucketfs sent (recorded at the counting proxy), which is what the
client controls, and leaves the exact service behaviour to the in-process
tests:
  * a PATCH that sets a field to JSON null does not remove it: custom keys are
    kept as "" and top-level fields (contentType, cacheControl...) are left
    unchanged;
  * ifMetagenerationMatch is ignored (never 412), and metageneration never
    moves (stays "1");
  * `updated` does not change on PATCH;
  * the PATCH response has another shape than GET: no metageneration, no
    timeCreated ("created" instead), "" for every unset property.
"""

from __future__ import annotations

import errno
import os

import pytest

import fakegcs as F
from conftest import getfattr_dump, getfattr_value, new_bucket_name, run, setfattr

FOREST = "images/forest.jpg"

# xattr -> JSON API field, read-only ones
READ_ONLY = {
    "user.bucket": "bucket",
    "user.generation": "generation",
    "user.metageneration": "metageneration",
    "user.fullPath": "name",
    "user.size": "size",
    "user.timeCreated": "timeCreated",
    "user.updated": "updated",
    "user.md5Hash": "md5Hash",
}


@pytest.fixture
def seeded(client, bucket):
    """A fresh bucket with the seeds' examples (images/forest.jpg ...)."""
    client.upload_many(bucket, F.seed_objects())
    return bucket


def forest_json(client, bucket) -> dict:
    return client.get(bucket, FOREST)


# ---------------------------------------------------------------------------
# reading


def test_getfattr_dump_shows_the_seeds_example(client, seeded, mount):
    m = mount(seeded)
    path = m.p(*FOREST.split("/"))
    # what a user sees, literally
    out = run(["getfattr", "-d", path]).stdout
    assert 'user.contentType="image/jpeg"' in out, out
    assert 'user.cacheControl="public,max-age=300"' in out, out
    assert 'user.custom.location="Yosemite, CA, USA"' in out, out
    assert 'user.custom.activity="Hiking"' in out, out

    x = getfattr_dump(path)[path]
    o = forest_json(client, seeded)
    assert x["user.contentType"] == "image/jpeg"
    assert x["user.cacheControl"] == "public,max-age=300"
    assert x["user.custom.location"] == "Yosemite, CA, USA"
    assert x["user.custom.activity"] == "Hiking"
    assert x["user.bucket"] == seeded
    assert x["user.fullPath"] == FOREST
    assert x["user.name"] == "forest.jpg"
    for name, fld in READ_ONLY.items():
        assert x[name] == str(o[fld]), (name, x.get(name), o[fld])
    # unset optional properties are not listed
    for absent in ("user.contentDisposition", "user.contentEncoding", "user.contentLanguage"):
        assert absent not in x, (absent, x)
    # nothing outside user.* and user.custom.* for the object's own custom keys
    assert {k for k in x if k.startswith("user.custom.")} == {"user.custom.location", "user.custom.activity"}


@pytest.mark.parametrize("name,field", sorted(READ_ONLY.items()) + [("user.contentType", "contentType"),
                                                                    ("user.cacheControl", "cacheControl")])
def test_getfattr_single_value_matches_json(client, seeded, mount, name, field):
    m = mount(seeded)
    path = m.p(*FOREST.split("/"))
    p = getfattr_value(path, name)
    assert p.returncode == 0, p.stderr
    assert p.stdout == str(forest_json(client, seeded)[field])


def test_getfattr_crc32c_storage_class_if_listed(client, seeded, mount):
    """user.crc32c / user.storageClass / user.etag are optional extras; when
    listed they must match the service."""
    m = mount(seeded)
    path = m.p(*FOREST.split("/"))
    x = getfattr_dump(path)[path]
    o = forest_json(client, seeded)
    for name, fld in (("user.crc32c", "crc32c"), ("user.storageClass", "storageClass"), ("user.etag", "etag")):
        if name in x:
            assert x[name] == o[fld]


def test_getfattr_absent_name_is_enodata(seeded, mount):
    m = mount(seeded)
    path = m.p(*FOREST.split("/"))
    for name in ("user.contentLanguage", "user.custom.nope", "user.nonsense", "user.xdg.origin.url"):
        p = getfattr_value(path, name)
        assert p.returncode != 0 and "No such attribute" in p.stderr, (name, p.stderr)
    with pytest.raises(OSError) as e:
        os.getxattr(path, "user.custom.nope")
    assert e.value.errno == errno.ENODATA


# ---------------------------------------------------------------------------
# setting: visible through the JSON API, nothing else changes


def _patches(m):
    return m.proxy.records("patch")


def test_setfattr_content_type_changes_only_that(client, seeded, mount):
    before = forest_json(client, seeded)
    m = mount(seeded)
    path = m.p(*FOREST.split("/"))
    run(["getfattr", "-d", path])
    m.proxy.reset()

    p = setfattr(path, "user.contentType", "text/plain")
    assert p.returncode == 0, p.stderr + m.describe()
    after = forest_json(client, seeded)  # directly from the emulator
    assert after["contentType"] == "text/plain"
    for fld in ("cacheControl", "metadata", "md5Hash", "size", "generation", "crc32c", "timeCreated", "name"):
        assert after.get(fld) == before.get(fld), fld

    patches = _patches(m)
    assert len(patches) == 1, m.describe()
    assert patches[0].json() == {"contentType": "text/plain"}, "the PATCH must carry only that field"

    # the PATCH response refreshed the cache: the new value, with no further request
    m.proxy.reset()
    v = getfattr_value(path, "user.contentType")
    assert v.returncode == 0 and v.stdout == "text/plain", v.stderr
    m.proxy.settle()
    assert m.proxy.counts()["metadata"] == 0 and m.proxy.counts()["list"] == 0, m.describe()


def test_setfattr_new_custom_key(client, seeded, mount):
    before = forest_json(client, seeded)
    m = mount(seeded)
    path = m.p(*FOREST.split("/"))
    p = setfattr(path, "user.custom.newkey", "v1")
    assert p.returncode == 0, p.stderr + m.describe()
    after = forest_json(client, seeded)
    assert after["metadata"] == {**before["metadata"], "newkey": "v1"}
    for fld in ("contentType", "cacheControl", "md5Hash", "size", "generation"):
        assert after.get(fld) == before.get(fld), fld
    assert [r.json() for r in _patches(m)] == [{"metadata": {"newkey": "v1"}}]
    x = getfattr_dump(path)[path]
    assert x["user.custom.newkey"] == "v1"
    assert x["user.custom.location"] == "Yosemite, CA, USA"


def test_setfattr_other_writable_properties(client, seeded, mount):
    m = mount(seeded)
    path = m.p(*FOREST.split("/"))
    values = {"user.cacheControl": ("cacheControl", "no-store"),
              "user.contentDisposition": ("contentDisposition", 'attachment; filename="forest.jpg"'),
              "user.contentEncoding": ("contentEncoding", "identity"),
              "user.contentLanguage": ("contentLanguage", "en")}
    for name, (fld, v) in values.items():
        p = setfattr(path, name, v)
        assert p.returncode == 0, (name, p.stderr)
    o = forest_json(client, seeded)
    for name, (fld, v) in values.items():
        assert o[fld] == v, fld
    assert [r.json() for r in _patches(m)] == [{fld: v} for fld, v in values.values()]


def test_setfattr_remove_custom_key_sends_null(client, seeded, mount):
    m = mount(seeded)
    path = m.p(*FOREST.split("/"))
    p = setfattr(path, "user.custom.location", remove=True)
    assert p.returncode == 0, p.stderr + m.describe()
    assert [r.json() for r in _patches(m)] == [{"metadata": {"location": None}}], m.describe()
    after = forest_json(client, seeded)
    # The real service deletes the key; fake-gcs-server keeps it as "".
    assert after["metadata"].get("location", "") == ""
    assert after["metadata"]["activity"] == "Hiking"
    assert after["contentType"] == "image/jpeg"
    # Through the mount the key is gone, or (echoing the emulator's "") empty.
    v = getfattr_value(path, "user.custom.location")
    assert (v.returncode != 0 and "No such attribute" in v.stderr) or v.stdout == "", (v.returncode, v.stdout)


def test_setfattr_remove_standard_property_sends_null(client, seeded, mount):
    m = mount(seeded)
    path = m.p(*FOREST.split("/"))
    p = setfattr(path, "user.cacheControl", remove=True)
    assert p.returncode == 0, p.stderr + m.describe()
    # fake-gcs-server ignores a top-level null (keeps the value): check the request.
    assert [r.json() for r in _patches(m)] == [{"cacheControl": None}], m.describe()


def test_setfattr_remove_absent_is_enodata(seeded, mount):
    m = mount(seeded)
    path = m.p(*FOREST.split("/"))
    p = setfattr(path, "user.custom.never-set", remove=True)
    assert p.returncode != 0 and "No such attribute" in p.stderr, p.stderr
    assert not _patches(m)


# ---------------------------------------------------------------------------
# errors


def test_read_only_names_are_accepted_and_ignored(seeded, mount, client):
    """rsync -X and cp -a set every xattr they saw: read-only ones never fail them."""
    m = mount(seeded)
    path = m.p(*FOREST.split("/"))
    for name in sorted(READ_ONLY):
        p = setfattr(path, name, "123")
        assert p.returncode == 0, (name, p.stderr)
        p = setfattr(path, name, remove=True)
        assert p.returncode == 0, (name, p.stderr)
    m.proxy.settle()
    assert not _patches(m), "a read-only property must send nothing"
    shown = getfattr_value(path, "user.generation")
    assert shown.stdout.strip() == str(client.get(seeded, FOREST)["generation"]), shown.stdout
    # user.custom. with no key names nothing: refused.
    p = setfattr(path, "user.custom.", "123")
    assert p.returncode != 0 and "Operation not permitted" in p.stderr, p.stderr


def test_other_programs_user_names_are_kept(seeded, mount, client, tmp_path):
    """A downloaded file's user.xdg.* names go in with rsync -aX and come back out unchanged."""
    local = tmp_path / "dl"
    local.mkdir()
    f = local / "page.html"
    f.write_bytes(b"<html></html>")
    os.setxattr(f, "user.xdg.origin.url", b"https://example.com/page.html")
    os.setxattr(f, "user.xdg.referrer.url", b"https://example.com/")
    m = mount(seeded)
    p = run(["rsync", "-aX", f"{local}/", m.p("dl") + "/"], check=False)
    assert p.returncode == 0, p.stderr
    stored = client.get(seeded, "dl/page.html")["metadata"]
    assert stored["user.xdg.origin.url"] == "https://example.com/page.html", stored
    assert stored["user.xdg.referrer.url"] == "https://example.com/", stored
    names = os.listxattr(m.p("dl", "page.html"))
    assert "user.xdg.origin.url" in names and "user.custom.user.xdg.origin.url" not in names, names
    back = tmp_path / "back"
    p = run(["rsync", "-aX", m.p("dl") + "/", f"{back}/"], check=False)
    assert p.returncode == 0, p.stderr
    assert os.getxattr(back / "page.html", "user.xdg.origin.url") == b"https://example.com/page.html"
    assert os.getxattr(back / "page.html", "user.xdg.referrer.url") == b"https://example.com/"


@pytest.mark.parametrize("name", sorted(READ_ONLY) + ["user.name"])
def test_the_option_makes_read_only_names_eperm(seeded, mount, name):
    m = mount(seeded, "", "--refuse-read-only-xattrs")
    path = m.p(*FOREST.split("/"))
    p = setfattr(path, name, "123")
    assert p.returncode != 0 and "Operation not permitted" in p.stderr, (name, p.stderr)
    p = setfattr(path, name, remove=True)
    assert p.returncode != 0 and "Operation not permitted" in p.stderr, (name, p.stderr)
    assert not _patches(m), "a read-only property must send nothing"


@pytest.mark.parametrize("name", ["security.bucketfs", "trusted.bucketfs", "trusted.contentType"])
def test_foreign_namespaces_are_enotsup_without_requests(seeded, mount, name):
    m = mount(seeded)
    path = m.p(*FOREST.split("/"))
    run(["getfattr", "-d", path])  # warm
    m.proxy.settle()
    m.proxy.reset()
    p = setfattr(path, name, "v")
    assert p.returncode != 0 and "Operation not supported" in p.stderr, p.stderr
    p = getfattr_value(path, name)
    assert p.returncode != 0 and "Operation not supported" in p.stderr, p.stderr
    p = setfattr(path, name, remove=True)
    assert p.returncode != 0 and "Operation not supported" in p.stderr, p.stderr
    m.proxy.settle()
    assert m.proxy.count() == 0, m.describe()


def test_directories_have_no_metadata(seeded, mount):
    m = mount(seeded)
    d = m.p("images")
    out = run(["getfattr", "-d", "--absolute-names", d]).stdout
    assert out.strip() == "", out
    assert os.listxattr(d) == []
    p = getfattr_value(d, "user.contentType")
    assert p.returncode != 0 and "No such attribute" in p.stderr, p.stderr
    p = setfattr(d, "user.custom.k", "v")
    assert p.returncode != 0 and "Operation not permitted" in p.stderr, p.stderr
    p = setfattr(d, "user.contentType", "text/plain")
    assert p.returncode != 0 and "Operation not permitted" in p.stderr, p.stderr
    assert not _patches(m)


def test_read_only_mount_is_erofs(client, seeded, mount):
    m = mount(seeded, "", "-o", "ro")
    path = m.p(*FOREST.split("/"))
    assert getfattr_dump(path)[path]["user.contentType"] == "image/jpeg"
    p = setfattr(path, "user.contentType", "text/plain")
    assert p.returncode != 0 and "Read-only file system" in p.stderr, p.stderr
    p = setfattr(path, "user.custom.location", remove=True)
    assert p.returncode != 0 and "Read-only file system" in p.stderr, p.stderr
    assert not _patches(m)
    assert forest_json(client, seeded)["contentType"] == "image/jpeg"


def test_custom_metadata_size_limits_are_e2big(client, seeded, mount):
    m = mount(seeded)
    path = m.p(*FOREST.split("/"))
    # 4 KiB per value: 4096 bytes is allowed, 4097 is not
    p = setfattr(path, "user.custom.big", "v" * 4097)
    assert p.returncode != 0 and "Argument list too long" in p.stderr, p.stderr
    assert not _patches(m), "limits are checked before sending"
    p = setfattr(path, "user.custom.big", "v" * 4096)
    assert p.returncode == 0, p.stderr
    assert forest_json(client, seeded)["metadata"]["big"] == "v" * 4096
    # 8 KiB for all keys and values together (~4.1 KiB used now)
    p = setfattr(path, "user.custom.big2", "w" * 3000)  # ~7.2 KiB in all: fine
    assert p.returncode == 0, p.stderr
    m.proxy.reset()
    p = setfattr(path, "user.custom.big3", "x" * 3000)  # ~10.2 KiB: too much
    assert p.returncode != 0 and "Argument list too long" in p.stderr, p.stderr
    assert not _patches(m)
    assert "big3" not in forest_json(client, seeded)["metadata"]


def test_non_utf8_value_is_einval(seeded, mount):
    m = mount(seeded)
    path = m.p(*FOREST.split("/"))
    p = setfattr(path, "user.custom.bin", "0xff00fe")  # setfattr decodes 0x... as hex bytes
    assert p.returncode != 0 and "Invalid argument" in p.stderr, p.stderr
    assert not _patches(m)


def test_xattr_create_and_replace_flags(client, seeded, mount):
    m = mount(seeded)
    path = m.p(*FOREST.split("/"))
    with pytest.raises(OSError) as e:
        os.setxattr(path, "user.custom.location", b"elsewhere", os.XATTR_CREATE)
    assert e.value.errno == errno.EEXIST
    with pytest.raises(OSError) as e:
        os.setxattr(path, "user.custom.absent", b"x", os.XATTR_REPLACE)
    assert e.value.errno == errno.ENODATA
    with pytest.raises(OSError) as e:
        os.setxattr(path, "user.contentLanguage", b"en", os.XATTR_REPLACE)
    assert e.value.errno == errno.ENODATA
    assert not _patches(m), m.describe()

    os.setxattr(path, "user.custom.fresh", b"new", os.XATTR_CREATE)
    os.setxattr(path, "user.custom.activity", b"Climbing", os.XATTR_REPLACE)
    o = forest_json(client, seeded)
    assert o["metadata"]["fresh"] == "new" and o["metadata"]["activity"] == "Climbing"
    assert o["metadata"]["location"] == "Yosemite, CA, USA"
    patches = _patches(m)
    assert [r.json() for r in patches] == [{"metadata": {"fresh": "new"}}, {"metadata": {"activity": "Climbing"}}]
    # the check is enforced with a precondition (fake-gcs-server ignores it, so only the request is checked)
    for r in patches:
        assert r.params.get("ifMetagenerationMatch"), f"flagged set without ifMetagenerationMatch: {r}"


# ---------------------------------------------------------------------------
# the page is the cache


N_META = 1000


@pytest.fixture(scope="module")
def meta_bucket(client):
    name = new_bucket_name()
    client.create_bucket(name)
    client.upload_many(name, [
        F.Obj(f"meta/obj-{i:04d}.txt", b"x" * (i % 13), content_type="text/plain",
              cache_control="private" if i % 2 else None,
              metadata={"idx": str(i), "color": ("red", "green", "blue")[i % 3]})
        for i in range(N_META)], workers=16)
    return name


def test_getfattr_after_ls_l_makes_zero_requests(meta_bucket, mount):
    m = mount(meta_bucket)
    run(["ls", "-l", m.p("meta")])
    m.proxy.settle()
    m.proxy.reset()

    files = [m.p("meta", f"obj-{i:04d}.txt") for i in range(N_META)]
    dump = getfattr_dump(*files)
    m.proxy.settle()
    assert m.proxy.count() == 0, f"{m.proxy.count()} requests after ls -l:\n{m.describe()}"
    assert len(dump) == N_META
    for i, f in enumerate(files):
        x = dump[f]
        assert x["user.custom.idx"] == str(i)
        assert x["user.custom.color"] == ("red", "green", "blue")[i % 3]
        assert x["user.contentType"] == "text/plain"
        assert x["user.size"] == str(i % 13)
        assert ("user.cacheControl" in x) == bool(i % 2)


def test_metadata_change_keeps_mtime(client, seeded, mount):
    """docs/SEMANTICS.md#attributes-times: mtime comes from timeCreated (or goog-reserved-file-mtime), so a
    metadata change leaves it alone. (fake-gcs-server's PATCH response has no
    timeCreated and never moves `updated`, so ctime cannot be shown to move
    here; the in-process tests pin that.)"""
    m = mount(seeded)
    path = m.p(*FOREST.split("/"))
    before = os.stat(path)
    created = forest_json(client, seeded)["timeCreated"]
    from datetime import datetime
    want = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
    assert abs(before.st_mtime - want) < 1.0
    p = setfattr(path, "user.custom.activity", "Climbing")
    assert p.returncode == 0, p.stderr
    after = os.stat(path)
    assert after.st_mtime == before.st_mtime, (before.st_mtime, after.st_mtime)
    assert after.st_size == before.st_size

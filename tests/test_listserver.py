"""bench/listserver.py, the computed namespace the scale benchmarks mount,
answers as the emulator does for the same objects, and a mount of it works.

The comparison runs on a small namespace stored in the session's emulator:
names, sizes, prefixes, offsets and paging must agree, so figures measured on
ten million computed objects are figures of a real listing."""

from __future__ import annotations

import os
import sys
import threading
import urllib.parse
from types import SimpleNamespace

import pytest

import conftest as C
import fakegcs as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import listserver as L  # noqa: E402

FAMILIES = [L.Family("flat/", [23]), L.Family("tree/", [3, 4, 5]), L.Family("zeta/deep/", [2, 2])]


@pytest.fixture(scope="module")
def listing():
    server = L.ListServer(L.Namespace(FAMILIES), bucket="scale")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.stop()
    thread.join(10)


@pytest.fixture(scope="module")
def stored(gcs):
    """The same namespace, stored in the emulator."""
    client = gcs.client()
    bucket = C.new_bucket_name()
    client.create_bucket(bucket)
    ns = L.Namespace(FAMILIES)
    names = [ns.name(i) for i in range(ns.count)]
    client.upload_many(bucket, [F.Obj(n, L.content(n, L.size_of(n)), content_type="text/plain") for n in names])
    return client, bucket, names


def pages(client: F.Client, bucket: str, **params) -> list[dict]:
    out, token = [], None
    while True:
        query = {k: str(v) for k, v in params.items()}
        if token:
            query["pageToken"] = token
        page = client._json("GET", f"/storage/v1/b/{bucket}/o?" + urllib.parse.urlencode(query))
        out.append(page)
        token = page.get("nextPageToken")
        if not token:
            return out


def joined(page_list: list[dict]) -> tuple[list[tuple[str, str]], list[str]]:
    items = [(i["name"], str(i["size"])) for p in page_list for i in p.get("items", [])]
    return items, [x for p in page_list for x in p.get("prefixes", [])]


QUERIES = [
    {},
    {"delimiter": "/"},
    {"prefix": "flat/", "delimiter": "/"},
    {"prefix": "tree/", "delimiter": "/"},
    {"prefix": "tree/d1/", "delimiter": "/"},
    {"prefix": "tree/d1/d2/", "delimiter": "/"},
    {"prefix": "tree/"},
    {"prefix": "tree/d2"},
    {"prefix": "zeta/", "delimiter": "/"},
    {"prefix": "flat/f1", "delimiter": "/"},
    {"prefix": "nothing/", "delimiter": "/"},
    {"prefix": "flat/", "startOffset": "flat/f07", "endOffset": "flat/f15"},
    # A prefix comes from the objects at or after startOffset (storage-testbench
    # and the service); fake-gcs-server drops a prefix that sorts before it.
    pytest.param({"delimiter": "/", "startOffset": "tree/d1/d0/f3"},
                 marks=C.deviates("fake-gcs-server", "drops prefixes that sort before startOffset")),
    {"prefix": "tree/", "delimiter": "/", "endOffset": "tree/d2"},
]


def query_id(query) -> str:
    return ",".join(f"{k}={v}" for k, v in query.items()) or "all"


@pytest.mark.parametrize("query", QUERIES, ids=query_id)
@pytest.mark.parametrize("page_size", [1000, 4])
def test_listing_matches_the_emulator(listing, stored, query, page_size):
    client, bucket, _ = stored
    want = joined(pages(client, bucket, maxResults=page_size, **query))
    got_pages = pages(F.Client(listing.url), "scale", maxResults=page_size, **query)
    assert joined(got_pages) == want
    # The service counts prefixes and items together against maxResults; a
    # page short of it is the last.
    for page in got_pages:
        held = len(page.get("items", [])) + len(page.get("prefixes", []))
        assert held <= page_size
        if "nextPageToken" in page:
            assert held == page_size


def test_objects_and_media_match_the_emulator(listing, stored):
    client, bucket, names = stored
    mine = F.Client(listing.url)
    for name in (names[0], names[17], names[-1], "tree/d2/d3/f4"):
        theirs, ours = client.get(bucket, name), mine.get("scale", name)
        for key in ("name", "size", "contentType"):
            assert str(ours[key]) == str(theirs[key]), key
        assert mine.download("scale", name) == client.download(bucket, name)
        assert mine.download("scale", name, 5, 40) == client.download(bucket, name, 5, 40)
    for missing in ("flat/f23", "tree/d3/d0/f0", "tree/d0", "flat/"):
        assert not mine.exists("scale", missing)
        assert not client.exists(bucket, missing)
    assert mine.bucket_exists("scale") and not mine.bucket_exists("other")


def test_fields_select_what_was_asked(listing):
    page = F.Client(listing.url)._json(
        "GET", "/storage/v1/b/scale/o?prefix=flat/&maxResults=2&fields=nextPageToken,items(name,size)")
    assert set(page) == {"nextPageToken", "items"}
    assert page["items"] == [{"name": "flat/f00", "size": str(L.size_of("flat/f00"))},
                             {"name": "flat/f01", "size": str(L.size_of("flat/f01"))}]


def test_fields_keep_prefixes_and_the_page_token(listing):
    page = F.Client(listing.url)._json(
        "GET", "/storage/v1/b/scale/o?prefix=tree/&delimiter=/&maxResults=2&fields=nextPageToken,prefixes,items(name)")
    assert page == {"nextPageToken": page["nextPageToken"], "prefixes": ["tree/d0/", "tree/d1/"]}


def test_direct_paging_asks_what_the_mount_asks():
    """bench/scale.py's direct paging sends the mount's `fields`, so a page costs the
    server the same on both sides of a ratio."""
    import scale as S
    swift = open(os.path.join(os.path.dirname(__file__), "..", "Sources", "CloudStorage", "Resources.swift")).read()
    # `static let object = "a,b," + "c,d"`: the string literals between it and `static let list`.
    literal = swift.split("enum Fields {", 1)[1].split("static let object =", 1)[1].split("static let list", 1)[0]
    obj = "".join(literal.split('"')[1::2])
    assert S.LIST_FIELDS == f"nextPageToken,prefixes,items({obj})"


def test_a_large_namespace_answers_without_holding_it():
    ns = L.Namespace([L.Family("tree/", [100, 100, 1000]), L.Family("flat/", [1_000_000])])
    assert ns.count == 11_000_000
    assert ns.name(0) == "flat/f000000" and ns.name(999_999) == "flat/f999999"
    assert ns.name(1_000_000) == "tree/d00/d00/f000" and ns.name(ns.count - 1) == "tree/d99/d99/f999"
    assert ns.find("tree/d42/d07/f123") == 1_000_000 + 42 * 100_000 + 7 * 1000 + 123
    assert ns.find("tree/d42/d07/f1234") is None


def test_a_mount_of_the_computed_namespace(listing, bucketfs_bin):
    mounter = C.Mounter(SimpleNamespace(url=listing.url), bucketfs_bin)
    try:
        m = mounter("scale", "", "-o", "ro")
        assert sorted(os.listdir(m.p())) == ["flat", "tree", "zeta"]
        assert len(os.listdir(m.p("flat"))) == 23
        assert sorted(os.listdir(m.p("tree", "d2"))) == ["d0", "d1", "d2", "d3"]
        name = "tree/d1/d3/f4"
        assert os.stat(m.p(*name.split("/"))).st_size == L.size_of(name)
        with open(m.p(*name.split("/")), "rb") as f:
            assert f.read() == L.content(name, L.size_of(name))
        assert m.proxy.count("list") >= 1
    finally:
        mounter.teardown()

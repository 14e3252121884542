"""End to end (issue 42 item 5): every request a mount sends carries
`User-Agent: bucketfs/VERSION`, the version `bucketfs --version` prints (the
one the build took from the file VERSION), and with `--app-name NAME` the name
too; a name that could break a header fails the mount with one line."""

from __future__ import annotations

import os
from pathlib import Path

import fakegcs as F
from conftest import run

VERSION_FILE = Path(__file__).resolve().parent.parent / "VERSION"


def version(binary: str) -> str:
    return run([binary, "--version"]).stdout.strip()


def test_the_binary_is_the_version_file_s(bucketfs_bin):
    assert version(bucketfs_bin) == VERSION_FILE.read_text().strip()


def test_every_request_carries_version_and_app_name(client, bucket, mount, bucketfs_bin):
    client.upload(bucket, F.Obj("a.txt", b"hello"))
    m = mount(bucket, "", "--app-name", "photos-prod", "--read-cache-size", "0")
    assert open(m.p("a.txt"), "rb").read() == b"hello"
    with open(m.p("b.txt"), "w") as f:
        f.write("new")
    os.listdir(m.path)
    records = m.proxy.records()
    kinds = {r.kind for r in records}
    assert {"list", "media"} <= kinds, m.describe()
    want = f"bucketfs/{version(bucketfs_bin)} (photos-prod)"
    for r in records:
        agent = {k.lower(): v for k, v in r.headers.items()}.get("user-agent")
        assert agent == want, (str(r), agent)


def test_without_app_name_the_agent_is_the_version(client, bucket, mount, bucketfs_bin):
    m = mount(bucket, "")
    os.listdir(m.path)
    want = f"bucketfs/{version(bucketfs_bin)}"
    agents = {{k.lower(): v for k, v in r.headers.items()}.get("user-agent") for r in m.proxy.records()}
    assert agents == {want}, agents


def test_an_app_name_that_could_break_a_header_fails_the_mount(mount, bucket):
    mp = mount.new_mountpoint()
    r = mount.try_mount(f"gs://{bucket}", mp, "--app-name", "a\r\nX-Evil: 1", endpoint=mount.gcs.url)
    assert r.returncode != 0
    assert "--app-name" in r.stderr, r.stderr
    assert not os.path.ismount(mp)

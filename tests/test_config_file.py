"""End to end (issue 42 item 1): `--config FILE` holds mount options under
the option table's names; a mount from it behaves as the same options given
as flags (the same `--print-config`, the same requests and errno), a flag
wins over the file, and each kind of error in the file is one line naming
the key and the file, with a non-zero exit."""

from __future__ import annotations

import errno
import os

import pytest

import fakegcs as F
from conftest import run

OPTIONS = {"page-size": "3", "metadata-ttl": "2.5", "read-cache-size": "0", "app-name": "cfg-test"}


def write_config(tmp_path, text: str) -> str:
    path = tmp_path / "bucketfs.yaml"
    path.write_text(text)
    return str(path)


def effective(args: list[str]) -> str:
    r = run([*args, "--print-config"], check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout


def session(m) -> tuple[list[str], list[str], int]:
    """What a little use of the mount shows: the listing, the list pages asked for, a write's errno."""
    names = sorted(os.listdir(m.p("d")))
    pages = sorted({r.params.get("maxResults", ["?"])[0] for r in m.proxy.records("list")})
    try:
        with open(m.p("d", "new.txt"), "w") as f:
            f.write("x")
        err = 0
    except OSError as e:
        err = e.errno
    return names, pages, err


def test_a_mount_from_a_config_file_is_the_mount_from_flags(client, bucket, mount, tmp_path):
    for i in range(7):
        client.upload(bucket, F.Obj(f"d/f{i}", b"x"))
    path = write_config(tmp_path, "".join(f"{k}: {v}\n" for k, v in OPTIONS.items()) + "o: [ro]\n")
    from_file = mount(bucket, "", "--config", path)
    flags = [a for k, v in OPTIONS.items() for a in (f"--{k}", v)] + ["-o", "ro"]
    from_flags = mount(bucket, "", *flags)

    def shown(m):  # the mountpoints and log files differ; the rest must not
        same = {m.path: "/mnt/x", m.log_path: "LOG", m.proxy.url: "http://127.0.0.1:1"}
        args = [same.get(a, a) for a in m.args]
        return effective(args)
    assert shown(from_file) == shown(from_flags)
    assert "page-size: 3\n" in shown(from_file) and 'o: ["ro"]' in shown(from_file)

    a, b = session(from_file), session(from_flags)
    assert a == b, (a, b)
    assert a[1] == ["1", "3"] and a[2] == errno.EROFS, a  # the mount's check asks for 1
    for m in (from_file, from_flags):
        agents = {r.headers.get("User-Agent", "") for r in m.proxy.records()}
        assert all(agent.endswith("(cfg-test)") for agent in agents), agents


def test_a_flag_wins_over_the_file(bucket, mount, tmp_path):
    path = write_config(tmp_path, "page-size: 3\nnegative-ttl: 9\n")
    args = mount.command(f"gs://{bucket}", mount.new_mountpoint(), "--config", path, "--page-size", "7",
                         endpoint=mount.gcs.url, log_path=os.devnull)
    text = effective(args)
    assert "page-size: 7\n" in text and "negative-ttl: 9\n" in text, text


@pytest.mark.parametrize("text,expected", [
    ("page-sise: 5\n", "unknown key 'page-sise'"),
    ("metadata-ttl: soon\n", "key 'metadata-ttl': must be a number"),
    ("anonymous: 3\n", "key 'anonymous': must be true or false"),
    ("page-size: 5000\n", "--page-size must be 1 to 1000 (key 'page-size' in"),
    ("max-connections: 0\n", "--max-connections must be 1 to 1024 (key 'max-connections' in"),
    ("page-size: [\n", "not YAML"),
    ("- page-size\n", "must be a mapping"),
])
def test_each_kind_of_config_error_is_one_line(bucket, mount, tmp_path, text, expected):
    path = write_config(tmp_path, text)
    mp = mount.new_mountpoint()
    r = mount.try_mount(f"gs://{bucket}", mp, "--config", path, endpoint=mount.gcs.url)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert expected in lines[0] and path in lines[0], lines[0]
    assert not os.path.ismount(mp)


def test_a_missing_config_file_is_one_line(bucket, mount, tmp_path):
    mp = mount.new_mountpoint()
    missing = str(tmp_path / "none.yaml")
    r = mount.try_mount(f"gs://{bucket}", mp, "--config", missing, endpoint=mount.gcs.url)
    assert r.returncode != 0 and missing in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr

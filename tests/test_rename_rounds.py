"""End to end (issue 18): `mv dir dir2` then `mv dir2/sub moved`, round after
round, each on a fresh mount of the binary under test (the release build in
CI), with the daemon alive after each and the bucket checked through the
JSON API. The release binary used to die on the first `mv dir dir2` (a Swift
6.3.1 miscompile: Tests/ToolchainCheck)."""

from __future__ import annotations

import os
import tempfile

from conftest import SESSION_TMP, run

ROUNDS = int(os.environ.get("BUCKETFS_RENAME_ROUNDS", "50"))
FILES = ["dir/a.txt", "dir/b.txt", "dir/sub/c.txt", "dir/sub/deeper/d.txt", "dir/sub/e.bin"]


def names(client, bucket) -> list[str]:
    items, _ = client.list(bucket, prefix="", delimiter=None)
    return sorted(i["name"] for i in items)


def test_directory_renames_on_fresh_mounts(mount, bucket, client):
    for name in FILES:
        client.upload(bucket, name, name.encode(), metadata={"origin": name})
    client.upload(bucket, "dir/", b"")
    for round_ in range(ROUNDS):
        # Each round moves the tree back under the name `dir` with the JSON API
        # (not the mount), then renames it through a fresh mount.
        cache = tempfile.mkdtemp(prefix="cache-", dir=SESSION_TMP)
        m = mount(bucket, "", "--cache-dir", cache)
        pids = m.pids
        assert pids, f"round {round_}: no daemon\n{m.describe()}"
        run(["mv", m.p("dir"), m.p("dir2")])
        run(["mv", m.p("dir2/sub"), m.p("moved")])
        for pid in pids:
            assert os.path.exists(f"/proc/{pid}"), f"round {round_}: the daemon died\n{m.describe()}"
        assert sorted(os.listdir(m.p(""))) == ["dir2", "moved"], f"round {round_}\n{m.describe()}"
        with open(m.p("moved/deeper/d.txt"), "rb") as f:
            assert f.read() == b"dir/sub/deeper/d.txt"
        expected = ["dir2/", "dir2/a.txt", "dir2/b.txt", "moved/c.txt", "moved/deeper/d.txt", "moved/e.bin"]
        assert names(client, bucket) == expected, f"round {round_}\n{m.describe()}"
        assert client.get(bucket, "moved/e.bin")["metadata"]["origin"] == "dir/sub/e.bin"
        run([m.args[0], "unmount", m.path])
        # Back to the start for the next round, through the JSON API.
        for item in expected:
            original = "dir/" + item.split("/", 1)[1] if item.startswith("dir2/") else "dir/sub/" + item.split("/", 1)[1]
            meta = client.get(bucket, item)
            client.upload(bucket, original, client.download(bucket, item), metadata=meta.get("metadata", {}))
            client.delete(bucket, item)
        assert names(client, bucket) == sorted(FILES + ["dir/"])

"""End to end (issue 38, part 4): requester pays.

With ``--billing-project P`` every request of a mixed session (ls, stat, cat,
a small and a 40 MiB write, setfattr, mv, rm) names ``userProject=P``: the
recording proxy plays a requester-pays bucket (it answers the service's 400
to any request without it), so one request without it would fail the session
as well as the check. Without the option, the mount of such a bucket fails
with one line naming the option, and nothing is left mounted. The per-kind
pinning (every request kind, clean-parts' list and delete) is in
Tests/CloudStorageTests/UserProjectTests.swift.
"""

from __future__ import annotations

import os
import subprocess

import fakegcs as F
from conftest import LOG_DIR, TOOL_ENV, Mount, getfattr_dump, in_proc_mounts, is_mounted, run, setfattr, wait_for

PROJECT = "billed-project-7"


def requester_pays_mount(mount, bucket: str, *extra: str) -> tuple[Mount, subprocess.CompletedProcess]:
    """`bucketfs mount` through a proxy playing a requester-pays bucket (cleaned up by the fixture)."""
    proxy = F.CountingProxy(mount.gcs.url)
    proxy.require_user_project = PROJECT
    proxy.start()
    mount.proxies.append(proxy)
    mp = mount.new_mountpoint()
    log_path = os.path.join(LOG_DIR, f"billing-{os.path.basename(mp)}.log")
    args = mount.command(f"gs://{bucket}", mp, *extra, endpoint=proxy.url, log_path=log_path)
    m = Mount(mp, bucket, "", proxy, log_path, args)
    mount.mounts.append(m)
    m.result = subprocess.run(args, env=TOOL_ENV, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    return m, m.result


def test_every_request_of_a_session_names_the_billing_project(mount, client, bucket):
    client.upload(bucket, "docs/a.txt", b"alpha\n")
    client.upload(bucket, "docs/b.txt", b"bravo\n")
    # Parts of 8 MiB above a 4 MiB threshold: the 40 MiB file goes up as resumable sessions, composed.
    m, result = requester_pays_mount(mount, bucket, "--billing-project", PROJECT, "--upload-threshold", "4194304")
    assert result.returncode == 0, f"{result.stderr}\n{m.describe()}"
    assert is_mounted(m.path)

    assert sorted(os.listdir(m.p("docs"))) == ["a.txt", "b.txt"]
    assert os.stat(m.p("docs", "a.txt")).st_size == 6
    assert run(["cat", m.p("docs", "b.txt")]).stdout == "bravo\n"
    with open(m.p("small.txt"), "wb") as f:
        f.write(b"small\n")
    big = os.urandom(40 << 20)
    with open(m.p("big.bin"), "wb") as f:
        f.write(big)
    assert setfattr(m.p("small.txt"), "user.contentType", "text/csv").returncode == 0
    run(["mv", m.p("small.txt"), m.p("docs", "moved.txt")])
    run(["rm", m.p("docs", "a.txt")])
    m.proxy.settle(0.5, 10)

    assert client.get(bucket, "docs/moved.txt")["contentType"] == "text/csv"
    assert not client.exists(bucket, "docs/a.txt")
    assert client.download(bucket, "big.bin") == big
    records = m.proxy.records()
    refused = [str(r) for r in records if r.params.get("userProject") != [PROJECT]]
    assert not refused, "requests without userProject:\n" + "\n".join(refused)
    seen = {r.operation for r in records}
    for op in ("list", "metadata", "media", "patch", "delete", "upload-multipart", "upload-start",
               "upload-session", "compose"):
        assert op in seen, f"no {op} request:\n{m.proxy.describe(limit=80)}"
    # mv is one move where the emulator has it (storage-testbench), else a rewrite and a delete.
    assert "move" in seen or "rewrite" in seen, m.proxy.describe(limit=80)
    assert getfattr_dump(m.p("docs", "moved.txt"))[m.p("docs", "moved.txt")]["user.contentType"] == "text/csv"


def test_requester_pays_bucket_without_the_option_fails_the_mount_with_one_line(mount, client, bucket):
    client.upload(bucket, "f.txt", b"x")
    m, result = requester_pays_mount(mount, bucket)
    assert result.returncode != 0, m.describe()
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [f"bucketfs: bucket {bucket} is requester-pays: name a billing project with --billing-project"], \
        result.stderr
    assert wait_for(lambda: not is_mounted(m.path), 5) and not in_proc_mounts(m.path), "nothing left mounted"
    assert m.proxy.records() and all(r.status == 400 for r in m.proxy.records()), m.proxy.describe()


def test_fstab_billing_project_becomes_the_option():
    """mount.fuse.bucketfs -f (fake): fstab's billing_project=P is --billing-project P."""
    helper = os.path.join(os.path.dirname(__file__), "..", "scripts", "mount.fuse.bucketfs")
    p = run(["sh", helper, "gs://b", "/mnt/x", "-f", "-o", f"ro,billing_project={PROJECT},anonymous"])
    assert p.stderr.strip().endswith(f"mount gs://b /mnt/x --billing-project {PROJECT} --anonymous -o ro"), p.stderr


def test_clean_parts_names_the_billing_project(mount, client, bucket, bucketfs_bin):
    """clean-parts lists and deletes with userProject; without it, the same one line."""
    client.upload(bucket, ".bucketfs-parts/1-abc/0", b"part")
    proxy = F.CountingProxy(mount.gcs.url)
    proxy.require_user_project = PROJECT
    proxy.start()
    mount.proxies.append(proxy)
    base = [bucketfs_bin, "clean-parts", f"gs://{bucket}", "--older-than", "0", "--endpoint", proxy.url, "--anonymous"]
    p = run(base, check=False)
    # (its log, on stderr too, has the service's words as well)
    assert p.returncode == 1 and p.stderr.strip().splitlines()[-1] == \
        f"bucketfs: bucket {bucket} is requester-pays: name a billing project with --billing-project", p.stderr
    proxy.reset()
    p = run(base + ["--billing-project", PROJECT], check=False)
    assert p.returncode == 0, p.stderr
    assert not client.exists(bucket, ".bucketfs-parts/1-abc/0")
    assert {r.operation for r in proxy.records()} >= {"list", "delete"}, proxy.describe()
    assert all(r.params.get("userProject") == [PROJECT] for r in proxy.records()), proxy.describe()

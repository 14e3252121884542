"""End to end (issue 2): a real kernel mount of a fake-gcs-server bucket,
driven by ls, stat, find, cat, dd, sha256sum. Requests are counted at a proxy
between bucketfs and the emulator."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import time

import pytest

import fakegcs as F
from conftest import (SESSION_TMP, in_proc_mounts, is_mounted, new_bucket_name, pids_with_arg, run,
                      wait_for)

PAGE = 1000  # bucketfs's default --page-size

# ---------------------------------------------------------------------------
# module data: one bucket with a big directory and a big object, seeded once

N_BIG = 2500
# Long names (~160 bytes) so that `ls -f DIR | head -1` is deterministic: ls
# blocks on the full pipe (64 KiB ≈ 400 names) long before it could ask for
# entry 1,001, whether or not head has exited yet.
BIG_DIR = "big"


def big_name(i: int) -> str:
    return f"{i:05d}-" + "n" * 150 + ".dat"


def big_size(i: int) -> int:
    return i % 97


BLOB = "blobs/random-12MiB.bin"
BLOB_SIZE = 12 * 1024 * 1024 + 12345  # not a multiple of the page size


@pytest.fixture(scope="module")
def big(client):
    name = new_bucket_name()
    client.create_bucket(name)
    client.upload_many(name, [F.Obj(f"{BIG_DIR}/{big_name(i)}", bytes([65 + i % 26]) * big_size(i),
                                    content_type="text/plain") for i in range(N_BIG)], workers=16)
    data = random.Random(1234).randbytes(BLOB_SIZE)
    meta = client.upload(name, F.Obj(BLOB, data))
    return {"bucket": name, "blob": data, "blob_meta": meta}


def ls_names(path: str, *opts: str) -> list[str]:
    return run(["ls", "-1A", *opts, "--", path]).stdout.splitlines()


def ftype(path: str) -> str:
    return run(["stat", "-c", "%F", "--", path]).stdout.strip()


# ---------------------------------------------------------------------------
# names: docs/SEMANTICS.md#names


def test_seeds_listing_example(client, bucket, mount):
    """seeds/004: correctPrefix/happyItem, wrongPrefix//sadItem, lonelyItem/."""
    for name, data in (("correctPrefix/happyItem", b"happy\n"), ("wrongPrefix//sadItem", b"sad\n"),
                       ("lonelyItem/", b"")):
        client.upload(bucket, F.Obj(name, data))
    m = mount(bucket)

    assert sorted(ls_names(m.path)) == ["correctPrefix", "lonelyItem", "wrongPrefix"], m.describe()
    for d in ("correctPrefix", "wrongPrefix", "lonelyItem"):
        assert ftype(m.p(d)) == "directory"
    assert ls_names(m.p("correctPrefix")) == ["happyItem"]
    assert run(["stat", "-c", "%F %s", m.p("correctPrefix", "happyItem")]).stdout.strip() == "regular file 6"
    assert run(["cat", m.p("correctPrefix", "happyItem")]).stdout == "happy\n"
    assert ls_names(m.p("wrongPrefix")) == [], "wrongPrefix//sadItem has an empty component: not listed"
    assert ls_names(m.p("lonelyItem")) == [], "lonelyItem/ is a placeholder, never a file"
    assert run(["stat", m.p("wrongPrefix", "sadItem")], check=False).returncode != 0

    found = run(["find", m.path, "-mindepth", "1", "-printf", "%y %P\n"]).stdout.splitlines()
    assert sorted(found) == ["d correctPrefix", "d lonelyItem", "d wrongPrefix", "f correctPrefix/happyItem"]


def test_placeholder_makes_empty_directory(client, bucket, mount):
    client.upload(bucket, F.Obj("empty/", b""))
    client.upload(bucket, F.Obj("outer/inner/", b""))
    client.upload(bucket, F.Obj("file.txt", b"x"))
    m = mount(bucket)
    assert sorted(ls_names(m.path)) == ["empty", "file.txt", "outer"]
    assert ftype(m.p("empty")) == "directory"
    assert ls_names(m.p("empty")) == []
    assert ls_names(m.p("outer")) == ["inner"]
    assert ftype(m.p("outer", "inner")) == "directory"
    assert ls_names(m.p("outer", "inner")) == []
    # a placeholder is never shown as a file, not even as an empty name
    found = run(["find", m.path, "-mindepth", "1", "-printf", "%y %P\n"]).stdout.splitlines()
    assert sorted(found) == ["d empty", "d outer", "d outer/inner", "f file.txt"]


def test_file_directory_conflict_directory_wins(client, bucket, mount):
    client.upload(bucket, F.Obj("conflict", b"i am a file"))
    client.upload(bucket, F.Obj("conflict/inner", b"inner\n"))
    client.upload(bucket, F.Obj("plain", b"p"))
    m = mount(bucket)
    # cold lookup first (no listing seen yet), then the listing
    assert ftype(m.p("conflict")) == "directory", m.describe()
    names = ls_names(m.path)
    assert sorted(names) == ["conflict", "plain"], "the name must appear once, as a directory"
    assert ftype(m.p("conflict")) == "directory"
    assert ls_names(m.p("conflict")) == ["inner"]
    assert run(["cat", m.p("conflict", "inner")]).stdout == "inner\n"
    # the object stays untouched in the bucket
    assert client.download(bucket, "conflict") == b"i am a file"


def test_file_directory_conflict_listing_first(client, bucket, mount):
    client.upload(bucket, F.Obj("conflict", b"i am a file"))
    client.upload(bucket, F.Obj("conflict/inner", b"inner\n"))
    m = mount(bucket)
    out = run(["ls", "-l", m.path]).stdout.splitlines()
    entries = [line for line in out if line.endswith(" conflict")]
    assert len(entries) == 1 and entries[0].startswith("d"), out


def test_subtree_mount(client, bucket, mount):
    for name in ("some/prefix/a.txt", "some/prefix/dir/b.txt", "some/prefix/dir/c/", "some/other.txt",
                 "some/prefixed-sibling.txt", "some/prefix-dir/x", "top.txt"):
        client.upload(bucket, F.Obj(name, name.encode()))
    m = mount(bucket, "some/prefix")
    found = run(["find", m.path, "-mindepth", "1", "-printf", "%y %P\n"]).stdout.splitlines()
    assert sorted(found) == ["d dir", "d dir/c", "f a.txt", "f dir/b.txt"], m.describe()
    assert run(["cat", m.p("a.txt")]).stdout == "some/prefix/a.txt"
    assert run(["stat", m.p("other.txt")], check=False).returncode != 0
    assert run(["stat", m.p("prefixed-sibling.txt")], check=False).returncode != 0
    # every list call stays inside the sub-tree
    for r in m.proxy.records("list"):
        assert r.params.get("prefix", [""])[0].startswith("some/prefix/"), str(r)


# ---------------------------------------------------------------------------
# listing: docs/SEMANTICS.md#listing, attributes: #attributes


def test_big_directory_lists_all_with_sizes(big, mount):
    m = mount(big["bucket"])
    lines = run(["ls", "-ln", "--time-style=+%s", m.p(BIG_DIR)]).stdout.splitlines()
    assert lines[0].startswith("total")
    entries = {}
    for line in lines[1:]:
        mode, _links, _uid, _gid, size, _t, name = line.split(None, 6)
        entries[name] = (mode, int(size))
    assert len(entries) == N_BIG
    want = {big_name(i): ("-rw-r--r--", big_size(i)) for i in range(N_BIG)}
    assert entries == want

    # stat and find agree
    out = run(["find", m.p(BIG_DIR), "-mindepth", "1", "-printf", "%f %s %y\n"]).stdout.splitlines()
    assert sorted(out) == sorted(f"{big_name(i)} {big_size(i)} f" for i in range(N_BIG))
    for i in (0, 1, 96, 97, 1234, N_BIG - 1):
        st = run(["stat", "-c", "%s %F", m.p(BIG_DIR, big_name(i))]).stdout.strip()
        assert st == f"{big_size(i)} regular {'empty file' if big_size(i) == 0 else 'file'}"
    assert run(["cat", m.p(BIG_DIR, big_name(1234))]).stdout == chr(65 + 1234 % 26) * big_size(1234)


def test_cold_ls_l_costs_ceil_n_over_page_list_calls(big, mount):
    m = mount(big["bucket"])
    run(["stat", m.p(BIG_DIR)])  # resolve the directory itself first
    m.proxy.settle()
    m.proxy.reset()

    out = run(["ls", "-l", m.p(BIG_DIR)]).stdout.splitlines()
    assert len(out) == N_BIG + 1
    m.proxy.settle()
    c = m.proxy.counts()
    assert c["list"] == 3, m.describe()
    assert c["metadata"] == 0 and c["media"] == 0 and c["patch"] == 0, m.describe()
    lists = m.proxy.records("list")
    for i, r in enumerate(lists):
        assert r.params.get("prefix") == [BIG_DIR + "/"], str(r)
        assert r.params.get("delimiter") == ["/"], str(r)
        assert r.params.get("maxResults") == [str(PAGE)], str(r)
        assert ("pageToken" in r.params) == (i > 0), str(r)
    # and a second `ls -l` within the TTL needs nothing
    m.proxy.reset()
    run(["ls", "-l", m.p(BIG_DIR)])
    m.proxy.settle()
    assert m.proxy.counts()["metadata"] == 0 and m.proxy.counts()["media"] == 0, m.describe()


def test_page_size_option(big, mount):
    m = mount(big["bucket"], "", "--page-size", "600")
    run(["stat", m.p(BIG_DIR)])
    m.proxy.settle()
    m.proxy.reset()
    assert len(run(["ls", m.p(BIG_DIR)]).stdout.splitlines()) == N_BIG
    m.proxy.settle()
    assert m.proxy.counts()["list"] == 5, m.describe()  # ceil(2500 / 600)
    assert all(r.params.get("maxResults") == ["600"] for r in m.proxy.records("list"))


@pytest.mark.parametrize("flag", ["-f", "-U"])
def test_unsorted_ls_head_costs_one_list_call(big, mount, flag):
    """docs/SEMANTICS.md#listing-paging: pages are fetched lazily, so the first name costs one list call.

    (`ls -f` / `ls -U` stream names as they are read; a plain sorted `ls`
    must read the whole directory first: see the next test.)"""
    m = mount(big["bucket"])
    run(["stat", m.p(BIG_DIR)])
    m.proxy.settle()
    m.proxy.reset()
    p = run(["bash", "-c", 'set -o pipefail; ls %s -- "$1" | head -1; exit 0' % flag, "_", m.p(BIG_DIR)])
    first = p.stdout.strip()
    assert first in {".", ".."} | {big_name(i) for i in range(N_BIG)}
    m.proxy.settle(0.5)
    assert m.proxy.counts()["list"] == 1, m.describe()
    assert m.proxy.counts()["metadata"] == 0, m.describe()


def test_sorted_ls_head_reads_the_directory_once(big, mount):
    """Plain `ls | head -1` sorts, so ls reads every entry before printing the
    first: ceil(2500/1000) = 3 list calls, and never more."""
    m = mount(big["bucket"])
    run(["stat", m.p(BIG_DIR)])
    m.proxy.settle()
    m.proxy.reset()
    p = run(["bash", "-c", 'ls -- "$1" | head -1', "_", m.p(BIG_DIR)])
    assert p.stdout.strip() == big_name(0)
    m.proxy.settle()
    assert m.proxy.counts()["list"] == 3, m.describe()


def test_rewind_lists_again(big, mount):
    """A rewind to offset 0 starts the listing again: CPython's os.listdir(fd)
    reads the open directory and rewinds it (rewinddir), so a second call on
    the same fd reads it from offset 0 again."""
    m = mount(big["bucket"])
    fd = os.open(m.p(BIG_DIR), os.O_RDONLY | os.O_DIRECTORY)
    try:
        a = os.listdir(fd)
        b = os.listdir(fd)
    finally:
        os.close(fd)
    assert len(a) == N_BIG and sorted(a) == sorted(b), (len(a), len(b))


SMALL_TREE = [f"t/a{i}/b{j}/f{k}" for i in range(3) for j in range(4) for k in range(5)]


@pytest.mark.parametrize("walk", [
    ["find", "{p}"],
    ["du", "-sb", "{p}"],
    ["getfattr", "-R", "-d", "--absolute-names", "{p}"],
])
def test_walk_of_a_small_tree_is_one_flat_listing(client, bucket, mount, walk):
    """docs/SEMANTICS.md#walks-small-trees: the walk's lookup of its directory is one
    list call from `t` to `t0`, flat, one page: it shows that `t` is no object and lists
    the subtree; `t`'s opendir right after takes that page, and the walk (find, du,
    getfattr -R -d) sends nothing more: no listing per directory, no metadata GET per
    file (getfattr -d reads custom keys)."""
    client.upload_many(bucket, [F.Obj(n, b"x" * 100, metadata={"k": n[-2:]}) for n in SMALL_TREE])
    client.upload(bucket, F.Obj("t-other/x", b"y"))  # sorts between `t` and `t/`
    m = mount(bucket)
    m.proxy.settle()
    m.proxy.reset()
    out = run([a.format(p=m.p("t")) for a in walk]).stdout
    m.proxy.settle()
    c = m.proxy.counts()
    assert c["list"] == 1 and c["metadata"] == 0 and c["media"] == 0, m.describe()
    (flat,) = m.proxy.records("list")
    assert flat.params.get("prefix") == ["t"] and flat.params.get("endOffset") == ["t0"], str(flat)
    assert "delimiter" not in flat.params, str(flat)
    assert flat.params.get("maxResults") == [str(PAGE)], str(flat)
    if walk[0] == "find":
        assert len(out.splitlines()) == 1 + 3 + 12 + len(SMALL_TREE)
    elif walk[0] == "du":
        assert int(out.split()[0]) == 100 * len(SMALL_TREE), out  # directories have size 0
    else:
        assert out.count("user.custom.k=") == len(SMALL_TREE), out[:500]


def test_stat_times_and_modes(client, bucket, mount):
    o = client.upload(bucket, F.Obj("d/f.txt", b"12345"))
    m = mount(bucket)
    st = os.stat(m.p("d", "f.txt"))
    assert st.st_size == 5
    assert oct(st.st_mode & 0o7777) == oct(0o644)
    assert oct(os.stat(m.p("d")).st_mode & 0o7777) == oct(0o755)
    assert st.st_uid == os.getuid() and st.st_gid == os.getgid()
    created = _rfc3339(o["timeCreated"])
    assert abs(st.st_mtime - created) < 1.0, (st.st_mtime, o["timeCreated"])
    assert st.st_atime == st.st_mtime
    # inode stable for a path while the mount lives
    assert os.stat(m.p("d", "f.txt")).st_ino == st.st_ino


def test_mount_options_uid_gid_modes(client, bucket, mount):
    client.upload(bucket, F.Obj("d/f.txt", b"12345"))
    m = mount(bucket, "", "-o", "uid=1234,gid=4321,file_mode=0600,dir_mode=0700")
    assert run(["stat", "-c", "%u %g %a", m.p("d", "f.txt")]).stdout.split() == ["1234", "4321", "600"]
    assert run(["stat", "-c", "%u %g %a", m.p("d")]).stdout.split() == ["1234", "4321", "700"]


def test_missing_names_give_enoent(client, bucket, mount):
    client.upload(bucket, F.Obj("a/b", b"x"))
    m = mount(bucket)
    p = run(["cat", m.p("nope.txt")], check=False)
    assert p.returncode != 0 and "No such file or directory" in p.stderr
    p = run(["ls", m.p("a", "nope")], check=False)
    assert p.returncode != 0 and "No such file or directory" in p.stderr


def test_parallel_cold_stats_share_one_list_call(client, bucket, mount):
    """50 threads stat 50 different cold files of one directory at once (the
    kernel sends the lookups in parallel): a burst shares one list call."""
    import threading
    client.upload_many(bucket, [F.Obj(f"burst/f{i:02d}", b"x" * i) for i in range(50)] + [F.Obj("burst/sub/x", b"")])
    m = mount(bucket)
    run(["stat", m.p("burst")])
    m.proxy.settle()
    m.proxy.reset()
    barrier = threading.Barrier(51)
    sizes: dict[int, int] = {}

    def one(i: int) -> None:
        barrier.wait()
        sizes[i] = os.stat(m.p("burst", f"f{i:02d}")).st_size

    threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    barrier.wait()
    for t in threads:
        t.join(30)
    m.proxy.settle()
    assert sizes == {i: i for i in range(50)}
    c = m.proxy.counts()
    # Without sharing: 50 metadata GETs and 50 one-item lists.
    assert c["metadata"] + c["list"] <= 20, m.describe()
    assert os.path.isdir(m.p("burst", "sub")) and not os.path.exists(m.p("burst", "nope"))


def _rfc3339(s: str) -> float:
    from datetime import datetime
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


# ---------------------------------------------------------------------------
# reads: docs/SEMANTICS.md#reads


def test_large_object_reads_back_identical(big, client, mount):
    data, bucket = big["blob"], big["bucket"]
    want = hashlib.sha256(data).hexdigest()
    assert hashlib.sha256(client.download(bucket, BLOB)).hexdigest() == want
    m = mount(bucket, "", "--read-cache-size", "0")  # what is sent: no read served from the cache
    path = m.p(*BLOB.split("/"))
    assert os.path.getsize(path) == BLOB_SIZE
    assert run(["sha256sum", path]).stdout.split()[0] == want
    assert run(["bash", "-c", 'cat -- "$1" | sha256sum', "_", path]).stdout.split()[0] == want
    # every read is a GET of the pinned generation
    gen = big["blob_meta"]["generation"]
    media = m.proxy.records("media")
    assert media, m.describe()
    for r in media:
        assert r.params.get("generation") == [gen], f"read not pinned to generation {gen}: {r}"


def test_large_object_random_offsets_with_dd(big, client, mount):
    data, bucket = big["blob"], big["bucket"]
    m = mount(bucket, "", "--read-cache-size", "0")  # what is sent: no read served from the cache
    path = m.p(*BLOB.split("/"))
    rng = random.Random(99)
    cases = []
    for _ in range(6):  # whole 4 KiB blocks
        count = rng.randint(1, 40)
        skip = rng.randint(0, BLOB_SIZE // 4096 - count)
        cases.append(("bs=4096", f"skip={skip}", f"count={count}", "iflag=fullblock", skip * 4096, count * 4096))
    for _ in range(6):  # odd sizes and offsets, in bytes
        n = rng.choice([1, 7, 333, 4097, 65537, 1_000_003])
        off = rng.randint(0, BLOB_SIZE - n)
        cases.append(("bs=65536", "iflag=skip_bytes,count_bytes,fullblock", f"skip={off}", f"count={n}", off, n))
    tail = BLOB_SIZE - 1000  # across the end: a short read
    cases.append(("bs=4096", "iflag=skip_bytes,count_bytes", f"skip={tail}", "count=8192", tail, 1000))
    cases.append(("bs=4096", "iflag=skip_bytes", f"skip={BLOB_SIZE}", "count=1", BLOB_SIZE, 0))
    for *args, off, n in cases:
        got = run(["dd", f"if={path}", "status=none", *args], binary=True).stdout
        direct = client.download(bucket, BLOB, off, off + n - 1) if n else b""
        assert direct == data[off:off + n]
        assert len(got) == n, f"dd {args}: {len(got)} bytes, want {n}"
        assert got == direct, f"dd {args}: bytes differ from a direct ranged read"
    media = m.proxy.records("media")
    assert media, m.describe()
    for r in media:
        assert any(k.lower() == "range" for k in r.headers), f"read without a Range header: {r}"


# ---------------------------------------------------------------------------
# odd names


UNI = {
    "h\u00e9llo w\u00f6rld \u2603.txt": b"snowman\n",
    "\u65e5\u672c\u8a9e/\u30d5\u30a1\u30a4\u30eb.txt": b"nihongo\n",
    "with space/inner file": b"inner\n",
    "emoji \U0001F389.md": b"party\n",
    "ok.txt": b"ok\n",
    "c" * 255: b"exactly 255 bytes\n",
    "a" * 300 + ".txt": b"too long\n",
    "b" * 300 + "/x": b"too long dir\n",
    "\u00fc" * 150 + "/y": b"300 bytes of UTF-8\n",
}


def test_unicode_space_and_long_names(client, bucket, mount):
    client.upload_many(bucket, [F.Obj("uni/" + k, v) for k, v in UNI.items()])
    m = mount(bucket)
    names = sorted(ls_names(m.p("uni")))
    want = sorted(["h\u00e9llo w\u00f6rld \u2603.txt", "\u65e5\u672c\u8a9e", "with space", "emoji \U0001F389.md",
                   "ok.txt", "c" * 255])
    assert names == want, m.describe()
    for rel, data in UNI.items():
        if any(len(part.encode()) > 255 for part in rel.split("/")):
            assert run(["stat", m.p("uni", rel)], check=False).returncode != 0
            continue
        path = m.p("uni", *rel.split("/"))
        assert run(["stat", "-c", "%s", path]).stdout.strip() == str(len(data))
        assert run(["cat", path], binary=True).stdout == data
    found = run(["find", m.p("uni"), "-mindepth", "1", "-printf", "%y %P\n"]).stdout.splitlines()
    assert "f \u65e5\u672c\u8a9e/\u30d5\u30a1\u30a4\u30eb.txt" in found
    assert "f with space/inner file" in found
    assert not any("aaaa" in f or "bbbb" in f or "\u00fc\u00fc" in f for f in found)


# ---------------------------------------------------------------------------
# command line: README.md, Usage


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"want exactly one line on stderr, got {len(lines)}: {stderr!r}"
    return lines[0]


def test_missing_bucket_one_line_and_nonzero(gcs, mount):
    mp = mount.new_mountpoint()
    p = mount.try_mount(f"gs://no-such-bucket-{os.getpid()}", mp, endpoint=gcs.url)
    assert p.returncode != 0
    _one_line(p.stderr)
    assert not is_mounted(mp)


def test_missing_mountpoint_one_line_and_nonzero(gcs, bucket, mount):
    mp = os.path.join(SESSION_TMP, f"does-not-exist-{os.getpid()}")
    p = mount.try_mount(f"gs://{bucket}", mp, endpoint=gcs.url)
    assert p.returncode != 0
    _one_line(p.stderr)
    assert not os.path.exists(mp) or not is_mounted(mp)


def test_storage_emulator_host_instead_of_endpoint(client, bucket, mount):
    client.upload(bucket, F.Obj("hello.txt", b"hi\n"))
    for how in ("host", "url"):
        m = mount(bucket, via_env=how)
        assert ls_names(m.path) == ["hello.txt"]
        assert m.proxy.count("list") >= 1, "bucketfs did not use STORAGE_EMULATOR_HOST"


def test_sigterm_daemon_leaves_no_stale_mount(client, bucket, mount):
    client.upload(bucket, F.Obj("a.txt", b"a"))
    m = mount(bucket)
    assert ls_names(m.path) == ["a.txt"]
    pids = m.pids
    assert pids, "cannot find the bucketfs process serving the mount"
    run(["kill", "-TERM", *map(str, pids)])
    assert wait_for(lambda: not in_proc_mounts(m.path), 10), "mount still in /proc/mounts 10 s after SIGTERM"
    assert wait_for(lambda: not pids_with_arg(os.path.realpath(m.path)), 10), "bucketfs did not exit"
    p = run(["ls", "-A", m.path], check=False)
    assert p.returncode == 0 and p.stdout == "", p.stderr


def test_sigterm_foreground_exits_zero_and_unmounts(client, bucket, mount):
    client.upload(bucket, F.Obj("a.txt", b"a"))
    m = mount(bucket, foreground=True)
    assert ls_names(m.path) == ["a.txt"]
    run(["kill", "-TERM", str(m.proc.pid)])
    try:
        rc = m.proc.wait(10)
    except subprocess.TimeoutExpired:
        pytest.fail("bucketfs --foreground did not exit within 10 s of SIGTERM")
    assert rc == 0
    assert not in_proc_mounts(m.path)
    assert run(["ls", "-A", m.path]).stdout == ""


def test_unmount_command(client, bucket, mount, bucketfs_bin):
    client.upload(bucket, F.Obj("a.txt", b"a"))
    m = mount(bucket)
    run([bucketfs_bin, "unmount", m.path])
    assert wait_for(lambda: not in_proc_mounts(m.path), 10)
    assert wait_for(lambda: not pids_with_arg(os.path.realpath(m.path)), 10), "bucketfs did not exit"

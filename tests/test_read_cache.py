"""End to end (issue 22): the persistent read cache (docs/SEMANTICS.md#content-cache).

Bytes read or written through a mount are kept under --cache-dir by object
generation; a remount reads them again without a download (the counting
proxy sees no media request), a generation replaced elsewhere is read
fresh, the cache keeps to its size, and a damaged cache file is never
served. Each test has a cache directory of its own.
"""

from __future__ import annotations

import errno
import glob
import os
import tempfile

import fakegcs as F
from conftest import SESSION_TMP, unmount_and_wait, wait_for
from test_metrics import free_port, scrape, total

MiB = 1 << 20


def new_cache() -> str:
    return tempfile.mkdtemp(prefix="read-cache-", dir=SESSION_TMP)


def cached_mount(mount, bucket: str, cache: str, *extra: str, mountpoint: str | None = None):
    return mount(bucket, "", "--cache-dir", cache, "--read-cache-size", "64", *extra, mountpoint=mountpoint)


def unmount(m, bucketfs_bin: str) -> None:
    """Unmounts and waits for the daemon to exit (it holds the cache directory until then)."""
    unmount_and_wait(m, bucketfs_bin)


def remount(mount, m, cache: str, bucketfs_bin: str, *extra: str):
    unmount(m, bucketfs_bin)
    again = cached_mount(mount, m.bucket, cache, *extra, mountpoint=m.path)
    again.proxy.reset()
    return again


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def read_unless_stale(path: str) -> bytes | None:
    """The file's bytes, or None when the generation its open pinned is gone."""
    try:
        return read(path)
    except OSError as e:
        if e.errno != errno.ESTALE:
            raise
        return None


def read_range(path: str, offset: int, count: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, count, offset)
    finally:
        os.close(fd)


def data_files(cache: str) -> list[str]:
    return glob.glob(os.path.join(cache, "read-cache", "*", "*.data"))


def test_a_file_read_is_read_again_after_a_remount_with_no_download(client, bucket, mount, bucketfs_bin):
    data = os.urandom(3 * MiB + 12345)
    client.upload(bucket, F.Obj("dir/big.bin", data))
    cache = new_cache()
    m = cached_mount(mount, bucket, cache)
    assert read(m.p("dir", "big.bin")) == data
    assert m.proxy.count("media") >= 1
    again = remount(mount, m, cache, bucketfs_bin)
    assert read(again.p("dir", "big.bin")) == data
    again.proxy.settle()
    assert again.proxy.count("media") == 0, again.describe()


def byte_range(record) -> tuple[int, int]:
    """The request's Range header as [start, end] (inclusive)."""
    value = next(v for k, v in record.headers.items() if k.lower() == "range")
    start, end = value.split("=")[1].split("-")
    return int(start), int(end)


def test_a_range_is_served_from_disk_only_once_the_whole_object_matched(client, bucket, mount, bucketfs_bin):
    """docs/SEMANTICS.md#integrity: an entry serves reads only once its whole
    object matched its crc32c, so bytes that arrived changed are never
    served from disk; a range read alone is kept, and serves once the rest
    of the file has been read."""
    data = os.urandom(12 * MiB)
    client.upload(bucket, F.Obj("range.bin", data))
    cache = new_cache()
    m = cached_mount(mount, bucket, cache)
    assert read_range(m.p("range.bin"), 2 * MiB, 3 * MiB) == data[2 * MiB:5 * MiB]
    again = remount(mount, m, cache, bucketfs_bin)
    assert read_range(again.p("range.bin"), 2 * MiB, 3 * MiB) == data[2 * MiB:5 * MiB]
    again.proxy.settle()
    ranges = [byte_range(r) for r in again.proxy.records("media")]
    assert any(start < 5 * MiB and end > 2 * MiB for start, end in ranges), \
        "a part of an object is not served from disk\n" + again.describe()
    # The whole file, once: the entry is whole, matches, and serves from then on.
    assert read(again.p("range.bin")) == data
    third = remount(mount, again, cache, bucketfs_bin)
    assert read_range(third.p("range.bin"), 2 * MiB, 3 * MiB) == data[2 * MiB:5 * MiB]
    third.proxy.settle()
    assert third.proxy.count("media") == 0, third.describe()


def test_an_object_overwritten_elsewhere_is_read_fresh(client, bucket, mount, bucketfs_bin):
    old, new = os.urandom(MiB), os.urandom(MiB)
    client.upload(bucket, F.Obj("f.bin", old))
    cache = new_cache()
    m = cached_mount(mount, bucket, cache, "--metadata-ttl", "1")
    assert read(m.p("f.bin")) == old
    client.upload(bucket, F.Obj("f.bin", new))  # through the JSON API: a new generation
    # Once the metadata TTL has run out the next open pins the new generation.
    # An open before then pins the old one, whose bytes the cache may not
    # hold yet (its fill is background work): that read is ESTALE
    # (docs/SEMANTICS.md#reads), and the next open reads the new bytes.
    assert wait_for(lambda: read_unless_stale(m.p("f.bin")) == new, 20), m.describe()
    # The remount reads the new generation, from the cache the read above filled.
    again = remount(mount, m, cache, bucketfs_bin)
    assert read(again.p("f.bin")) == new
    again.proxy.settle()
    assert again.proxy.count("media") == 0, again.describe()


def test_the_cache_stays_within_its_size_while_reading_more(client, bucket, mount, bucketfs_bin):
    files = {f"f{i}.bin": os.urandom(3 * MiB // 2) for i in range(8)}  # 12 MiB
    client.upload_many(bucket, [F.Obj(name, data) for name, data in files.items()])
    cache = new_cache()
    port = free_port()
    m = mount(bucket, "", "--cache-dir", cache, "--read-cache-size", "4", "--metrics-addr", f"127.0.0.1:{port}")
    for name, data in files.items():
        assert read(m.p(name)) == data
        used = sum(os.stat(p).st_blocks * 512 for p in data_files(cache))
        # Whole blocks of the filesystem: a little over the entries' bytes at most.
        assert used <= 4 * MiB + 64 * 1024 * len(files), (name, used)
        assert total(scrape(port), "bucketfs_read_cache_bytes") <= 4 * MiB
    assert len(data_files(cache)) < len(files)
    # The most recent file stays; the first was evicted.
    again = remount(mount, m, cache, bucketfs_bin)
    assert read(again.p("f7.bin")) == files["f7.bin"]
    again.proxy.settle()
    assert again.proxy.count("media") == 0, again.describe()
    assert read(again.p("f0.bin")) == files["f0.bin"]
    assert again.proxy.count("media") >= 1


def test_a_file_written_through_the_mount_is_read_back_after_a_remount_with_no_download(
        client, bucket, mount, bucketfs_bin, tmp_path):
    data = os.urandom(2 * MiB + 7)
    cache = new_cache()
    m = cached_mount(mount, bucket, cache)
    with open(m.p("written.bin"), "wb") as f:
        f.write(data)
    assert client.download(bucket, "written.bin") == data
    again = remount(mount, m, cache, bucketfs_bin)
    assert read(again.p("written.bin")) == data
    again.proxy.settle()
    assert again.proxy.count("media") == 0, again.describe()


def test_a_file_rewritten_after_an_fsync_is_never_read_back_stale(client, bucket, mount, bucketfs_bin):
    first, second = os.urandom(MiB), os.urandom(MiB)
    cache = new_cache()
    m = cached_mount(mount, bucket, cache)
    fd = os.open(m.p("rewritten.bin"), os.O_WRONLY | os.O_CREAT)
    try:
        os.write(fd, first)
        os.fsync(fd)  # stored: its stage becomes the cache's entry of that generation
        os.pwrite(fd, second, 0)  # the same stage, written again
    finally:
        os.close(fd)
    assert client.download(bucket, "rewritten.bin") == second
    again = remount(mount, m, cache, bucketfs_bin)
    assert read(again.p("rewritten.bin")) == second
    again.proxy.settle()
    assert again.proxy.count("media") == 0, again.describe()


def test_a_corrupted_cache_file_is_detected_and_never_served(client, bucket, mount, bucketfs_bin):
    data = os.urandom(MiB)
    client.upload(bucket, F.Obj("f.bin", data))
    cache = new_cache()
    m = cached_mount(mount, bucket, cache)
    assert read(m.p("f.bin")) == data
    unmount(m, bucketfs_bin)
    [path] = data_files(cache)
    with open(path, "r+b") as f:
        f.seek(300_000)
        byte = f.read(1)
        f.seek(300_000)
        f.write(bytes([byte[0] ^ 0xFF]))
    again = cached_mount(mount, bucket, cache, mountpoint=m.path)
    again.proxy.reset()
    assert read(again.p("f.bin")) == data
    assert again.proxy.count("media") >= 1
    assert wait_for(lambda: "does not match its crc32c" in again.log_tail(200), 5), again.log_tail()


def test_the_series_appear_and_move(client, bucket, mount, bucketfs_bin):
    data = os.urandom(2 * MiB)
    client.upload(bucket, F.Obj("f.bin", data))
    cache = new_cache()
    port = free_port()
    m = cached_mount(mount, bucket, cache, "--metrics-addr", f"127.0.0.1:{port}")
    samples = scrape(port)
    assert total(samples, "bucketfs_read_cache_hits_total") == 0
    assert total(samples, "bucketfs_read_cache_bytes") == 0
    assert read(m.p("f.bin")) == data
    samples = scrape(port)
    assert total(samples, "bucketfs_read_cache_misses_total") >= 1
    # The bytes are written to the cache after the read is answered.
    assert wait_for(lambda: total(scrape(port), "bucketfs_read_cache_bytes") >= 2 * MiB, 10)
    kept = total(scrape(port), "bucketfs_read_cache_bytes")
    assert 2 * MiB <= kept <= 2 * MiB + 64 * 1024  # the blocks, and the entry's files' overhead
    assert total(scrape(port), "bucketfs_read_cache_fills_dropped_total") == 0
    port = free_port()
    again = remount(mount, m, cache, bucketfs_bin, "--metrics-addr", f"127.0.0.1:{port}")
    assert total(scrape(port), "bucketfs_read_cache_bytes") == kept
    assert read(again.p("f.bin")) == data
    samples = scrape(port)
    assert total(samples, "bucketfs_read_cache_hits_total") >= 1
    assert total(samples, "bucketfs_read_cache_misses_total") == 0


def test_a_second_mount_of_the_bucket_over_the_same_cache_dir_runs_without_it(client, bucket, mount):
    data = os.urandom(MiB)
    client.upload(bucket, F.Obj("f.bin", data))
    cache = new_cache()
    first = cached_mount(mount, bucket, cache)
    second = cached_mount(mount, bucket, cache)
    assert "read cache off" in second.log_tail(200) and "in use by another mount" in second.log_tail(200)
    assert "read cache off" not in first.log_tail(200)
    assert read(first.p("f.bin")) == data
    assert read(second.p("f.bin")) == data


def test_zero_turns_the_cache_off(client, bucket, mount):
    client.upload(bucket, F.Obj("f.bin", b"x" * 100_000))
    cache = new_cache()
    m = mount(bucket, "", "--cache-dir", cache, "--read-cache-size", "0")
    assert read(m.p("f.bin")) == b"x" * 100_000
    assert not os.path.exists(os.path.join(cache, "read-cache"))

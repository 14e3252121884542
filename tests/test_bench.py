"""The benchmark script itself, at tiny sizes: it runs every measurement end to
end, leaves nothing mounted, and its request counts are the ones the goals
name. Timings are not checked here (BENCHMARKS.md is where they live), but
for the proxy's stream cap, whose time has a lower bound no load can break."""

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def made(counts: dict) -> dict:
    """The request kinds actually made."""
    return {k: v for k, v in counts.items() if v}


def test_bench_runs_every_measurement_with_the_expected_requests(bucketfs_bin, tmp_path):
    out_json, out_md = tmp_path / "bench.json", tmp_path / "bench.md"
    args = [sys.executable, str(REPO / "bench" / "run.py"), "--quick", "--n1", "30", "--n2", "3500",
            "--size-mib", "2", "--xattr-files", "12", "--stat-files", "8", "--parallel-files", "6",
            "--parallel-mib", "1", "--tools", "bucketfs", "--tree", "2x3x4", "--cp-tree", "2x3",
            "--latency-ms", "2", "--write-files", "10", "--list-cache-ttl", "60",
            "--bucketfs-bin", bucketfs_bin, "--json", str(out_json), "--markdown", str(out_md)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
                       env={k: v for k, v in os.environ.items() if k != "STORAGE_EMULATOR_HOST"})
    assert r.returncode == 0, r.stderr[-3000:]

    res = json.loads(out_json.read_text())["results"]
    assert sorted(res) == sorted(["1", "2", "4", "5", "6", "7", "8", "9", "10"])
    bfs = {k: res[k]["bucketfs"] for k in ("1", "2", "5", "6")}
    # 1: 30 objects are one page: one list call, no per-object request (the untimed stat
    # before it is over a second old, so the opendir lists: docs/SEMANTICS.md#walks-small-trees)
    assert made(bfs["1"]["req"]) == {"list": 1}, bfs["1"]["req"]
    # 2: `ls -f | head -1` on 3,500 objects (4 pages) reads the first page, and more
    # only as far as `ls` outruns `head`'s exit (a race a loaded machine makes longer,
    # BENCHMARKS.md); never the whole directory. test_mount.py pins exactly one call
    # with names that make `ls` block on the pipe, which no load can race.
    assert made(bfs["2"]["req"]).keys() == {"list"} and bfs["2"]["req"]["list"] < 4, bfs["2"]["req"]
    assert made(bfs["2"]["full_req"]) == {"list": 4}, bfs["2"]["full_req"]
    assert bfs["2"]["hwm_kib"] and bfs["2"]["full_hwm_kib"]
    # 5: getfattr -d right after ls -l makes no request at all
    assert made(bfs["5"]["req"]) == {}, bfs["5"]["req"]
    assert made(res["5"]["direct"]["req"]) == {"metadata": 12}
    # 4: the bytes were read (a throughput was computed) by bucketfs and by both curl references
    assert all(res["4"][k]["mbs"] > 0 for k in ("bucketfs", "curl", "curl tmpfs")), res["4"]
    # 6: cold lookups ask for names and listings only, never more than two requests a file
    # (a burst shares one list call); here none: the stat of the directory before them
    # listed its 8 files flat; the references were all measured
    asked = made(bfs["6"]["req"])
    assert asked.keys() <= {"list", "metadata"} and sum(asked.values()) <= 2 * 8, asked
    assert all(res["6"][k]["s"] > 0 for k in ("one request", "one list", "local")), res["6"]
    # 7: the parallel reads ran and the daemon's peak RSS was taken
    assert res["7"]["bucketfs"]["hwm_kib"] and res["7"]["bucketfs"]["mbs"] > 0, res["7"]

    # 8: a tree of 2 directories of 3 directories (24 files) is one page: the stat of its
    # directory a second before the walk listed it flat, so the walk lists that directory
    # alone (test_mount.py counts a walk that starts with that lookup: none more); the warm
    # rerun of getfattr, for its network part, was timed; with --list-cache-ttl a second
    # find sends nothing
    walks = res["8"]
    for key in ("find", "du"):
        assert made(walks[f"bucketfs {key}"]["req"]) == {"list": 1}, (key, walks[f"bucketfs {key}"]["req"])
    assert made(walks["bucketfs getfattr"]["cold_req"]) == {"list": 1}, walks["bucketfs getfattr"]
    assert walks["bucketfs getfattr"]["warm_s"] > 0
    assert made(walks["flat list"]["req"]) == {"list": 1}
    assert walks["local getfattr"]["s"] > 0 and walks["local getfattr"]["xattrs"] > 0
    assert made(walks["bucketfs find, list cache warm"]["req"]) == {}, walks["bucketfs find, list cache warm"]
    # cp -r of 6 files: the listings, and each file's bytes once
    cp = made(walks["bucketfs cp"]["req"])
    assert cp.get("media") == 6 and cp.get("list", 0) <= 3 and cp.keys() <= {"list", "media"}, cp
    assert made(walks["flat list + GETs"]["req"]) == {"list": 1, "media": 6}
    # 9: cat after ls -l reads each file once; the shell's glob lists the directory again
    assert made(res["9"]["bucketfs"]["req"]) == {"list": 1, "media": 8}, res["9"]["bucketfs"]["req"]
    assert made(res["9"]["GETs"]["req"]) == {"media": 8}

    # 10: a copy into the mount was timed against curl's upload, and cp of 10 small files
    # into a listed directory made one upload each (the proxy counts them as "other")
    assert res["10"]["bucketfs cp"]["mbs"] > 0 and res["10"]["curl"]["mbs"] > 0, res["10"]
    assert res["10"]["bucketfs cp"]["hwm_kib"], res["10"]
    assert made(res["10"]["bucketfs cp -r"]["req"]) == {"other": 10}, res["10"]["bucketfs cp -r"]["req"]

    table = out_md.read_text()
    for row in ("| 1 | cold `ls -l`", "| 2 | `ls -f", "| 3 | peak RSS", "| 4 | sequential read",
                "| 5 | `getfattr -d`", "| 6 | `stat`", "curl into a tmpfs file", "one list of the directory",
                "the same stats on a local tmpfs", "| 7 | peak RSS (VmHWM), 6 files × 1 MiB",
                "| 8 | cold `find`", "| 8 | cold `du -sb`", "| 8 | cold `getfattr -R -d`",
                "on a local tmpfs copy of the tree", "its network part", "| 8 | cold `cp -r`", "| 9 | `cat`", "waited 2 ms",
                "| 10 | `cp` of", "requests per file"):
        assert row in table, row


def test_wan_section_reads_in_parallel_and_composes(bucketfs_bin, tmp_path):
    """`--only wan`: every row of the WAN model is measured through the capped proxy;
    bucketfs reads the object in several ranged GETs, the reference composes its parts."""
    out_json, out_md = tmp_path / "wan.json", tmp_path / "wan.md"
    args = [sys.executable, str(REPO / "bench" / "run.py"), "--only", "wan", "--wan-mib", "24",
            "--latency-ms", "2", "--stream-mbps", "200", "--repeat", "1", "--tools", "bucketfs",
            "--n1", "5", "--n2", "5", "--size-mib", "1", "--xattr-files", "1", "--stat-files", "2",
            "--parallel-mib", "1", "--tree", "2x2", "--cp-tree", "2x2",
            "--bucketfs-bin", bucketfs_bin, "--json", str(out_json), "--markdown", str(out_md)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
                       env={k: v for k, v in os.environ.items() if k != "STORAGE_EMULATOR_HOST"})
    assert r.returncode == 0, r.stderr[-3000:]
    wan = json.loads(out_json.read_text())["results"]["wan"]
    for row in ("read curl", "read 8 streams", "write curl", "write 8 parts + compose", "read bucketfs",
                "write bucketfs"):
        assert wan[row]["mbs"] > 0, (row, wan[row])
    assert made(wan["read curl"]["req"]) == {"media": 1}
    assert made(wan["read 8 streams"]["req"]) == {"media": 8}
    # 8 uploads and one compose (both "other" to the proxy)
    assert made(wan["write 8 parts + compose"]["req"]) == {"other": 9}, wan["write 8 parts + compose"]["req"]
    # 24 MiB sequentially: segments of up to 8 MiB, several in flight; never one GET per kernel read
    media = wan["read bucketfs"]["req"].get("media", 0)
    assert 4 <= media <= 40, wan["read bucketfs"]["req"]
    table = out_md.read_text()
    assert "WAN model: 2 ms a request, 200 MB/s a stream, 24 MiB" in table, table
    assert "| sequential read" in table and "| write (`cp` into the mount" in table, table


def test_stream_cap_paces_each_body():
    """The proxy's per-stream cap holds each response body and each request body to its
    rate (a lower bound on the time, so a loaded machine cannot make it fail)."""
    sys.path.insert(0, str(REPO / "scripts"))
    import fakegcs as F
    size, bps = 3 << 20, 12e6
    with F.FakeGCS() as gcs:
        c = gcs.client()
        c.create_bucket("bench-pace")
        c.upload("bench-pace", "blob", os.urandom(size))
        with F.CountingProxy(gcs.url, stream_bps=bps) as proxy:
            t0 = time.monotonic()
            assert len(F.Client(proxy.url).download("bench-pace", "blob")) == size
            assert time.monotonic() - t0 >= size / bps
            t0 = time.monotonic()
            F.Client(proxy.url).upload("bench-pace", "up", os.urandom(size))
            assert time.monotonic() - t0 >= size / bps
            # Each request is its own stream: two at once each get the whole rate.
            t0 = time.monotonic()
            with ThreadPoolExecutor(2) as pool:
                parts = list(pool.map(lambda r: F.Client(proxy.url).download("bench-pace", "blob", *r),
                                      [(0, size // 2 - 1), (size // 2, size - 1)]))
            assert sum(map(len, parts)) == size
            assert time.monotonic() - t0 >= (size // 2) / bps


def test_tls_bench_runs_both_wires_and_counts_connections(bucketfs_bin, tmp_path):
    """bench/tls.py (bench/run.sh --tls) at tiny sizes, a few of its cases: every
    case of both wires runs, curl speaks h2 over TLS, the cp's request is read
    from nginx's log, and a walk with --max-connections 4 uses at most 4."""
    out_json = tmp_path / "tls.json"
    cases = "curl read,dd defaults,curl upload,cp cache off,walk ×8 -c4"
    r = subprocess.run([sys.executable, str(REPO / "bench" / "tls.py"), "--size-mib", "2", "--repeat", "1",
                        "--only", cases, "--bucketfs-bin", bucketfs_bin, "--json", str(out_json)],
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                       env={k: v for k, v in os.environ.items() if k != "STORAGE_EMULATOR_HOST"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "| bucketfs, defaults, cold `dd bs=1M` |" in r.stdout, r.stdout
    res = json.loads(out_json.read_text())["results"]
    for wire in ("TLS", "plain"):
        assert sorted(res[wire]) == sorted(cases.split(",")), res[wire].keys()
        assert all(run["wall"] > 0 for runs in res[wire].values() for run in runs)
        assert res[wire]["dd defaults"][0]["daemon"] > 0
        assert res[wire]["cp cache off"][0]["stored at return"] is True
        walk = res[wire]["walk ×8 -c4"][0]
        assert walk["requests"] >= 500 and 1 <= walk["connections"] <= 4, walk
        assert walk["accepted"] >= walk["connections"], walk
    assert res["TLS"]["curl read"][0]["protocol"] == ["HTTP/2.0"]
    # 2 MiB goes up in one multipart request, seen at nginx within the cp's time
    cp = res["TLS"]["cp cache off"][0]["requests"]
    assert cp["by operation"].get("upload-multipart") == 1 and cp["parts"] == 1, cp
    assert -0.01 <= cp["parts from"] <= cp["parts to"] <= cp["cp"] + 0.01, cp  # nginx logs in ms

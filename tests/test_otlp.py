"""End to end (issue 42 item 3): with `--otlp-endpoint URL` (or
OTEL_EXPORTER_OTLP_ENDPOINT) a mount exports traces as OTLP/HTTP JSON to
URL/v1/traces: a span per FUSE operation, with a child span per storage
request (kind, method, status, attempts, bytes); and its metrics, the
series /metrics serves, to URL/v1/metrics. A local sink takes the posts.
Without an endpoint the sink sees no connection at all."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import conftest
import fakegcs as F
from conftest import run, unmount_and_wait, wait_for


class OTLPSink:
    """A small OTLP/HTTP receiver on 127.0.0.1 (an ephemeral port): keeps
    each JSON body posted to /v1/traces, and counts every connection made."""

    def __init__(self):
        sink = self
        self.posts: list[dict] = []
        self.connections = 0
        self.lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with sink.lock:
                    sink.posts.append({"path": self.path, "headers": dict(self.headers), "body": body})
                answer = b"{}"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def verify_request(self, request, client_address):
                with sink.lock:
                    sink.connections += 1
                return True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def bodies(self, path: str) -> list[dict]:
        """The JSON bodies posted to ``path`` so far, in order."""
        with self.lock:
            posts = list(self.posts)
        for post in posts:
            assert post["path"] in ("/v1/traces", "/v1/metrics"), post["path"]
            assert post["headers"].get("Content-Type") == "application/json", post["headers"]
        return [json.loads(post["body"]) for post in posts if post["path"] == path]

    def spans(self) -> list[dict]:
        """Every span posted so far, with its attributes as a plain dict."""
        found = []
        for request in self.bodies("/v1/traces"):
            for resource_spans in request["resourceSpans"]:
                resource = attributes(resource_spans["resource"]["attributes"])
                assert resource["service.name"] == "bucketfs", resource
                assert resource["service.version"], resource
                for scope_spans in resource_spans["scopeSpans"]:
                    for span in scope_spans["spans"]:
                        found.append({**span, "attrs": attributes(span.get("attributes", []))})
        return found

    def metrics(self) -> dict[str, dict] | None:
        """The newest metrics export: {name: metric}, each data point's
        attributes as a plain dict under "attrs"; None before the first."""
        bodies = self.bodies("/v1/metrics")
        if not bodies:
            return None
        out = {}
        for resource_metrics in bodies[-1]["resourceMetrics"]:
            resource = attributes(resource_metrics["resource"]["attributes"])
            assert resource["service.name"] == "bucketfs", resource
            for scope_metrics in resource_metrics["scopeMetrics"]:
                for metric in scope_metrics["metrics"]:
                    data = next(metric[k] for k in ("sum", "gauge", "histogram") if k in metric)
                    for point in data["dataPoints"]:
                        point["attrs"] = attributes(point.get("attributes", []))
                    out[metric["name"]] = metric
        return out


def attributes(pairs: list[dict]) -> dict:
    """OTLP key/value pairs as {key: value}, ints as ints."""
    out = {}
    for pair in pairs:
        value = pair["value"]
        if "intValue" in value:
            out[pair["key"]] = int(value["intValue"])
        else:
            out[pair["key"]] = next(iter(value.values()))
    return out


@pytest.fixture
def sink():
    s = OTLPSink()
    try:
        yield s
    finally:
        s.stop()


def children(spans: list[dict], parent: dict) -> list[dict]:
    return [s for s in spans if s.get("parentSpanId") == parent["spanId"] and s["traceId"] == parent["traceId"]]


def storage_spans(spans: list[dict], parent: dict, kind: str) -> list[dict]:
    return [s for s in children(spans, parent) if s["attrs"].get("storage.kind") == kind]


def test_cat_and_ls_make_span_trees(client, bucket, mount, bucketfs_bin, sink):
    data = os.urandom(300_000)
    client.upload(bucket, F.Obj("file.bin", data))
    for i in range(3):
        client.upload(bucket, F.Obj(f"dir/f{i}", b"x" * (i + 1)))
    m = mount(bucket, "", "--otlp-endpoint", sink.url, "--read-cache-size", "0")
    with open(m.p("file.bin"), "rb") as f:
        assert f.read() == data
    listing = run(["ls", "-l", m.p("dir")]).stdout
    assert "f0" in listing and "f2" in listing, listing
    # Batches go every second; the unmount sends what is left.
    unmount_and_wait(m, bucketfs_bin)
    assert wait_for(lambda: any(s["name"] == "FUSE readdirplus" for s in sink.spans()), 10), sink.spans()
    spans = sink.spans()
    ids = [(s["traceId"], s["spanId"]) for s in spans]
    assert len(ids) == len(set(ids)), "a span was sent twice"
    for s in spans:
        assert len(s["traceId"]) == 32 and len(s["spanId"]) == 16, s
        assert int(s["endTimeUnixNano"]) >= int(s["startTimeUnixNano"]) > 0, s

    fuse = [s for s in spans if s["name"].startswith("FUSE ")]
    assert all(s["kind"] == 2 and "fuse.errno" in s["attrs"] for s in fuse), fuse
    # cat: the FUSE operations that read the file have GET download spans beneath, with status and bytes.
    readers = [s for s in fuse if storage_spans(spans, s, "download")]
    assert readers, [(s["name"], s["attrs"]) for s in spans]
    downloads = [d for r in readers for d in storage_spans(spans, r, "download")]
    for d in downloads:
        assert d["name"] == "GET download" and d["kind"] == 3, d
        assert d["attrs"]["http.request.method"] == "GET", d
        assert d["attrs"]["http.response.status_code"] in (200, 206), d
        assert d["attrs"]["storage.attempts"] >= 1, d
        assert d["attrs"]["storage.bytes_received"] > 0, d
    assert sum(d["attrs"]["storage.bytes_received"] for d in downloads) >= len(data), downloads
    reads = [s for s in fuse if s["name"] == "FUSE read"]
    assert sum(s["attrs"].get("fuse.reply.bytes", 0) for s in reads) == len(data), reads
    assert all(s["attrs"]["fuse.inode"] == reads[0]["attrs"]["fuse.inode"] for s in reads), reads

    # ls -l: a FUSE span of the listing (readdirplus, lookup, getattr) with the list request beneath.
    listers = [s for s in fuse if storage_spans(spans, s, "list")]
    assert listers, [(s["name"], s.get("parentSpanId"), s["attrs"]) for s in spans]
    assert {s["name"] for s in listers} <= {"FUSE readdirplus", "FUSE readdir", "FUSE lookup", "FUSE getattr",
                                            "FUSE opendir"}, listers
    for lister in listers:
        for page in storage_spans(spans, lister, "list"):
            assert page["name"] == "GET list", page
            assert page["attrs"]["http.response.status_code"] == 200, page
            assert page["attrs"]["storage.bytes_received"] > 0, page
    # A storage span is never a root of its own when a FUSE operation made it: every
    # download and list span has a parent that was sent.
    by_id = {s["spanId"] for s in spans}
    for s in spans:
        if s["attrs"].get("storage.kind") in ("download",):
            assert s.get("parentSpanId") in by_id, s


def test_environment_endpoint_and_headers(client, bucket, mount, bucketfs_bin, sink, monkeypatch):
    client.upload(bucket, F.Obj("a", b"hello"))
    monkeypatch.setitem(conftest.TOOL_ENV, "OTEL_EXPORTER_OTLP_ENDPOINT", sink.url)
    monkeypatch.setitem(conftest.TOOL_ENV, "OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=a%2Cb%3Dc,x-team=fs")
    m = mount(bucket, "", "--read-cache-size", "0")
    with open(m.p("a"), "rb") as f:
        assert f.read() == b"hello"
    unmount_and_wait(m, bucketfs_bin)
    assert wait_for(lambda: any(s["name"] == "GET download" for s in sink.spans()), 10), sink.spans()
    headers = sink.posts[0]["headers"]
    assert headers.get("x-api-key") == "a,b=c" and headers.get("x-team") == "fs", headers


def test_no_endpoint_no_connection(client, bucket, mount, bucketfs_bin, sink):
    client.upload(bucket, F.Obj("file.bin", b"y" * 100_000))
    client.upload(bucket, F.Obj("dir/f", b"z"))
    m = mount(bucket, "", "--read-cache-size", "0")
    with open(m.p("file.bin"), "rb") as f:
        assert len(f.read()) == 100_000
    run(["ls", "-l", m.p("dir")])
    unmount_and_wait(m, bucketfs_bin)
    assert sink.connections == 0 and not sink.posts, (sink.connections, sink.posts)


def test_bad_endpoint_fails_the_mount(bucket, mount):
    for value, env in (("grpc://127.0.0.1:4317", None), ("127.0.0.1:4318", None),
                       ("http://127.0.0.1:4318", {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})):
        mp = mount.new_mountpoint()
        r = mount.try_mount(f"gs://{bucket}", mp, "--otlp-endpoint", value, endpoint=mount.gcs.url,
                            env={**conftest.TOOL_ENV, **(env or {})})
        assert r.returncode != 0, r
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr
        assert ("--otlp-endpoint" in lines[0] or "OTEL_EXPORTER_OTLP_PROTOCOL" in lines[0]), r.stderr
        assert not os.path.ismount(mp)


def point(metric: dict, **attrs) -> dict | None:
    """The data point of ``metric`` whose attributes include ``attrs``."""
    data = next(metric[k] for k in ("sum", "gauge", "histogram") if k in metric)
    return next((p for p in data["dataPoints"] if attrs.items() <= p["attrs"].items()), None)


def test_metrics_are_pushed_as_well(client, bucket, mount, bucketfs_bin, sink, monkeypatch):
    """The series /metrics serves go to URL/v1/metrics every
    OTEL_METRIC_EXPORT_INTERVAL, cumulative, and once more at unmount."""
    from test_metrics import free_port, scrape
    data = os.urandom(300_000)
    client.upload(bucket, F.Obj("file.bin", data))
    monkeypatch.setitem(conftest.TOOL_ENV, "OTEL_METRIC_EXPORT_INTERVAL", "300")
    port = free_port()
    m = mount(bucket, "", "--otlp-endpoint", sink.url, "--metrics-addr", f"127.0.0.1:{port}",
              "--read-cache-size", "0")
    with open(m.p("file.bin"), "rb") as f:
        assert f.read() == data

    def downloaded() -> int:
        metrics = sink.metrics() or {}
        found = metrics.get("bucketfs_storage_bytes_downloaded_total")
        return int(point(found)["asInt"]) if found and point(found) else 0

    # Pushed while mounted, on the interval: no unmount needed to see the read.
    assert wait_for(lambda: downloaded() >= len(data), 15), sink.metrics()
    metrics = sink.metrics()
    counter = metrics["bucketfs_fuse_requests_total"]
    assert counter["sum"]["isMonotonic"] is True and counter["sum"]["aggregationTemporality"] == 2, counter
    reads = point(counter, op="read")
    assert reads and int(reads["asInt"]) >= 1, counter
    assert int(reads["startTimeUnixNano"]) <= int(reads["timeUnixNano"]), reads
    # A timer is a histogram in seconds, the same buckets as /metrics.
    durations = metrics["bucketfs_fuse_request_duration_seconds"]
    assert durations["unit"] == "s", durations
    h = point(durations, op="read")
    assert h and len(h["bucketCounts"]) == len(h["explicitBounds"]) + 1, h
    assert sum(int(c) for c in h["bucketCounts"]) == int(h["count"]) >= 1, h
    assert 0 < h["min"] <= h["max"] and h["sum"] > 0, h
    assert "gauge" in metrics["bucketfs_staged_bytes"], metrics["bucketfs_staged_bytes"]
    # Both backends are fed by every series: the names /metrics shows are pushed too.
    scraped = scrape(port)
    names = {name for name, _, _ in scraped}
    for name in ("bucketfs_fuse_requests_total", "bucketfs_storage_bytes_downloaded_total",
                 "bucketfs_storage_requests_total"):
        assert name in names and name in metrics, (name, sorted(names), sorted(metrics))
    scraped_reads = next(v for n, labels, v in scraped if n == "bucketfs_fuse_requests_total"
                         and labels.get("op") == "read")
    exports = len(sink.bodies("/v1/metrics"))
    unmount_and_wait(m, bucketfs_bin)
    # The unmount's last push counts at least what the scrape saw.
    assert wait_for(lambda: len(sink.bodies("/v1/metrics")) > exports, 10)
    final = point(sink.metrics()["bucketfs_fuse_requests_total"], op="read")
    assert int(final["asInt"]) >= scraped_reads, (final, scraped_reads)

#!/usr/bin/env python3
"""A read-only Cloud Storage JSON API for a namespace computed, not stored.

A measuring instrument for issue 40 (scale): a bucket of ten million objects
answers its first list call at once, because every name, size and property is
derived from the object's place in the namespace. No emulator can hold that
many objects (fake-gcs-server took over ten minutes to load 100,000).

    listserver.py [--port P] [--bucket B] [--flat PREFIX:N] [--tree PREFIX:W1,W2,...]

``--flat big/:1000000`` makes ``big/f0000000`` … ``big/f0999999``;
``--tree tree/:100,100,1000`` makes 100 directories of 100 directories of
1,000 files (``tree/d00/d00/f000`` …). Every index is zero-padded, so the
names sort as the numbers do, and the service's order (UTF-8 byte order) is
the index order: a name's place is found by bisection, never by a scan.

What it answers, exact to the service where a mount depends on it:
- ``GET /storage/v1/b/B/o``: ``prefix``, ``delimiter``, ``startOffset``,
  ``endOffset``, ``pageToken``, ``maxResults`` (at most 1,000; prefixes and
  items are counted together against it, as the service does),
  ``includeTrailingDelimiter`` (no name here ends with the delimiter), and
  ``fields`` (top-level names and ``items(...)``);
- ``GET /storage/v1/b/B/o/NAME``: the object's resource; 404 for other names;
- ``alt=media`` (also under ``/download``) with ``Range``: the object's bytes,
  its name repeated to its size;
- ``GET /storage/v1/b/B``: the bucket.
Everything else is refused with 403: the namespace is read-only. Objects have
no ``md5Hash`` or ``crc32c`` (computing them would cost what listing costs).
"""

from __future__ import annotations

import argparse
import base64
import bisect
import http.server
import json
import re
import socketserver
import sys
import urllib.parse
import zlib

CREATED = "2026-01-01T00:00:00.000Z"
GENERATION = 1767225600000000


class Family:
    """One computed subtree: PREFIX then levels of directories, files last."""

    def __init__(self, prefix: str, widths: list[int]):
        if not prefix.endswith("/") or any(w < 1 for w in widths) or not widths:
            raise ValueError(f"bad family {prefix}:{widths}")
        self.prefix = prefix
        self.widths = widths
        self.digits = [len(str(w - 1)) for w in widths]
        self.count = 1
        for w in widths:
            self.count *= w

    def name(self, index: int) -> str:
        parts = []
        for width, digits in zip(reversed(self.widths), reversed(self.digits)):
            index, here = divmod(index, width)
            parts.append(f"{here:0{digits}d}")
        parts.reverse()
        dirs = "".join(f"d{p}/" for p in parts[:-1])
        return f"{self.prefix}{dirs}f{parts[-1]}"


class Namespace:
    """The families side by side, in name order, as one sorted sequence."""

    def __init__(self, families: list[Family]):
        self.families = sorted(families, key=lambda f: f.prefix)
        for a, b in zip(self.families, self.families[1:]):
            if b.prefix.startswith(a.prefix):
                raise ValueError(f"family {b.prefix} lies inside {a.prefix}")
        self.starts = []
        total = 0
        for f in self.families:
            self.starts.append(total)
            total += f.count
        self.count = total

    def name(self, index: int) -> str:
        at = bisect.bisect_right(self.starts, index) - 1
        return self.families[at].name(index - self.starts[at])

    def lower_bound(self, text: str) -> int:
        """The first index whose name is at or after `text` (UTF-8 order)."""
        key = text.encode()
        lo, hi = 0, self.count
        while lo < hi:
            mid = (lo + hi) // 2
            if self.name(mid).encode() < key:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def find(self, name: str) -> int | None:
        index = self.lower_bound(name)
        return index if index < self.count and self.name(index) == name else None


def after_all_with(prefix: str) -> str | None:
    """The least string after every string that starts with `prefix`."""
    chars = list(prefix)
    while chars:
        if ord(chars[-1]) < sys.maxunicode:
            chars[-1] = chr(ord(chars[-1]) + 1)
            return "".join(chars)
        chars.pop()
    return None


def size_of(name: str) -> int:
    return 64 + zlib.crc32(name.encode()) % 4096


def content(name: str, size: int) -> bytes:
    unit = (name + "\n").encode()
    return (unit * (size // len(unit) + 1))[:size]


def resource(bucket: str, name: str, index: int) -> dict:
    return {
        "kind": "storage#object", "id": f"{bucket}/{name}/{GENERATION}", "bucket": bucket, "name": name,
        "size": str(size_of(name)), "generation": str(GENERATION), "metageneration": "1",
        "contentType": "text/plain", "storageClass": "STANDARD", "timeCreated": CREATED, "updated": CREATED,
        "etag": "CAE=", "metadata": {"index": str(index)},
    }


def parse_fields(text: str):
    """`a,b,items(x,y)` → {"a": None, "b": None, "items": {"x": None, "y": None}}."""
    def group(i: int, closing: bool):
        out: dict = {}
        while i < len(text):
            m = re.match(r"[A-Za-z0-9_/]+", text[i:])
            if not m:
                raise ValueError(f"bad fields {text!r}")
            key, i = m.group(0), i + m.end()
            if i < len(text) and text[i] == "(":
                out[key], i = group(i + 1, True)
            else:
                out[key] = None
            if i < len(text) and text[i] == ",":
                i += 1
            elif i < len(text) and text[i] == ")" and closing:
                return out, i + 1
        return out, i
    return group(0, False)[0]


def select(value, fields):
    if fields is None or not isinstance(value, dict):
        return value
    return {k: select(value[k], sub) if not isinstance(value[k], list) else [select(v, sub) for v in value[k]]
            for k, sub in fields.items() if k in value}


class ListServer:
    def __init__(self, namespace: Namespace, bucket: str = "scale", port: int = 0):
        self.namespace, self.bucket = namespace, bucket
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two sends: with Nagle on, the body of a small
            # answer waits for the reader's delayed ACK, ~40 ms on a kept-alive connection.
            disable_nagle_algorithm = True

            def log_message(self, fmt, *args):
                pass

            def do_GET(self):
                server.answer(self)

            def refuse(self):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                server.error(self, 403, "the computed namespace is read-only")

            do_POST = do_PUT = do_PATCH = do_DELETE = refuse

        class Threaded(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.httpd = Threaded(("127.0.0.1", port), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def serve_forever(self):
        self.httpd.serve_forever()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- answers

    def send(self, h, status: int, body: bytes, content_type="application/json", extra=()):
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)

    def error(self, h, status: int, message: str, reason: str = "invalid"):
        body = {"error": {"code": status, "message": message, "errors": [{"message": message, "reason": reason}]}}
        self.send(h, status, json.dumps(body).encode())

    def answer(self, h):
        url = urllib.parse.urlsplit(h.path)
        query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        path = url.path
        if path.startswith("/download/"):
            path = path[len("/download"):]
        m = re.fullmatch(r"/storage/v1/b/([^/]+)(/o(?:/(.+))?)?", path)
        if not m:
            return self.error(h, 404, f"no such path {url.path}", "notFound")
        bucket = urllib.parse.unquote(m.group(1))
        if bucket != self.bucket:
            return self.error(h, 404, "The specified bucket does not exist.", "notFound")
        try:
            fields = parse_fields(query["fields"]) if query.get("fields") else None
        except ValueError as e:
            return self.error(h, 400, str(e))
        if not m.group(2):
            bucket_resource = {"kind": "storage#bucket", "id": bucket, "name": bucket, "location": "US",
                               "storageClass": "STANDARD", "timeCreated": CREATED, "updated": CREATED}
            return self.send(h, 200, json.dumps(select(bucket_resource, fields)).encode())
        if m.group(3) is None:
            return self.list(h, query, fields)
        name = urllib.parse.unquote(m.group(3))
        index = self.namespace.find(name)
        if index is None:
            return self.error(h, 404, f"No such object: {bucket}/{name}", "notFound")
        if query.get("alt") == "media":
            return self.media(h, name)
        self.send(h, 200, json.dumps(select(resource(bucket, name, index), fields)).encode())

    def media(self, h, name: str):
        data = content(name, size_of(name))
        ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", h.headers.get("Range") or "")
        if not ranged:
            return self.send(h, 200, data, "text/plain")
        first = int(ranged.group(1))
        last = min(int(ranged.group(2)) if ranged.group(2) else len(data) - 1, len(data) - 1)
        if first >= len(data):
            return self.send(h, 416, b"", "text/plain", [("Content-Range", f"bytes */{len(data)}")])
        self.send(h, 206, data[first:last + 1], "text/plain",
                  [("Content-Range", f"bytes {first}-{last}/{len(data)}")])

    def list(self, h, query: dict, fields):
        ns = self.namespace
        prefix = query.get("prefix", "")
        delimiter = query.get("delimiter") or None
        try:
            page_size = min(int(query.get("maxResults", "1000")), 1000)
        except ValueError:
            return self.error(h, 400, "Invalid value for maxResults")
        if page_size < 1:
            return self.error(h, 400, "Invalid value for maxResults")
        start = max(prefix, query.get("startOffset", ""))
        if query.get("pageToken"):
            try:
                resume = base64.urlsafe_b64decode(query["pageToken"].encode()).decode()
            except ValueError:
                return self.error(h, 400, "Invalid page token")
            start = max(start, resume)
        index = ns.lower_bound(start)
        beyond = after_all_with(prefix) if prefix else None
        end = ns.lower_bound(beyond) if beyond is not None else ns.count
        if query.get("endOffset"):
            end = min(end, ns.lower_bound(query["endOffset"]))
        items, prefixes = [], []
        # A page's items lose the fields not asked for as they are made: selecting them
        # afterwards, item by item, cost the server a third more than the page itself.
        wanted = fields.get("items") if fields else None
        leaves = wanted is not None and all(sub is None for sub in wanted.values())
        unwanted = [k for k in resource(self.bucket, "x", 0) if k not in wanted] if leaves else []
        if leaves:
            fields = dict(fields, items=None)
        while index < end and len(items) + len(prefixes) < page_size:
            name = ns.name(index)
            rest = name[len(prefix):]
            cut = rest.find(delimiter) if delimiter else -1
            if cut >= 0:
                common = prefix + rest[:cut + len(delimiter)]
                prefixes.append(common)
                following = after_all_with(common)
                index = ns.lower_bound(following) if following is not None else ns.count
            else:
                item = resource(self.bucket, name, index)
                for key in unwanted:
                    del item[key]
                items.append(item)
                index += 1
        # In the order the service documents: kind, nextPageToken, prefixes, items.
        page: dict = {"kind": "storage#objects"}
        if index < end:
            page["nextPageToken"] = base64.urlsafe_b64encode(ns.name(index).encode()).decode()
        if prefixes:
            page["prefixes"] = prefixes
        if items:
            page["items"] = items
        self.send(h, 200, json.dumps(select(page, fields), separators=(",", ":")).encode())


def family(text: str) -> Family:
    prefix, _, widths = text.rpartition(":")
    return Family(prefix, [int(w) for w in widths.split(",")])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--bucket", default="scale")
    p.add_argument("--flat", action="append", default=[], help="PREFIX:N")
    p.add_argument("--tree", action="append", default=[], help="PREFIX:W1,W2,...")
    a = p.parse_args(argv)
    families = [family(t) for t in a.flat + a.tree]
    if not families:
        p.error("give at least one --flat or --tree")
    server = ListServer(Namespace(families), a.bucket, a.port)
    print(server.url, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

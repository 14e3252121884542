"""The counting proxy's corruption mode (scripts/fakegcs.py, issue 39): one
byte flipped in the middle of a body, as a faulty NIC, a middlebox or a
memory error would, and the service's answer to an upload whose bytes do
not match the CRC-32C it declares.

* download: the body of a media GET's answer (alt=media, whole or ranged)
  gets one byte flipped at its middle while it is relayed; its headers,
  ``x-goog-hash`` included, are unchanged.
* upload: the media of an upload request gets one byte flipped at its
  middle: a multipart upload's media part (never its metadata part), an
  ``uploadType=media`` body, or a resumable session's chunk PUT (a compose
  has no media). Then, as the service does, an upload that declares a
  CRC-32C (a multipart metadata's ``crc32c``, a resumable session start's
  ``crc32c``, or a header ``X-Goog-Hash: crc32c=…``, which a session sends
  with its final chunk and which covers the whole object) is judged by the
  bytes as they would be stored, and refused with the service's 400 without
  being forwarded when they do not match. Without a declared CRC-32C the
  flipped bytes are forwarded and stored.

For a session the proxy keeps the CRC-32C of the bytes the emulator holds
(offsets from ``Content-Range``, what it holds from a 308's ``Range``), so
the final chunk's whole-object CRC-32C can be judged; a session whose start
it did not see (started before the mode was set), or that skips bytes, is
not judged (forwarded as it is). While upload corruption is set every
upload with a declared CRC-32C is judged, flipped or not.

The CRC-32C comes from the ``crc32c`` package (tests/requirements.txt),
imported when a mode is first set, so fakegcs.py itself needs only the
standard library.
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Callable

DIRECTIONS = ("download", "upload")
MODES = (None, "once", "always")


def crc32c(data: bytes, value: int = 0) -> int:
    import crc32c as c  # noqa: PLC0415 - only the corruption mode needs it

    return c.crc32c(data, value)


def b64(crc: int) -> str:
    """The service's form of a CRC-32C: base64 of its 4 big-endian bytes."""
    return base64.b64encode(struct.pack(">I", crc)).decode()


def from_b64(text: str) -> int | None:
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        return None
    return struct.unpack(">I", raw)[0] if len(raw) == 4 else None


def flipped(data: bytes, at: int) -> bytes:
    """`data` with the byte at `at` inverted."""
    out = bytearray(data)
    out[at] ^= 0xFF
    return bytes(out)


def refusal(declared: int, calculated: int) -> dict:
    """The service's answer to bytes whose CRC-32C is not the one declared."""
    message = (f'Provided CRC32C "{b64(declared)}" doesn\'t match calculated CRC32C '
               f'"{b64(calculated)}".')
    return {"error": {"code": 400, "message": message,
                      "errors": [{"message": message, "domain": "global", "reason": "invalid"}]}}


def header(headers: dict[str, str], name: str) -> str | None:
    return next((v for k, v in headers.items() if k.lower() == name.lower()), None)


def hash_header_crc(headers: dict[str, str]) -> int | None:
    """The CRC-32C of ``X-Goog-Hash: crc32c=…[,md5=…]``, None when absent."""
    value = header(headers, "X-Goog-Hash") or ""
    for item in value.split(","):
        item = item.strip()
        if item.startswith("crc32c="):
            return from_b64(item[len("crc32c="):])
    return None


def metadata_crc(text: bytes) -> int | None:
    """The ``crc32c`` an object resource (JSON) declares, None when none."""
    try:
        meta = json.loads(text)
    except ValueError:
        return None
    crc = meta.get("crc32c") if isinstance(meta, dict) else None
    return from_b64(crc) if isinstance(crc, str) else None


def multipart_spans(body: bytes, content_type: str) -> list[tuple[int, int]]:
    """[start, end) of each part's content (after its headers) in a
    multipart/related body."""
    m = re.search(r'boundary="?([^";]+)"?', content_type)
    if not m:
        return []
    delimiter = b"--" + m.group(1).encode()
    spans = []
    at = body.find(delimiter)
    while at >= 0 and body[at + len(delimiter):at + len(delimiter) + 2] != b"--":
        head_end = body.find(b"\r\n\r\n", at)
        end = body.find(b"\r\n" + delimiter, head_end + 4) if head_end >= 0 else -1
        if end < 0:
            break
        spans.append((head_end + 4, end))
        at = end + 2
    return spans


def content_range(value: str | None) -> tuple[int | None, int | None, int | None]:
    """``bytes a-b/total`` (or ``*`` for either side) as (a, b, total)."""
    m = re.fullmatch(r"\s*bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)\s*", value or "")
    if not m:
        return None, None, None
    first, last, total = m.groups()
    return (int(first) if first else None, int(last) if last else None,
            int(total) if total and total != "*" else None)


def persisted(status: int, headers: dict[str, str]) -> int | None:
    """How many bytes a session holds after answering ``status``: a 308's
    ``Range: bytes=0-N`` (none: 0); None for any other answer."""
    if status != 308:
        return None
    m = re.fullmatch(r"\s*bytes=0-(\d+)\s*", header(headers, "Range") or "")
    return int(m.group(1)) + 1 if m else 0


@dataclass
class Session:
    """What the emulator holds of one resumable session: `length` bytes of
    CRC-32C `crc` (None: not known), and the CRC-32C its start declared."""

    length: int | None = 0
    crc: int = 0
    declared: int | None = None


@dataclass
class Upload:
    """One upload request as the proxy handles it: the body to forward, or
    the refusal to answer instead; `answered` is called with the emulator's
    answer (status, headers) once forwarded."""

    body: bytes | None
    refusal: dict | None = None
    answered: Callable[[int, dict[str, str]], None] = lambda status, headers: None


class Corruption:
    """Per direction, a mode (None, "once": the next `times` matching bodies,
    "always") and the count of bodies corrupted; the sessions' CRC-32Cs."""

    def __init__(self):
        self._lock = threading.Lock()
        self._modes: dict[str, str | None] = dict.fromkeys(DIRECTIONS)
        self._left: dict[str, float] = dict.fromkeys(DIRECTIONS, 0)
        self.counts: dict[str, int] = dict.fromkeys(DIRECTIONS, 0)
        self.refusals = 0  # uploads answered 400 for their CRC-32C
        self._sessions: dict[str, Session] = {}

    def set(self, mode: str | None, direction: str, times: int = 1) -> None:
        assert mode in MODES and direction in DIRECTIONS and times >= 1, (mode, direction, times)
        if mode is not None:
            crc32c(b"")  # the package is there, before a request needs it
        with self._lock:
            self._modes[direction] = mode
            self._left[direction] = {None: 0, "once": times, "always": math.inf}[mode]
            if direction == "upload" and mode is None:
                self._sessions.clear()

    def armed(self, direction: str) -> bool:
        return self._modes[direction] is not None

    def claim(self, direction: str) -> bool:
        """Whether the body at hand is to be corrupted (counted if so)."""
        with self._lock:
            if self._left[direction] <= 0:
                return False
            self._left[direction] -= 1
            self.counts[direction] += 1
            return True

    # downloads

    def download_flip(self, method: str, kind: str, status: int, length: int | None) -> int | None:
        """Where to flip a byte of a media GET's answer of `length` bytes, or None."""
        if not self.armed("download") or method != "GET" or kind != "media" or status not in (200, 206):
            return None
        if length is not None and length <= 0:
            return None
        if not self.claim("download"):
            return None
        return -1 if length is None else length // 2  # -1: the middle of a body of unknown length

    # uploads

    def upload(self, operation: str, query: str, headers: dict[str, str], body: bytes | None) -> Upload:
        """How to handle an upload request while upload corruption is set."""
        params = urllib.parse.parse_qs(query, keep_blank_values=True)
        if operation == "upload-multipart":
            return self._direct(params, headers, body or b"")
        if operation == "upload-start":
            return self._start(headers, body)
        if operation == "upload-session" and "upload_id" in params:
            return self._chunk(params["upload_id"][-1], headers, body or b"")
        return Upload(body)

    def _direct(self, params, headers, body: bytes) -> Upload:
        """A multipart upload (media: its second part) or an uploadType=media one (the whole body)."""
        declared = hash_header_crc(headers)
        if params.get("uploadType", [""])[-1] == "multipart":
            spans = multipart_spans(body, header(headers, "Content-Type") or "")
            if len(spans) < 2:
                return Upload(body)
            (meta_start, meta_end), (start, end) = spans[0], spans[1]
            declared = declared if declared is not None else metadata_crc(body[meta_start:meta_end])
        else:
            start, end = 0, len(body)
        if end > start and self.claim("upload"):
            body = flipped(body, start + (end - start) // 2)
        if declared is not None:
            calculated = crc32c(body[start:end])
            if calculated != declared:
                return self._refuse(declared, calculated)
        return Upload(body)

    def _start(self, headers, body: bytes | None) -> Upload:
        """A session's start: its metadata may declare the whole object's CRC-32C."""
        declared = hash_header_crc(headers)
        declared = declared if declared is not None else metadata_crc(body or b"{}")

        def answered(status: int, answer: dict[str, str]) -> None:
            location = header(answer, "Location")
            ids = urllib.parse.parse_qs(urllib.parse.urlsplit(location or "").query).get("upload_id")
            if status == 200 and ids:
                with self._lock:
                    self._sessions[ids[-1]] = Session(declared=declared)

        return Upload(body, answered=answered)

    def _chunk(self, upload_id: str, headers, body: bytes) -> Upload:
        first, last, total = content_range(header(headers, "Content-Range"))
        with self._lock:
            session = self._sessions.get(upload_id)
            if session is None:  # started before the mode was set: judged only from its first byte
                session = self._sessions[upload_id] = Session(length=0 if first == 0 else None)
            before_length, before_crc = session.length, session.crc
        if body and self.claim("upload"):
            body = flipped(body, len(body) // 2)
        # The bytes past what the session holds (a chunk may repeat some it has).
        fresh = b""
        if before_length is not None and first is not None and first <= before_length <= last + 1:
            fresh = body[before_length - first:]
            after_length, after_crc = last + 1, crc32c(fresh, before_crc)
        elif before_length is not None and first is None and not body:
            after_length, after_crc = before_length, before_crc  # a status query, or finalizing
        else:
            after_length, after_crc = None, 0  # a gap: from here on unknown
        declared = hash_header_crc(headers)
        if declared is None:
            declared = session.declared
        if declared is not None and total is not None and after_length == total and after_crc != declared:
            return self._refuse(declared, after_crc)

        def answered(status: int, answer: dict[str, str]) -> None:
            with self._lock:
                if status in (200, 201):
                    self._sessions.pop(upload_id, None)
                    return
                held = persisted(status, answer)
                if held is None:  # refused or failed: what it holds is asked next
                    return
                if after_length is not None and held == after_length:
                    session.length, session.crc = after_length, after_crc
                elif before_length is not None and before_length <= held < before_length + len(fresh):
                    session.length, session.crc = held, crc32c(fresh[:held - before_length], before_crc)
                elif held != session.length:
                    session.length = None

        return Upload(body, answered=answered)

    def _refuse(self, declared: int, calculated: int) -> Upload:
        with self._lock:
            self.refusals += 1
        return Upload(None, refusal=refusal(declared, calculated))

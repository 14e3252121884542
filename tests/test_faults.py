"""End to end (issue 11 item 7): one deadline per read as the user sees it.
A proxy in front of the mount stalls or fails every download; `cat` must fail
within --retry-deadline plus one --request-timeout (the kernel's second read
after its read-ahead failed must not start a deadline of its own), a cat right
after fails fast, and once the fault clears the mount reads at once."""

from __future__ import annotations

import os
import time

import pytest

import fakegcs as F
from conftest import run

RETRY_DEADLINE = 3.0
REQUEST_TIMEOUT = 1.0
SLACK = 1.5  # process start, scheduling on a loaded machine


def timed_cat(path: str) -> tuple[object, float]:
    t0 = time.monotonic()
    r = run(["cat", path], check=False, binary=True, timeout=60)
    return r, time.monotonic() - t0


@pytest.mark.parametrize("mode", ["stall", "503"])
def test_a_failing_read_ends_within_one_deadline_and_recovers_at_once(client, bucket, mount, mode):
    data = os.urandom(300_000)
    client.upload(bucket, F.Obj("f", data))
    m = mount(bucket, "", "--retry-deadline", str(RETRY_DEADLINE), "--request-timeout", str(REQUEST_TIMEOUT))
    run(["stat", m.p("f")])
    m.proxy.set_fault(mode, ["media"])
    try:
        r, first = timed_cat(m.p("f"))
        assert r.returncode != 0 and b"Input/output error" in r.stderr, (r, m.describe())
        assert first < RETRY_DEADLINE + REQUEST_TIMEOUT + SLACK, (first, m.describe())

        # Just after: no new deadline, one attempt (a 503 ends it at once).
        r, again = timed_cat(m.p("f"))
        assert r.returncode != 0, (r, m.describe())
        assert again < (REQUEST_TIMEOUT + SLACK if mode == "stall" else 1.0), (again, m.describe())
    finally:
        m.proxy.set_fault(None)

    r, healed = timed_cat(m.p("f"))
    assert r.returncode == 0 and r.stdout == data, m.describe()
    assert healed < 2, healed

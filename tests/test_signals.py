"""End to end (issue 11 item 5): signals that keep coming while the mount
shuts down never touch the destroyed session."""

from __future__ import annotations

import signal
import time

import fakegcs as F
from conftest import is_mounted, run, wait_for


def test_repeated_sigint_during_shutdown_exits_cleanly(client, bucket, mount):
    client.upload(bucket, F.Obj("f", b"x"))
    for _ in range(3):
        m = mount(bucket, foreground=True)
        assert run(["cat", m.p("f")]).stdout == "x"
        # A stream of SIGINTs: the first starts the shutdown, the rest land in it and after it.
        deadline = time.monotonic() + 20
        while m.proc.poll() is None and time.monotonic() < deadline:
            try:
                m.proc.send_signal(signal.SIGINT)
            except ProcessLookupError:
                break
            time.sleep(0.001)
        assert m.proc.wait(10) == 0, m.describe()
        assert wait_for(lambda: not is_mounted(m.path), 10), m.describe()
        err = m.proc.communicate(timeout=5)[1]
        assert "unmounted" in err and "error" not in err.lower(), err

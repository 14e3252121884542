"""storage-testbench, Google's faithful Cloud Storage emulator, for the
end-to-end tests: the same face as ``fakegcs.FakeGCS`` (``url``, ``host``,
``start``, ``stop``, ``client``), started and stopped with the workplace's
``testbench.sh`` (default ``<repo>/../shared/testbench.sh``, or
$BUCKETFS_TESTBENCH).

Unlike fake-gcs-server it enforces every precondition and has move and
compose. Its deviations that the tests see are in tests/EMULATOR-NOTES.md;
the one handled here: it adds the custom metadata keys ``x_emulator_*`` and
``x_testbench_*`` to every upload, which ``TestbenchClient`` hides from what
the tests compare.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import tempfile
from pathlib import Path

import fakegcs as F

REPO = Path(__file__).resolve().parents[1]
SCRIPT = os.environ.get("BUCKETFS_TESTBENCH") or str(REPO.parent / "shared" / "testbench.sh")
EMULATOR_KEY_PREFIXES = ("x_emulator_", "x_testbench_")


def is_emulator_key(key: str) -> bool:
    return key.startswith(EMULATOR_KEY_PREFIXES)


def _clean(resource: dict) -> dict:
    custom = resource.get("metadata")
    if isinstance(custom, dict):
        kept = {k: v for k, v in custom.items() if not is_emulator_key(k)}
        if kept:
            resource["metadata"] = kept
        else:
            del resource["metadata"]
    return resource


class TestbenchClient(F.Client):
    """The tests' JSON API client, with the emulator's own keys hidden."""

    def create_bucket(self, bucket: str) -> dict:
        return self._json("POST", "/storage/v1/b?project=test", {"name": bucket})

    def upload(self, bucket, o, data=None, **kw) -> dict:
        return _clean(super().upload(bucket, o, data, **kw))

    def get(self, bucket: str, name: str) -> dict:
        return _clean(super().get(bucket, name))

    def patch(self, bucket: str, name: str, body: dict) -> dict:
        return _clean(super().patch(bucket, name, body))

    def list(self, bucket: str, prefix: str = "", delimiter: str | None = "/", max_results: int | None = None):
        items, prefixes = super().list(bucket, prefix, delimiter, max_results)
        return [_clean(i) for i in items], prefixes


class Testbench:
    """One storage-testbench (gunicorn on 127.0.0.1), always stopped."""

    name = "storage-testbench"

    def __init__(self, log_path: str | None = None, start_timeout: float = 600.0):
        self.log_path = log_path
        # The first start makes its venv from PyPI: minutes, not seconds.
        self.start_timeout = start_timeout
        self.port: int | None = None

    @property
    def url(self) -> str:
        assert self.port is not None, "not started"
        return f"http://127.0.0.1:{self.port}"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "Testbench":
        if not os.path.exists(SCRIPT):
            raise RuntimeError(f"storage-testbench: {SCRIPT} not found (set BUCKETFS_TESTBENCH)")
        last = ""
        for _ in range(3):  # a free port can be taken between probe and bind
            port = F.free_port()
            # Output to a file, not a pipe: the server it leaves running keeps
            # the script's descriptors, so a pipe would never reach EOF.
            with tempfile.TemporaryFile("w+") as out:
                p = subprocess.run(["bash", SCRIPT, "start", str(port)], stdout=out, stderr=out,
                                   timeout=self.start_timeout, stdin=subprocess.DEVNULL)
                out.seek(0)
                last = out.read().strip()[-2000:]
            if p.returncode == 0:
                self.port = port
                _LIVE.add(self)
                return self
            subprocess.run(["bash", SCRIPT, "stop", str(port)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=60)
        raise RuntimeError(f"could not start storage-testbench: {last}")

    def stop(self) -> None:
        _LIVE.discard(self)
        port, self.port = self.port, None
        if port is not None:
            subprocess.run(["bash", SCRIPT, "stop", str(port)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=60)

    def client(self) -> TestbenchClient:
        return TestbenchClient(self.url)


_LIVE: set[Testbench] = set()


def _stop_all() -> None:
    for t in list(_LIVE):
        t.stop()


atexit.register(_stop_all)

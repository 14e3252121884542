"""A file being written is a file (issue 20): listed and keeping its directory."""

from __future__ import annotations

import errno
import os

import pytest

from conftest import run


def test_a_file_in_flight_is_listed_and_keeps_its_directory(client, bucket, mount):
    m = mount(bucket)
    os.mkdir(m.p("d"))
    with open(m.p("d", "draft.txt"), "w") as f:
        f.write("hello")
        f.flush()
        assert os.listdir(m.p("d")) == ["draft.txt"]
        # Another process sees it too, with its staged size.
        out = run(["ls", "-ln", m.p("d")]).stdout
        assert " 5 " in out and "draft.txt" in out, out
        with pytest.raises(OSError) as e:
            os.rmdir(m.p("d"))
        assert e.value.errno == errno.ENOTEMPTY
        assert client.get(bucket, "d/")["name"] == "d/", "nothing was deleted"
    assert os.listdir(m.p("d")) == ["draft.txt"], "listed once, now by the bucket"
    assert client.download(bucket, "d/draft.txt") == b"hello"

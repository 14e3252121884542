"""End to end: an open that reaches an inode whose object is gone (the
kernel still holds a positive entry for the name) answers ESTALE, so the
kernel looks the name up again once (LOOKUP_REVAL) and finds it absent:
open(O_CREAT) then creates the name at once, a plain open gets ENOENT
(docs/SEMANTICS.md#errors-table). Without it a name whose new file failed
to upload, or that another client deleted, could not be created again
until the kernel's entry expired (--metadata-ttl, 60 s here)."""

from __future__ import annotations

import errno
import os

import pytest

import fakegcs as F
from conftest import run, wait_for
from test_writes import fail_uploads, mount_rw


def _logged(m, text: str) -> bool:
    with open(m.log_path, errors="replace") as f:
        return text in f.read()


def test_a_new_file_whose_upload_was_refused_is_created_again_at_once(mount, bucket, client):
    m, _ = mount_rw(mount, bucket)
    fail_uploads(m.proxy, times=1, status=400)
    with pytest.raises(OSError) as failure:
        with open(m.p("refused.txt"), "wb") as f:
            f.write(b"refused")
    assert failure.value.errno == errno.EINVAL, m.describe()
    assert not client.exists(bucket, "refused.txt")
    # The mount took the last close (the release comes after close(2) returns):
    # the name's next open reaches an inode the mount no longer stages.
    assert wait_for(lambda: _logged(m, "refused.txt: closed with bytes that were not stored")), m.describe()

    with open(m.p("refused.txt"), "wb") as f:
        f.write(b"stored")
    assert client.download(bucket, "refused.txt") == b"stored"
    assert run(["cat", m.p("refused.txt")]).stdout == "stored"


def test_a_file_deleted_elsewhere_is_absent_to_cat_and_written_again_by_a_redirect(mount, bucket, client):
    for name in ("cat-then-echo.txt", "echo.txt"):
        client.upload(bucket, F.Obj(name, b"old\n"))
    m, _ = mount_rw(mount, bucket)
    for name in ("cat-then-echo.txt", "echo.txt"):
        fd = os.open(m.p(name), os.O_RDONLY)
        try:
            client.delete(bucket, name)
            # The read finds the generation gone: from now on the mount asks the
            # bucket about the name, while the kernel's entry for it stays.
            with pytest.raises(OSError) as failure:
                os.read(fd, 100)
            assert failure.value.errno == errno.ESTALE, m.describe()
        finally:
            os.close(fd)

    cat = run(["cat", m.p("cat-then-echo.txt")], check=False)
    assert cat.returncode != 0 and "No such file or directory" in cat.stderr, (cat, m.describe())
    for name in ("cat-then-echo.txt", "echo.txt"):
        run(f"echo x > {m.p(name)}", shell=True)
        assert client.download(bucket, name) == b"x\n", m.describe()

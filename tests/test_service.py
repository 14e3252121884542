"""bucketfs as a system service (issue 5): the systemd units, sd_notify
readiness, the mount(8) helper, the install script, and stale mounts after a
crash. Real kernel mounts of fake-gcs-server buckets; every mount is undone in
a finally (and by the ``mount`` fixture's teardown).

The mount(8) tests need the helper at /sbin/mount.fuse.bucketfs, the only
place mount(8) looks: they install into a temporary prefix and put a symlink
there for the duration of the test (under a lock, restoring whatever was
there before)."""

from __future__ import annotations

import contextlib
import fcntl
import errno
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import (F, BUCKETFS_BIN, LOG_DIR, REPO, SESSION_TMP, TOOL_ENV, Mount, in_proc_mounts,
                      is_mounted, kill_pids, pids_with_arg, run, wait_for)

SYSTEMD = REPO / "systemd"
HELPER = REPO / "scripts" / "mount.fuse.bucketfs"
INSTALL = REPO / "scripts" / "install.sh"
SBIN_HELPER = "/sbin/mount.fuse.bucketfs"

# Options that give a service its own mount namespace: a FUSE mount made in
# there would be invisible to the rest of the system.
NAMESPACING = {
    "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "PrivateMounts", "PrivateUsers",
    "ReadWritePaths", "ReadOnlyPaths", "InaccessiblePaths", "ExecPaths", "NoExecPaths", "TemporaryFileSystem",
    "BindPaths", "BindReadOnlyPaths", "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs",
    "ProtectControlGroups", "ProtectProc", "ProcSubset", "MountFlags", "RootDirectory", "RootImage",
    "DynamicUser", "PrivateNetwork", "NetworkNamespacePath",
}


def read_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """A unit file as {section: {key: [values]}} (keys may repeat)."""
    out: dict[str, dict[str, list[str]]] = {}
    section = None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            out.setdefault(section, {})
            continue
        key, _, value = line.partition("=")
        out[section].setdefault(key.strip(), []).append(value.strip())
    return out


def upload_basics(client, bucket: str) -> None:
    client.upload(bucket, "hello.txt", b"hello from the bucket\n", content_type="text/plain")
    client.upload(bucket, "photos/2024/a.jpg", b"\xff\xd8jpeg", content_type="image/jpeg")


def fstype_of(path: str) -> str | None:
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if left.split()[4] == path:
                return right.split()[0]
    return None


def register(mount, mp: str, args) -> Mount:
    """Lets the ``mount`` fixture's teardown undo whatever ends up at ``mp``."""
    m = Mount(mp, "", "", None, os.path.join(LOG_DIR, "service.log"), [str(a) for a in args])  # type: ignore
    mount.mounts.append(m)
    return m


def unmount_now(mp: str) -> None:
    """Best effort, for finally blocks (the fixture teardown is the backstop)."""
    if is_mounted(mp):
        subprocess.run([BUCKETFS_BIN, "unmount", mp], capture_output=True, timeout=30, env=TOOL_ENV)
        wait_for(lambda: not is_mounted(mp), 10)
    kill_pids(pids_with_arg(os.path.realpath(mp)))


def bucketfs_pids(mp: str) -> list[int]:
    """(``mp`` must be a real path: resolving it would stat the mount root.)"""
    return pids_with_arg(mp)


def fusermount_pids(mp: str) -> list[int]:
    """fusermount3 processes (the auto_unmount watchers) naming ``mp`` (a real path)."""
    return [pid for pid, argv in F.live_processes()
            if argv and os.path.basename(argv[0]) == b"fusermount3" and mp.encode() in argv]


# ---------------------------------------------------------------------------
# fixtures


def run_install(destdir: str, **env: str) -> subprocess.CompletedProcess:
    e = dict(TOOL_ENV, BUCKETFS_SKIP_BUILD="1", BUCKETFS_BINARY=BUCKETFS_BIN, DESTDIR=destdir, **env)
    return run(["bash", str(INSTALL)], env=e, timeout=300)


@pytest.fixture(scope="module")
def prefix_install(bucketfs_bin):
    """An install into a private prefix (no DESTDIR), so that the installed
    helper names an installed binary that exists."""
    root = tempfile.mkdtemp(prefix="install-", dir=SESSION_TMP)
    run_install("", PREFIX=root, SBINDIR=f"{root}/sbin", SYSCONFDIR=f"{root}/etc")
    yield Path(root)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def sbin_helper(prefix_install):
    """/sbin/mount.fuse.bucketfs -> the helper of ``prefix_install``, for one test."""
    if os.geteuid() != 0:
        pytest.skip("mount(8) helper tests need root (mount(8) only runs helpers from /sbin)")
    if not shutil.which("mount") or not shutil.which("umount"):
        pytest.skip("util-linux mount/umount are not installed")
    target = prefix_install / "sbin" / "mount.fuse.bucketfs"
    os.makedirs("/run/lock", exist_ok=True)
    with open("/run/lock/bucketfs-test-mount-helper.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test session may be doing the same
        saved = None
        if os.path.lexists(SBIN_HELPER):
            saved = f"{SBIN_HELPER}.saved-by-test-{os.getpid()}"
            os.rename(SBIN_HELPER, saved)
        try:
            os.symlink(target, SBIN_HELPER)
            yield prefix_install / "bin" / "bucketfs"
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(SBIN_HELPER)
            if saved:
                os.rename(saved, SBIN_HELPER)


# ---------------------------------------------------------------------------
# the units


def systemd_analyze():
    tool = shutil.which("systemd-analyze")
    if not tool:
        pytest.skip("systemd-analyze is not installed (Debian package: systemd)")
    return tool


def unit_copy(tmp_path: Path, name: str, as_name: str | None = None, **replace: str) -> Path:
    """A copy of systemd/NAME whose binary is the one under test (verify checks
    that ExecStart's program exists)."""
    text = (SYSTEMD / name).read_text().replace("/usr/local/bin/bucketfs", BUCKETFS_BIN)
    for old, new in replace.items():
        text = text.replace(old, new)
    out = tmp_path / (as_name or name)
    out.write_text(text)
    return out


def verify(*units: Path) -> subprocess.CompletedProcess:
    p = run([systemd_analyze(), "verify", "--man=no", "--generators=no", *map(str, units)], check=False)
    return p


def assert_clean(p: subprocess.CompletedProcess, *units: Path) -> None:
    # verify only warns (exit 0) about unknown keys or bad values: no line may
    # name one of our files.
    complaints = [line for line in p.stderr.splitlines()
                  if any(u.name in line or str(u) in line for u in units)]
    assert p.returncode == 0 and not complaints, f"systemd-analyze verify: rc={p.returncode}\n{p.stderr}"


def test_systemd_analyze_verify_accepts_the_units(tmp_path, bucketfs_bin):
    service = unit_copy(tmp_path, "bucketfs@.service", "bucketfs@mnt-photos.service")
    mount_unit = unit_copy(tmp_path, "mnt-photos.mount")
    assert_clean(verify(service, mount_unit), service, mount_unit)
    template = unit_copy(tmp_path, "bucketfs@.service")
    assert_clean(verify(template), template)


@pytest.mark.parametrize("instance,path", [("mnt-photos", "/mnt/photos"),
                                           (r"srv-my\x2dbucket-sub\x20dir", "/srv/my-bucket/sub dir")])
def test_service_instance_names_the_mountpoint(tmp_path, bucketfs_bin, instance, path):
    """%f is the unescaped instance with a leading /: make systemd-analyze show
    it by pointing ExecStart at a program under it."""
    text = (SYSTEMD / "bucketfs@.service").read_text()
    exec_start = read_unit(SYSTEMD / "bucketfs@.service")["Service"]["ExecStart"][0]
    assert re.search(r"\smount \$\{BUCKET\} %f --foreground \$OPTIONS$", exec_start), exec_start
    unit = tmp_path / f"bucketfs@{instance}.service"
    unit.write_text(text.replace("ExecStart=/usr/local/bin/bucketfs", "ExecStart=%f/bucketfs-probe")
                    .replace("/usr/local/bin/bucketfs", BUCKETFS_BIN))
    p = verify(unit)
    assert f"Command {path}/bucketfs-probe is not executable" in p.stderr, p.stderr
    esc = run(["systemd-escape", "--path", path]).stdout.strip() if shutil.which("systemd-escape") else instance
    assert esc == instance


def test_service_is_notify_and_keeps_the_mount_visible():
    unit = read_unit(SYSTEMD / "bucketfs@.service")
    svc = unit["Service"]
    assert svc["Type"] == ["notify"] and svc["NotifyAccess"] == ["main"]
    assert svc["EnvironmentFile"] == ["/etc/bucketfs/%i.env"]
    assert svc["ExecStopPost"] == ["-/usr/local/bin/bucketfs unmount %f"]
    assert svc["Restart"] == ["on-failure"]
    assert "network-online.target" in unit["Unit"]["After"][0] and "network-online.target" in unit["Unit"]["Wants"][0]
    assert svc["DeviceAllow"] == ["/dev/fuse rw"]
    assert "CAP_SYS_ADMIN" in svc["CapabilityBoundingSet"][0].split()
    assert not NAMESPACING & set(svc), f"mount-namespacing options hide the mount: {NAMESPACING & set(svc)}"
    assert "bucketfs" in (SYSTEMD / "mnt-photos.mount").read_text()
    m = read_unit(SYSTEMD / "mnt-photos.mount")["Mount"]
    assert m["Type"] == ["fuse.bucketfs"] and m["Where"] == ["/mnt/photos"] and "_netdev" in m["Options"][0]


def test_fstab_example_makes_a_remote_mount_unit(tmp_path, bucketfs_bin):
    systemd_analyze()
    generator = "/usr/lib/systemd/system-generators/systemd-fstab-generator"
    if not os.access(generator, os.X_OK):
        pytest.skip(f"{generator} is missing (Debian package: systemd)")
    out = tmp_path / "gen"
    out.mkdir()
    run([generator, out, out, out], env=dict(TOOL_ENV, SYSTEMD_FSTAB=str(SYSTEMD / "fstab.example")))
    unit = out / "mnt-photos.mount"
    assert unit.exists(), sorted(p.name for p in out.rglob("*"))
    assert (out / "remote-fs.target.wants" / "mnt-photos.mount").exists(), "_netdev should make it a remote mount"
    m = read_unit(unit)["Mount"]
    assert m["Type"] == ["fuse.bucketfs"] and m["What"] == ["gs://photos"]
    assert_clean(verify(unit), unit)


# ---------------------------------------------------------------------------
# sd_notify


@contextlib.contextmanager
def notify_socket(abstract: bool):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    d = tempfile.mkdtemp(prefix="notify-", dir="/tmp")  # sun_path is short
    try:
        if abstract:
            name = f"bucketfs-test-{os.getpid()}-{os.path.basename(d)}"
            sock.bind("\0" + name)
            address = "@" + name
        else:
            address = os.path.join(d, "notify")
            sock.bind(address)
        yield sock, address
    finally:
        sock.close()
        shutil.rmtree(d, ignore_errors=True)


def receive(sock: socket.socket, timeout: float) -> str | None:
    sock.settimeout(timeout)
    try:
        return sock.recv(4096).decode()
    except socket.timeout:
        return None


@pytest.mark.parametrize("abstract,signum", [(False, signal.SIGTERM), (True, signal.SIGHUP)],
                         ids=["path-SIGTERM", "abstract-SIGHUP"])
def test_notify_ready_once_live_and_stopping_on_signal(client, bucket, mount, abstract, signum):
    upload_basics(client, bucket)
    mp = os.path.realpath(mount.new_mountpoint())
    log = os.path.join(LOG_DIR, f"notify-{bucket}.log")
    args = [BUCKETFS_BIN, "mount", f"gs://{bucket}", mp, "--foreground", "--endpoint", mount.gcs.url,
            "--anonymous", "--log-file", log]
    m = register(mount, mp, args)
    with notify_socket(abstract) as (sock, address):
        env = dict(TOOL_ENV, NOTIFY_SOCKET=address)
        proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        m.proc = proc
        try:
            ready = receive(sock, 60)
            # at the moment READY=1 arrives the mount answers
            live = in_proc_mounts(mp)
            names = sorted(os.listdir(mp)) if live else None
            assert ready == "READY=1", f"got {ready!r}; rc={proc.poll()}"
            assert live, f"READY=1 arrived before {mp} was in /proc/mounts"
            assert names == ["hello.txt", "photos"]
            assert fstype_of(mp) == "fuse.bucketfs"
            with open(os.path.join(mp, "hello.txt"), "rb") as f:
                assert f.read() == b"hello from the bucket\n"
            assert receive(sock, 0.2) is None, "nothing else before the stop"

            proc.send_signal(signum)
            assert receive(sock, 30) == "STOPPING=1"
            rc = proc.wait(60)
            out, err = proc.communicate()
            assert rc == 0, f"exit {rc}: {err}"
            assert not in_proc_mounts(mp), "the mount should be gone after a clean stop"
            assert not bucketfs_pids(mp)
            assert receive(sock, 0.2) is None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            unmount_now(mp)


def test_no_ready_when_the_mount_fails(bucket, mount):
    """A bucket that does not exist: an error and a non-zero exit, never READY=1."""
    mp = os.path.realpath(mount.new_mountpoint())
    args = [BUCKETFS_BIN, "mount", f"gs://{bucket}-missing", mp, "--foreground", "--endpoint", mount.gcs.url,
            "--anonymous"]
    register(mount, mp, args)
    with notify_socket(False) as (sock, address):
        p = subprocess.run(args, env=dict(TOOL_ENV, NOTIFY_SOCKET=address), capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL)
        try:
            assert p.returncode != 0
            assert "not found" in p.stderr
            assert receive(sock, 0.2) is None
        finally:
            unmount_now(mp)


# ---------------------------------------------------------------------------
# hardening and crashes: run bucketfs with the capability bounding set and
# no_new_privs the service gives it


def unit_sandbox() -> list[str]:
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is not installed")
    svc = read_unit(SYSTEMD / "bucketfs@.service")["Service"]
    caps = [c.lower().removeprefix("cap_") for c in svc["CapabilityBoundingSet"][0].split()]
    args = ["setpriv", "--bounding-set", ",".join(["-all"] + [f"+{c}" for c in caps]), "--inh-caps", "-all"]
    if svc.get("NoNewPrivileges") == ["yes"]:
        args.append("--no-new-privs")
    return args + ["--"]


def sandboxed_mount(mount, bucket: str, mp: str) -> subprocess.CompletedProcess:
    args = unit_sandbox() + [BUCKETFS_BIN, "mount", f"gs://{bucket}", mp, "--endpoint", mount.gcs.url,
                             "--anonymous", "--log-file", os.path.join(LOG_DIR, f"sandbox-{bucket}.log")]
    register(mount, mp, args)
    return subprocess.run(args, env=TOOL_ENV, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def mounted_here(mp: str) -> bool:
    """Whether ``mp`` (already a real path) is a mountpoint, by /proc/self/mountinfo
    alone: unlike os.path.realpath, this never stat()s the mount root, which
    would put its attributes in the kernel's cache."""
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == mp for line in f)


def crash(mp: str) -> None:
    """kill -9 bucketfs and its auto_unmount watcher together (as a cgroup
    kill or the OOM killer may): the mount stays behind, stale."""
    [pid], [watcher] = bucketfs_pids(mp), fusermount_pids(mp)
    os.kill(watcher, signal.SIGSTOP)  # so it cannot unmount between the two kills
    os.kill(pid, signal.SIGKILL)
    os.kill(watcher, signal.SIGKILL)
    assert wait_for(lambda: not bucketfs_pids(mp) and not fusermount_pids(mp), 10)
    assert mounted_here(mp)
    with pytest.raises(OSError) as e:
        os.listdir(mp)
    # ENOTCONN, or ECONNABORTED for a request the dying connection cut short
    assert e.value.errno in (errno.ENOTCONN, errno.ECONNABORTED)


def stale_message(mp: str) -> str:
    return f"bucketfs: mountpoint {mp} is a stale FUSE mount; clear it with: bucketfs unmount {mp}"


def test_kill_9_with_the_units_sandbox(client, bucket, mount):
    """Under the unit's capability set and no_new_privs: a mount works; after
    `kill -9` of bucketfs alone its auto_unmount watcher removes the mount;
    after `kill -9` of both the stale mount is reported by the next mount and
    `bucketfs unmount` (the unit's ExecStopPost, in the same sandbox) clears it."""
    upload_basics(client, bucket)
    mp = os.path.realpath(mount.new_mountpoint())
    try:
        p = sandboxed_mount(mount, bucket, mp)
        assert p.returncode == 0, p.stderr
        assert sorted(os.listdir(mp)) == ["hello.txt", "photos"]
        [pid] = bucketfs_pids(mp)
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
        assert re.search(r"^NoNewPrivs:\s+1$", status, re.M)
        assert re.search(r"^CapBnd:\s+0+200004$", status, re.M), status  # CAP_SYS_ADMIN, CAP_DAC_READ_SEARCH

        # 1. bucketfs alone dies: the auto_unmount watcher unmounts
        os.kill(pid, signal.SIGKILL)
        assert wait_for(lambda: not mounted_here(mp), 10), "auto_unmount should remove the mount"
        p = sandboxed_mount(mount, bucket, mp)
        assert p.returncode == 0, p.stderr
        assert sorted(os.listdir(mp)) == ["hello.txt", "photos"]

        # 2. bucketfs and its watcher die together: a stale mount
        crash(mp)
        p = sandboxed_mount(mount, bucket, mp)
        assert p.returncode != 0
        assert p.stderr.strip() == stale_message(mp)
        run(unit_sandbox() + [BUCKETFS_BIN, "unmount", mp])
        assert not mounted_here(mp)
        p = sandboxed_mount(mount, bucket, mp)
        assert p.returncode == 0, p.stderr
        assert sorted(os.listdir(mp)) == ["hello.txt", "photos"]
    finally:
        unmount_now(mp)
    assert not bucketfs_pids(mp)


def test_stale_mount_is_reported_when_the_root_was_stat_ed_before_the_crash(client, bucket, mount):
    upload_basics(client, bucket)
    mp = os.path.realpath(mount.new_mountpoint())
    try:
        p = sandboxed_mount(mount, bucket, mp)
        assert p.returncode == 0, p.stderr
        os.stat(mp)  # as `ls -l` of the parent, or any path lookup through realpath, would
        crash(mp)
        os.stat(mp)  # still answered from the cache
        p = sandboxed_mount(mount, bucket, mp)
        assert p.returncode != 0
        assert p.stderr.strip() == stale_message(mp)
    finally:
        # whatever the message, `bucketfs unmount` clears it
        if mounted_here(mp):
            run([BUCKETFS_BIN, "unmount", mp])
            assert not mounted_here(mp)
        unmount_now(mp)


# ---------------------------------------------------------------------------
# the mount(8) helper


def helper_naming(directory: Path, binary: str) -> Path:
    """A copy of the helper naming ``binary`` as the installed bucketfs, as
    install.sh writes it (so what it runs does not depend on this machine)."""
    text = HELPER.read_text()
    assert "\nBUCKETFS=/usr/local/bin/bucketfs\n" in text
    copy = directory / "mount.fuse.bucketfs"
    copy.write_text(text.replace("\nBUCKETFS=/usr/local/bin/bucketfs\n", f"\nBUCKETFS={binary}\n"))
    copy.chmod(0o755)
    return copy


def stub_bucketfs(directory: Path, says: str) -> Path:
    """An executable named bucketfs that prints ``says`` and its arguments."""
    directory.mkdir(parents=True, exist_ok=True)
    stub = directory / "bucketfs"
    stub.write_text(f'#!/bin/sh\necho "{says}: $*"\n')
    stub.chmod(0o755)
    return stub


def helper_dry_run(helper: Path, *args: str, env: dict | None = None) -> str:
    p = run(["sh", str(helper), *args], env=env or TOOL_ENV)
    return p.stderr.strip()


def test_helper_translates_options(tmp_path):
    installed = stub_bucketfs(tmp_path / "installed", "installed")
    helper = helper_naming(tmp_path, str(installed))
    out = helper_dry_run(helper, "gs://b/p", "/mnt/x", "-f", "-o",
                         "ro,_netdev,allow_other,uid=5,gid=6,file_mode=0640,dir_mode=0750,nofail,"
                         "endpoint=http://127.0.0.1:4443,anonymous,page_size=7,metadata-ttl=2.5,"
                         "negative_ttl=1,request_timeout=9,retry_deadline=20,log_level=debug,"
                         "log_file=/var/log/b.log,x-systemd.automount,x-systemd.mount-timeout=30,noauto,user,"
                         "defaults,noatime,credentials=/etc/bucketfs/key.json,access_token_file=/run/token,"
                         "metrics_addr=127.0.0.1:9100")
    assert out == ("mount.fuse.bucketfs: GOOGLE_APPLICATION_CREDENTIALS=/etc/bucketfs/key.json "
                   f"{installed} mount gs://b/p /mnt/x --endpoint http://127.0.0.1:4443 --anonymous "
                   "--page-size 7 --metadata-ttl 2.5 --negative-ttl 1 --request-timeout 9 --retry-deadline 20 "
                   "--log-level debug --log-file /var/log/b.log --access-token-file /run/token "
                   "--metrics-addr 127.0.0.1:9100 -o ro,allow_other,uid=5,gid=6,file_mode=0640,dir_mode=0750")
    # mount(8)'s other flags; an unknown option goes to bucketfs (which rejects it) unless sloppy
    assert helper_dry_run(helper, "b", "/m", "-nvf", "-o", "rw,frob=1") == \
        f"mount.fuse.bucketfs: {installed} mount b /m -o rw,frob=1"
    assert helper_dry_run(helper, "b", "/m", "-sf", "-o", "rw,frob=1", "-t", "fuse.bucketfs") == \
        f"mount.fuse.bucketfs: {installed} mount b /m -o rw"
    p = run(["sh", str(HELPER), "only-one-argument"], check=False)
    assert p.returncode != 0 and "usage" in p.stderr


def test_helper_translates_config_log_format_app_name_and_limits(tmp_path):
    installed = stub_bucketfs(tmp_path / "installed", "installed")
    helper = helper_naming(tmp_path, str(installed))
    out = helper_dry_run(helper, "b", "/m", "-f", "-o",
                         "config=/etc/bucketfs/b.yaml,log_format=json,app-name=photos,ro,max_connections=4,"
                         "max-requests-per-second=20,max_bytes_per_second=20000000")
    assert out == (f"mount.fuse.bucketfs: {installed} mount b /m --config /etc/bucketfs/b.yaml "
                   "--log-format json --app-name photos --max-connections 4 --max-requests-per-second 20 "
                   "--max-bytes-per-second 20000000 -o ro")


SYSTEM_DIRS = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def test_helper_falls_back_to_bucketfs_on_path(tmp_path):
    """Run from a checkout or copied by hand (no install.sh), the installed
    path is absent: the helper runs `bucketfs` from the caller's PATH."""
    on_path = stub_bucketfs(tmp_path / "bin", "from PATH")
    env = dict(TOOL_ENV, PATH=f"{on_path.parent}:{TOOL_ENV.get('PATH', '/usr/bin:/bin')}")
    helper = helper_naming(tmp_path, str(tmp_path / "absent" / "bucketfs"))
    p = run(["sh", str(helper), "gs://b", "/m", "-o", "ro"], env=env)
    assert p.stdout.strip() == "from PATH: mount gs://b /m -o ro", p.stderr
    assert helper_dry_run(helper, "b", "/m", "-f", env=env) == f"mount.fuse.bucketfs: {on_path} mount b /m"
    if not os.path.exists("/usr/local/bin/bucketfs"):  # the checkout's own helper, as it is
        p = run(["sh", str(HELPER), "gs://b", "/m"], env=env)
        assert p.stdout.strip() == "from PATH: mount gs://b /m", p.stderr

    # An installed binary that exists wins over PATH.
    installed = stub_bucketfs(tmp_path / "installed", "installed")
    p = run(["sh", str(helper_naming(tmp_path, str(installed))), "b", "/m"], env=env)
    assert p.stdout.strip() == "installed: mount b /m", p.stderr

    # Neither: one clear line and a failure, not a shell's "exec: not found".
    if shutil.which("bucketfs", path=SYSTEM_DIRS) is None:
        helper = helper_naming(tmp_path, str(tmp_path / "absent" / "bucketfs"))
        p = run(["sh", str(helper), "b", "/m"], env=dict(TOOL_ENV, PATH="/usr/bin:/bin"), check=False)
        assert p.returncode == 1
        assert p.stderr.strip() == ("mount.fuse.bucketfs: bucketfs is neither at "
                                    f"{tmp_path}/absent/bucketfs nor on PATH (install it with scripts/install.sh)")


def helper_mount(source: str, mp: str, options: str, cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", "-t", "fuse.bucketfs", source, mp, "-o", options], capture_output=True,
                          text=True, timeout=60, env=TOOL_ENV, cwd=cwd, stdin=subprocess.DEVNULL)


def test_mount_t_fuse_bucketfs_and_umount(client, bucket, mount, sbin_helper, tmp_path):
    upload_basics(client, bucket)
    mp = os.path.realpath(mount.new_mountpoint())
    log = os.path.join(LOG_DIR, f"helper-{bucket}.log")
    opts = (f"_netdev,nofail,x-systemd.automount,endpoint={mount.gcs.url},anonymous,allow_other,"
            f"page_size=7,log_file={log}")
    register(mount, mp, ["mount", "-t", "fuse.bucketfs", bucket, mp, "-o", opts])
    try:
        p = helper_mount(bucket, mp, opts, cwd=str(tmp_path))  # a bare bucket name, as in fstab
        assert p.returncode == 0, p.stderr
        # mount(8) returned: the mount is live already
        assert fstype_of(mp) == "fuse.bucketfs"
        assert sorted(os.listdir(mp)) == ["hello.txt", "photos"]
        assert os.listdir(os.path.join(mp, "photos", "2024")) == ["a.jpg"]
        with open(os.path.join(mp, "hello.txt"), "rb") as f:
            assert f.read() == b"hello from the bucket\n"
        [pid] = bucketfs_pids(mp)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().decode().split("\0")
        assert os.path.realpath(f"/proc/{pid}/exe") == str(sbin_helper)  # the installed binary
        assert "--page-size" in argv and argv[argv.index("--page-size") + 1] == "7"
        assert os.path.getsize(log) > 0
        with open("/proc/self/mountinfo") as f:
            line = next(l for l in f if l.split()[4] == os.path.realpath(mp))
        assert "allow_other" in line
        # writable by default: an xattr write goes through
        run(["setfattr", "-n", "user.contentType", "-v", "text/x-test", os.path.join(mp, "hello.txt")])
        assert client.get(bucket, "hello.txt")["contentType"] == "text/x-test"

        p = subprocess.run(["umount", mp], capture_output=True, text=True, timeout=60, env=TOOL_ENV)
        assert p.returncode == 0, p.stderr
        assert not in_proc_mounts(mp)
        assert wait_for(lambda: not bucketfs_pids(mp), 15), "bucketfs should exit after umount"
    finally:
        unmount_now(mp)


def test_mount_helper_ro_and_uid(client, bucket, mount, sbin_helper, tmp_path):
    upload_basics(client, bucket)
    mp = os.path.realpath(mount.new_mountpoint())
    opts = f"ro,uid=1234,gid=4321,file_mode=0640,endpoint={mount.gcs.url},anonymous"
    register(mount, mp, ["mount", "-t", "fuse.bucketfs", f"gs://{bucket}", mp, "-o", opts])
    try:
        p = helper_mount(f"gs://{bucket}", mp, opts, cwd=str(tmp_path))
        assert p.returncode == 0, p.stderr
        f = os.path.join(mp, "hello.txt")
        assert run(["stat", "-c", "%u %g %a", f]).stdout.split() == ["1234", "4321", "640"]
        s = run(["setfattr", "-n", "user.contentType", "-v", "x", f], check=False)
        assert s.returncode != 0 and "Read-only file system" in s.stderr, s.stderr
        assert client.get(bucket, "hello.txt")["contentType"] == "text/plain"
        assert "ro" in fstype_line_options(mp)
        p = subprocess.run(["umount", mp], capture_output=True, text=True, timeout=60, env=TOOL_ENV)
        assert p.returncode == 0, p.stderr
        assert not in_proc_mounts(mp)
    finally:
        unmount_now(mp)


def fstype_line_options(mp: str) -> list[str]:
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if fields[1] == os.path.realpath(mp):
                return fields[3].split(",")
    return []


def test_fstab_line_with_a_prefix(client, bucket, mount, sbin_helper, tmp_path):
    """An fstab line of type fuse.bucketfs (mount -T FILE MOUNTPOINT reads it)."""
    upload_basics(client, bucket)
    mp = os.path.realpath(mount.new_mountpoint())
    fstab = tmp_path / "fstab"
    fstab.write_text(f"# test\n{bucket}/photos {mp} fuse.bucketfs "
                     f"_netdev,nofail,anonymous,endpoint={mount.gcs.url},dir_mode=0750 0 0\n")
    register(mount, mp, ["mount", "-T", fstab, mp])
    try:
        p = subprocess.run(["mount", "-T", str(fstab), mp], capture_output=True, text=True, timeout=60,
                           env=TOOL_ENV, cwd=str(tmp_path))
        assert p.returncode == 0, p.stderr
        assert os.listdir(mp) == ["2024"]
        assert run(["stat", "-c", "%a", os.path.join(mp, "2024")]).stdout.strip() == "750"
        p = subprocess.run(["umount", mp], capture_output=True, text=True, timeout=60, env=TOOL_ENV)
        assert p.returncode == 0, p.stderr
        assert not in_proc_mounts(mp)
    finally:
        unmount_now(mp)


def test_mount_helper_reports_failures(bucket, mount, sbin_helper, tmp_path):
    mp = os.path.realpath(mount.new_mountpoint())
    register(mount, mp, ["mount", "-t", "fuse.bucketfs"])
    try:
        p = helper_mount(f"gs://{bucket}-missing", mp, f"endpoint={mount.gcs.url},anonymous", cwd=str(tmp_path))
        assert p.returncode != 0
        assert f"bucket {bucket}-missing not found" in p.stderr
        p = helper_mount(f"gs://{bucket}", mp, f"endpoint={mount.gcs.url},anonymous,frobnicate", cwd=str(tmp_path))
        assert p.returncode != 0
        assert "unknown mount option 'frobnicate'" in p.stderr
        assert not is_mounted(mp)
    finally:
        unmount_now(mp)


# ---------------------------------------------------------------------------
# install


def test_install_into_destdir(tmp_path, bucketfs_bin):
    try:
        dest = tmp_path / "dest"
        run_install(str(dest))
        binary = dest / "usr/local/bin/bucketfs"
        version = run([BUCKETFS_BIN, "--version"]).stdout.strip()
        assert run([binary, "--version"]).stdout.strip() == version
        helper = dest / "sbin/mount.fuse.bucketfs"
        assert os.access(helper, os.X_OK)
        assert "\nBUCKETFS=/usr/local/bin/bucketfs\n" in helper.read_text()  # the final path, not DESTDIR's
        unit = dest / "usr/local/lib/systemd/system/bucketfs@.service"
        assert read_unit(unit)["Service"]["ExecStart"] == read_unit(SYSTEMD / "bucketfs@.service")["Service"]["ExecStart"]
        man = (dest / "usr/local/share/man/man8/bucketfs.8").read_text()
        assert man.startswith(".TH BUCKETFS 8 ") and f"bucketfs {version}" in man.splitlines()[0]
        assert "\\-\\-metadata\\-ttl" in man or "--metadata-ttl" in man
        assert (dest / "usr/local/share/man/man8/mount.fuse.bucketfs.8").read_text() == ".so man8/bucketfs.8\n"
        for example in ("mnt-photos.mount", "fstab.example", "bucketfs.env.example"):
            assert (dest / "usr/local/share/doc/bucketfs/examples" / example).is_file()
        assert (dest / "etc/bucketfs").is_dir()
        if shutil.which("man") and shutil.which("groff"):
            page = run(["man", "-l", str(dest / "usr/local/share/man/man8/bucketfs.8")],
                       env=dict(TOOL_ENV, MANWIDTH="100", MAN_KEEP_FORMATTING="0")).stdout
            assert "mount.fuse.bucketfs" in page and "--foreground" in page

        # idempotent; PREFIX and SYSCONFDIR reach the installed files
        before = {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()}
        run_install(str(dest))
        assert {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()} == before
        run_install(str(tmp_path / "usr"), PREFIX="/usr", SYSCONFDIR="/etc/x")
        unit = (tmp_path / "usr/usr/lib/systemd/system/bucketfs@.service").read_text()
        assert "ExecStart=/usr/bin/bucketfs mount" in unit and "EnvironmentFile=/etc/x/bucketfs/%i.env" in unit
        assert "\nBUCKETFS=/usr/bin/bucketfs\n" in (tmp_path / "usr/sbin/mount.fuse.bucketfs").read_text()
        assert run([tmp_path / "usr/usr/bin/bucketfs", "--version"]).stdout.strip() == version
    finally:  # two copies of an 80 MB binary
        shutil.rmtree(tmp_path / "dest", ignore_errors=True)
        shutil.rmtree(tmp_path / "usr", ignore_errors=True)


def test_install_refuses_a_missing_binary(tmp_path):
    p = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=60,
                       env=dict(TOOL_ENV, BUCKETFS_SKIP_BUILD="1", BUCKETFS_BINARY=str(tmp_path / "nope"),
                                DESTDIR=str(tmp_path / "d")))
    assert p.returncode != 0 and "no executable" in p.stderr
    assert not (tmp_path / "d").exists()

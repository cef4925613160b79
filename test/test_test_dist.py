"""make test-dist stopped by a SIGTERM (a CI's timeout, a supervisor) stops
what runs in the root and removes the root, at once.

scripts/test-dist.sh runs here on a stand-in for a suite's cached root: a
tarball with bash, env and sleep and a `make` that only sleeps, in a cache
directory of the test's own (MRUBY_TEST_DIST_CACHE), so that nothing is
downloaded and the run waits in its root until it is signalled.  (The
run's log goes where test-dist.sh puts every run's: build/.)
"""

import os
import shutil
import signal
import subprocess
import tarfile
import time

import pytest

import harness

SCRIPT = os.path.join(harness.REPO, "scripts", "test-dist.sh")
START_TIMEOUT = 60
STOP_TIMEOUT = 20

# make test inside a test-dist root (which test-dist.sh marks so) leaves
# test-dist to the host's own make test.
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or os.path.exists("/etc/mruby-test-dist"),
    reason="test-dist needs root (chroot, namespaces) on the host")


def libraries(program):
    out = subprocess.run(["ldd", program], capture_output=True, text=True,
                         check=True).stdout
    return [word for line in out.splitlines() for word in line.split()
            if word.startswith("/")]


def stand_in_root(tmp_path):
    """The cache directory whose bookworm.tar test-dist.sh takes for the
    cached bookworm root."""
    root = tmp_path / "root"
    for d in ("usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "etc/apt/"
              "sources.list.d", "etc/ssl/certs", "proc", "sys", "dev", "run",
              "var/cache/apt/archives", "root"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for link in ("bin", "lib", "lib64", "sbin"):
        os.symlink("usr/" + link, root / link)
    for program in ("/usr/bin/bash", "/usr/bin/env", "/usr/bin/sleep"):
        for path in [program] + libraries(program):
            dest = root / os.path.relpath(os.path.realpath(
                os.path.dirname(path)), "/") / os.path.basename(path)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not dest.exists():
                shutil.copy2(os.path.realpath(path), dest)
    make = root / "usr/bin/make"
    make.write_text("#!/bin/bash\necho \"make $*: waiting\"\nexec sleep 600\n")
    make.chmod(0o755)
    cache = tmp_path / "cache"
    cache.mkdir()
    with tarfile.open(cache / "bookworm.tar", "w") as tar:
        tar.add(root, arcname=".")
    return cache


def new_roots(before):
    return [os.path.join("/var/tmp", d)
            for d in set(os.listdir("/var/tmp")) - before
            if d.startswith("mruby-test-dist.bookworm.")]


def sleeping_in(root):
    """The pids of the `sleep 600` processes whose root is root."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            where = os.readlink(f"/proc/{pid}/root")
        except OSError:
            continue
        if cmd == b"sleep\x00600\x00" and where == root:
            found.append(int(pid))
    return found


def wait_for(what, timeout):
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_sigterm_stops_the_run_and_removes_its_root(tmp_path):
    cache = stand_in_root(tmp_path)
    before = set(os.listdir("/var/tmp"))
    out_path = tmp_path / "test-dist.out"
    with open(out_path, "wb") as out:
        # a session of its own: on a failure, the whole of it (unshare,
        # and so the root's processes) is killed below
        proc = subprocess.Popen(
            ["bash", SCRIPT, "bookworm", "test"], stdout=out,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(os.environ, MRUBY_TEST_DIST_CACHE=str(cache)),
            start_new_session=True)
    try:
        assert wait_for(lambda: len(new_roots(before)) == 1
                        or proc.poll() is not None, START_TIMEOUT)
        roots = new_roots(before)
        assert len(roots) == 1, out_path.read_text()
        root = roots[0]
        assert wait_for(lambda: sleeping_in(root) or proc.poll() is not None,
                        START_TIMEOUT), "the root's make never ran"
        assert proc.poll() is None, out_path.read_text()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(STOP_TIMEOUT)
        text = out_path.read_text()
        assert rc == 143, text
        assert "FAILED (bookworm)" in text
        # the kernel kills the namespace's processes as its init dies
        assert wait_for(lambda: not sleeping_in(root), 5)
        assert not os.path.exists(root), text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for left in new_roots(before):
            # nothing is mounted there: the mounts were the namespace's
            shutil.rmtree(left, ignore_errors=True)

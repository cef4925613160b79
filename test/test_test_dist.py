"""make test-dist stopped by a SIGTERM (a CI's timeout, a supervisor) stops
what runs in the root and removes the root, at once.

scripts/test-dist.sh runs here on a stand-in for a suite's cached root: a
tarball with bash, env and sleep and a `make` that only sleeps, in a cache
directory of the test's own (MRUBY_TEST_DIST_CACHE), so that nothing is
downloaded and the run waits in its root until it is signalled.
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
    """The tarball test-dist.sh takes for a cached bookworm root."""
    root = tmp_path / "root"
    for d in ("usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "etc/apt/"
              "sources.list.d", "etc/ssl/certs", "proc", "sys", "dev", "run",
              "var/cache/apt/archives", "root"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for link in ("bin", "lib", "lib64", "sbin"):
        os.symlink("usr/" + link, root / link)
    for program in ("/usr/bin/bash", "/usr/bin/env", "/usr/bin/sleep"):
        for path in [program] + libraries(program):
            real = os.path.realpath(path)
            dest = root / os.path.relpath(os.path.realpath(
                os.path.dirname(path)), "/") / os.path.basename(path)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not dest.exists():
                shutil.copy2(real, dest)
    make = root / "usr/bin/make"
    make.write_text("#!/bin/bash\necho \"make $*: waiting\"\nexec sleep 600\n")
    make.chmod(0o755)
    cache = tmp_path / "cache"
    cache.mkdir()
    with tarfile.open(cache / "bookworm.tar", "w") as tar:
        tar.add(root, arcname=".")
    return cache


def sleeping_in_roots():
    """The pids of `sleep 600` processes whose root is a test-dist root."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            root = os.readlink(f"/proc/{pid}/root")
        except OSError:
            continue
        if cmd == b"sleep\x00600\x00" and "/mruby-test-dist.bookworm." in root:
            found.append(int(pid))
    return found


def test_sigterm_stops_the_run_and_removes_its_root(tmp_path):
    cache = stand_in_root(tmp_path)
    before = set(os.listdir("/var/tmp"))
    out = open(tmp_path / "test-dist.out", "wb")
    proc = subprocess.Popen(["bash", SCRIPT, "bookworm", "test"],
                            env=dict(os.environ, MRUBY_TEST_DIST_CACHE=str(cache)),
                            stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not sleeping_in_roots():
            assert proc.poll() is None, (tmp_path / "test-dist.out").read_text()
            assert time.monotonic() < deadline, "the root's make never ran"
            time.sleep(0.2)
        roots = [d for d in set(os.listdir("/var/tmp")) - before
                 if d.startswith("mruby-test-dist.bookworm.")]
        assert len(roots) == 1
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(STOP_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = (tmp_path / "test-dist.out").read_text()
    assert rc == 143, text
    assert "FAILED (bookworm)" in text
    assert sleeping_in_roots() == []
    assert not os.path.exists(os.path.join("/var/tmp", roots[0])), text

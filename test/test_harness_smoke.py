"""The harness itself: servers start, serve a static file, stop, clean up."""

import os

import pytest

import harness


@pytest.mark.parametrize("mruby", [False, True], ids=["plain", "mruby"])
@pytest.mark.parametrize("mpm", ["event", "prefork"])
def test_apache_static(apache, mpm, mruby):
    a = apache(mpm=mpm, mruby=mruby, docs={"hello.txt": "static hello\n"})
    r = a.get("/hello.txt")
    assert r.status_code == 200
    assert r.text == "static hello\n"
    assert a.get("/missing.txt").status_code == 404
    assert a.worker_pids(), "no Apache children"
    assert "resuming normal operations" in a.error_log()


def test_apache_stop_leaves_nothing(apache):
    a = apache(mruby=False)
    pids = [a.master_pid()] + a.worker_pids()
    a.stop()
    assert not [p for p in pids if os.path.exists(f"/proc/{p}")]
    assert not harness.port_open(a.port)


def test_apache_graceful(apache):
    a = apache(mruby=False, docs={"x.txt": "x"})
    before = set(a.worker_pids())
    a.graceful()
    assert not (set(a.worker_pids()) & before)
    assert a.get("/x.txt").text == "x"


def test_apache_configtest(apache):
    good = apache(mruby=False, start=False)
    rc, out = good.configtest()
    assert rc == 0, out
    bad = apache("NoSuchDirective on", mruby=False, start=False)
    rc, out = bad.configtest()
    assert rc != 0
    assert "NoSuchDirective" in out


def test_apache_start_failure_is_reported(apache):
    with pytest.raises(harness.HarnessError) as e:
        apache("NoSuchDirective on", mruby=False)
    assert "NoSuchDirective" in str(e.value)


@pytest.mark.parametrize("mruby", [False, True], ids=["plain", "mruby"])
def test_nginx_static(nginx, mruby):
    n = nginx("location / { }", mruby=mruby,
              docs={"hello.txt": "static hello\n"})
    r = n.get("/hello.txt")
    assert r.status_code == 200
    assert r.text == "static hello\n"
    assert n.get("/missing.txt").status_code == 404
    assert len(n.worker_pids()) == 1


def test_nginx_reload_and_configtest(nginx):
    n = nginx("location = /r { return 200 'one'; }", workers=2, mruby=False)
    assert n.get("/r").text == "one"
    before = set(n.worker_pids())
    n.conf = "location = /r { return 200 'two'; }"
    n.reload()
    assert not (set(n.worker_pids()) & before)
    assert n.get("/r").text == "two"
    n.conf = "location = /r { no_such_directive; }"
    rc, out = n.configtest()
    assert rc != 0 and "no_such_directive" in out


def test_redis_ping(redis_server):
    assert redis_server.command("PING") == "+PONG"
    assert redis_server.command("SET", "k", "v{1}") == "+OK"
    assert redis_server.command("GET", "k") == "v{1}"


def test_make_run_serves_every_example():
    """examples/run.py (make run) starts both servers with every example,
    leaves none out, and each advertised URL answers without a 5xx."""
    import re
    import subprocess
    import sys
    run = os.path.join(harness.REPO, "examples", "run.py")
    p = subprocess.run(
        [sys.executable, run, "--check",
         "--apache-port", str(harness.free_port()),
         "--nginx-port", str(harness.free_port())],
        capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "left out" not in out and "did not start" not in out, out
    codes = re.findall(r"^  (\d{3}|error.*?) (http://\S+)", out, re.M)
    assert len(codes) >= 2, out
    bad = [(c, u) for c, u in codes if not c.isdigit() or int(c) >= 500]
    assert not bad, out

"""The harness itself: servers start, serve a static file, stop, clean up."""

import glob
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


def promised_codes():
    """{(server, path): status} from the examples' `# try: /path [what]`
    lines: the status `what` starts with, or 200."""
    import re
    promised = {}
    for conf in glob.glob(os.path.join(harness.REPO, "examples/*/*.conf")):
        server = "apache" if conf.endswith("apache.conf") else "nginx"
        with open(conf) as f:
            for line in f:
                m = re.match(r"# try: (\S+)\s*(\d{3}\b)?", line)
                if m:
                    promised[server, m.group(1)] = int(m.group(2) or 200)
    return promised


def test_make_run_serves_every_example():
    """examples/run.py (make run) starts both servers with every example,
    leaves none out, and each advertised URL answers as its `# try:` line
    says."""
    import re
    import subprocess
    import sys
    run = os.path.join(harness.REPO, "examples", "run.py")
    ports = {"apache": harness.free_port(), "nginx": harness.free_port()}
    p = subprocess.run(
        [sys.executable, run, "--check",
         "--apache-port", str(ports["apache"]),
         "--nginx-port", str(ports["nginx"])],
        capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "left out" not in out and "did not start" not in out, out
    by_port = {str(port): server for server, port in ports.items()}
    answered = {
        (by_port[port], path): int(code) if code.isdigit() else code
        for code, port, path in re.findall(
            r"^  (\d{3}|error.*?) http://127\.0\.0\.1:(\d+)(\S+)", out,
            re.M)}
    assert answered == promised_codes(), out

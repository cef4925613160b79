"""The harness itself, not the product: servers without the modules start,
serve a static file, reload, stop and leave nothing; ports stay reserved.
`make test` runs these first, apart from the product's tests."""

import os

import pytest

import harness


@pytest.mark.parametrize("mpm", ["event", "prefork"])
def test_apache_static(apache, mpm):
    a = apache(mpm=mpm, mruby=False, docs={"hello.txt": "static hello\n"})
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


def test_nginx_static(nginx):
    n = nginx("location / { }", mruby=False,
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


def test_reserved_port_is_not_handed_out_again_and_servers_bind_it():
    """free_port() keeps its port bound: bind(0) elsewhere never gets it,
    while a server binding with SO_REUSEADDR still listens on it."""
    import socket
    port = harness.free_port()
    others = []
    for _ in range(200):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        others.append(s)
    assert port not in {s.getsockname()[1] for s in others}
    for s in others:
        s.close()
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen(1)

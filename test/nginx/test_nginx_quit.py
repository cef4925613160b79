"""ngx_mruby: a graceful quit (nginx -s quit, SIGQUIT) and the old worker
of a reload leave no connection of ours open: nginx's worker alerts
("open socket #N left in connection M", then "aborting") for every
connection still open after the modules' exit hooks, and the master then
exits.  The file watch of `stat` scripts and Redis links are connections
of the worker.

Each wait is for a condition, bounded; nothing relies on a fixed pause."""

import signal
import socket
import time

from harness import read_until_closed


STAT_SCRIPT = "Nginx.rputs 'stat ' + Redis.new('127.0.0.1', Nginx::Request.new.args.to_i, timeout: 30).get('k').to_s\n"


def wait_for(cond, what, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def serve(nginx, redis_server):
    n = nginx(conf="location = /stat { mruby_content_handler {dir}/stat.rb; }",
              start=False)
    n.write("stat.rb", STAT_SCRIPT)
    n.start()
    redis_server.command("SET", "k", "v")
    for _ in range(3):
        r = n.get(f"/stat?{redis_server.port}")
        assert (r.status_code, r.text) == (200, "stat v")
    return n


def assert_no_alert(n):
    alerts = [l for l in n.error_log().splitlines() if "[alert]" in l]
    assert alerts == []


def test_a_graceful_quit_leaves_no_connection_open(nginx, redis_server):
    n = serve(nginx, redis_server)
    n.proc.send_signal(signal.SIGQUIT)
    wait_for(lambda: n.proc.poll() is not None, "the master to exit")
    assert n.proc.returncode == 0
    assert_no_alert(n)


def test_a_reloads_old_worker_leaves_no_connection_open(nginx, redis_server):
    n = serve(nginx, redis_server)
    old = n.worker_pids()
    n.reload()
    wait_for(lambda: all(p not in n.worker_pids() for p in old),
             "the old worker to exit")
    r = n.get(f"/stat?{redis_server.port}")
    assert (r.status_code, r.text) == (200, "stat v")
    assert_no_alert(n)


def test_the_stream_modules_graceful_quit_leaves_no_connection_open(nginx):
    stream = """
server {
    listen 127.0.0.1:{port2};
    mruby_stream {dir}/stream.rb;
    return "served\\n";
}"""
    n = nginx(stream_conf=stream,
              files={"stream.rb": "Nginx.return Nginx::Stream::OK\n"})
    with socket.create_connection(("127.0.0.1", n.port2), timeout=10) as s:
        assert read_until_closed(s) == b"served\n"
    n.proc.send_signal(signal.SIGQUIT)
    wait_for(lambda: n.proc.poll() is not None, "the master to exit")
    assert n.proc.returncode == 0
    assert_no_alert(n)

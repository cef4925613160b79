"""Apache::Scoreboard: the server's load as mod_status sees it, with the
original mod_mruby's shapes: status a Hash of client address to the status
name of the worker serving it (the original's demo page walks it with
each_key), counter a Hash of worker slots by status name."""

import ast
import time

import pytest


def handler(apache, code, **kw):
    return apache("<Location /t>\n    mrubyHandlerMiddle {dir}/t.rb\n"
                  "</Location>\n", files={"t.rb": code}, **kw)


# Every status name of scoreboard.h, as the original's counter keys them.
NAMES = ["SERVER_DEAD", "SERVER_STARTING", "SERVER_READY",
         "SERVER_BUSY_READ", "SERVER_BUSY_WRITE", "SERVER_BUSY_KEEPALIVE",
         "SERVER_BUSY_LOG", "SERVER_BUSY_DNS", "SERVER_CLOSING",
         "SERVER_GRACEFUL", "SERVER_IDLE_KILL"]


@pytest.mark.parametrize("mpm", ["event", "prefork"])
def test_scoreboard(apache, mpm):
    a = handler(apache, """\
sb = Apache::Scoreboard.new
la = sb.loadavg
clients = []
sb.status.each_key { |k| clients << k }
Apache.rputs [sb.busy_worker, sb.idle_worker > 0, sb.total_access >= 0,
              sb.uptime >= 0, sb.restart_time > 1000000000, la.size,
              la.all? { |x| x.is_a?(Float) }, sb.pid > 1,
              sb.server_limit * sb.thread_limit,
              sb.counter.values.inject(0) { |s, n| s + n },
              sb.counter["SERVER_BUSY_WRITE"] >= 1, sb.counter.keys,
              clients, sb.status["127.0.0.1"],
              sb.total_kbyte >= 0].inspect
""", mpm=mpm)

    def ask():
        got = a.get("/t").text
        return ast.literal_eval(got.replace("true", "True").replace(
            "false", "False").replace("nil", "None"))
    # A prefork child can serve before its parent wrote the child's pid
    # into the scoreboard (the parent does it after fork returns), and
    # mod_status, like busy_worker, counts no worker of a process without
    # a pid: ask until the parent has caught up.
    deadline = time.monotonic() + 10
    v = ask()
    while v[0] != 1 and time.monotonic() < deadline:
        time.sleep(0.1)
        v = ask()
    assert v[0] == 1            # this request's worker
    assert v[1:8] == [True, True, True, True, 3, True, True]
    # one slot per ServerLimit x ThreadLimit of the harness's config
    # (prefork: ThreadLimit 1), every slot counted under one name
    assert v[8] == v[9] == {"event": 2 * 64, "prefork": 32}[mpm]
    assert v[10] is True
    assert v[11] == NAMES
    # the one client is this test, served by a worker writing the answer
    assert v[12] == ["127.0.0.1"]
    assert v[13] == "SERVER_BUSY_WRITE"
    assert v[14] is True


def test_scoreboard_total_access_grows(apache):
    a = handler(apache, "Apache.rputs Apache::Scoreboard.new.total_access.to_s",
                mpm="prefork", mpm_conf="StartServers 1\nMinSpareServers 1\n"
                "MaxSpareServers 1\nMaxRequestWorkers 1\n")
    counts = [int(a.get("/t").text) for _ in range(4)]
    assert counts == [counts[0] + i for i in range(4)]

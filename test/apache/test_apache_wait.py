"""Content handlers that sleep give their thread back on the event MPM
(SUSPENDED and a timed callback, as httpd's mod_dialup); elsewhere a sleep
blocks the thread as before.

The tests wait for conditions, not for time: requests that must be asleep
together show it by meeting in a shared dictionary while the server has
fewer threads than sleepers."""

import concurrent.futures
import socket
import time

import requests

# One event child with 4 threads; AsyncRequestWorkerFactor lets it accept
# more connections than threads (the MPM's own limit, as for keep-alive).
FOUR_THREADS = ("StartServers 1\nServerLimit 1\nThreadsPerChild 4\n"
                "ThreadLimit 4\nMinSpareThreads 1\nMaxSpareThreads 4\n"
                "MaxRequestWorkers 4\nAsyncRequestWorkerFactor 100\n"
                "MaxConnectionsPerChild 0\n")

SLEEPERS = 40

# /sleep counts itself in, then sleeps in small steps until /go (or 60 s);
# /count and /go answer at once.
MEET = """\
mrubySharedDict meet 1m
<Location /sleep>
    mrubyHandlerMiddleCode 'd = Apache::SharedDict.new("meet"); \
d.incr("in", 1, init: 0); t = Time.now + 60; \
sleep 0.05 until d["go"] || Time.now > t; \
Apache.rputs(d["go"] ? "woke" : "timed out")'
</Location>
<Location /count>
    mrubyHandlerMiddleCode 'Apache.rputs Apache::SharedDict.new("meet")["in"].to_i'
</Location>
<Location /go>
    mrubyHandlerMiddleCode 'Apache::SharedDict.new("meet")["go"] = 1; Apache.rputs "go"'
</Location>
"""


def wait_for(what, check, timeout=60.0):
    """Polls check() until it returns true; each poll is bounded."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except requests.RequestException as e:
            last = e
        time.sleep(0.05)
    raise AssertionError(f"{what}: not after {timeout} s (last: {last!r})")


def test_more_sleepers_than_threads_all_sleep_at_once(apache):
    """40 handlers asleep at the same moment in a child of 4 threads, and
    a request that does not sleep is answered meanwhile: a sleeping script
    holds no thread.  (With sleeps that block, /count is not answered
    while 4 sleepers hold the 4 threads.)"""
    a = apache(MEET, mpm="event", mpm_conf=FOUR_THREADS)
    with concurrent.futures.ThreadPoolExecutor(SLEEPERS) as pool:
        sleepers = [pool.submit(requests.get, a.url("/sleep"), timeout=120)
                    for _ in range(SLEEPERS)]
        wait_for("all sleepers in", lambda: int(
            requests.get(a.url("/count"), timeout=2).text) == SLEEPERS)
        assert requests.get(a.url("/go"), timeout=10).text == "go"
        rs = [f.result() for f in sleepers]
    assert [r.status_code for r in rs] == [200] * SLEEPERS
    assert {r.text for r in rs} == {"woke"}
    # the MPM cannot take a suspended connection back (httpd 2.4): the
    # response that waited ends its connection, and says so
    assert {r.headers.get("Connection") for r in rs} == {"close"}


def test_sleeps_that_cannot_suspend_block_as_before(apache):
    """prefork, and phases other than the content handler on event: the
    script sleeps on its thread (Kernel#sleep, usleep, Apache.sleep,
    Apache::Async.sleep) and the connection stays open."""
    script = ("t = Time.now; sleep 0.05; usleep 20_000; Apache.sleep 0.02; "
              "Apache::Async.sleep 10; Apache.rputs(Time.now - t >= 0.1)")
    conf = ("<Location /t>\n    mrubyHandlerMiddleCode '" + script + "'\n"
            "</Location>\n<Location /a>\n    mrubyAccessCheckerMiddleCode "
            "'sleep 0.05; Apache.return Apache::DECLINED'\n"
            "    mrubyHandlerMiddleCode 'Apache.rputs \"after access\"'\n"
            "</Location>\n")
    pre = apache(conf, mpm="prefork")
    s = requests.Session()
    r = s.get(pre.url("/t"), timeout=30)
    assert (r.status_code, r.text) == (200, "true"), pre.error_log()[-2000:]
    assert r.headers.get("Connection") != "close"
    assert s.get(pre.url("/t"), timeout=30).text == "true"

    ev = apache(conf, mpm="event")
    r = requests.get(ev.url("/a"), timeout=30)
    assert (r.status_code, r.text) == (200, "after access")
    assert r.headers.get("Connection") != "close"
    # the handler's sleeps suspend on event, and add up the same
    r = requests.get(ev.url("/t"), timeout=30)
    assert (r.status_code, r.text) == (200, "true"), ev.error_log()[-2000:]


def test_exception_after_the_resume_is_a_500_with_file_and_line(apache):
    # info: the one-line error (at debug its frames get lines of their own)
    a = apache("<Location /t>\n    mrubyHandlerMiddle {dir}/t.rb\n"
               "</Location>\n", mpm="event", mpm_conf=FOUR_THREADS,
               loglevel="info",
               files={"t.rb": "Apache.rputs 'never sent'\nsleep 0.05\n"
                              "raise 'broken after the wait'\n"})
    r = requests.get(a.url("/t"), timeout=30)
    assert r.status_code == 500
    assert "never sent" not in r.text and "broken" not in r.text
    log = a.wait_log("broken after the wait")
    line = [l for l in log.splitlines() if "broken after the wait" in l][0]
    assert "RuntimeError" in line and "t.rb:3" in line, line
    # the thread and interpreter it ran in serve on
    assert requests.get(a.url("/t"), timeout=30).status_code == 500


def test_client_that_leaves_mid_sleep_frees_its_coroutine(apache):
    """The script is cancelled (its ensure runs) within the second the
    waiting request looks at its socket, long before its 30 s sleep ends,
    and no coroutine is left alive."""
    a = apache("<Location /long>\n    mrubyHandlerMiddleCode 'begin; "
               "Apache.errlogger Apache::APLOG_NOTICE, \"asleep\"; sleep 30; "
               "ensure; Apache.errlogger Apache::APLOG_NOTICE, "
               "\"ensure ran\"; end'\n</Location>\n"
               "<Location /stats>\n    mrubyHandlerMiddleCode "
               "'Apache.rputs Apache::Async.coroutines.inspect'\n"
               "</Location>\n", mpm="event", mpm_conf=FOUR_THREADS)
    with socket.create_connection(("127.0.0.1", a.port), timeout=10) as s:
        s.sendall(b"GET /long HTTP/1.1\r\nHost: t\r\n\r\n")
        a.wait_log("asleep", timeout=30)
    log = a.wait_log("ensure ran", timeout=15)
    assert "the client went away while the script waited" in log
    # the interpreter given back last is the one the script waited in: its
    # one live coroutine is the one /stats runs on (its code names Async)
    assert requests.get(a.url("/stats"), timeout=10).text.startswith("[1,")


def test_sleep_inside_blocks_and_methods_that_c_called(apache):
    """The handler suspends at any call depth: in a Hash default block, a
    to_s that interpolation calls and a sort_by block (mruby's Fiber cannot
    yield from those).  Connection: close says the response waited."""
    a = apache("<Location /t>\n    mrubyHandlerMiddle {dir}/t.rb\n"
               "</Location>\n", mpm="event", mpm_conf=FOUR_THREADS,
               files={"t.rb": """\
h = Hash.new { |hash, k| sleep 0.01; hash[k] = k * 2 }
o = Object.new
def o.to_s; usleep 10_000; "slept"; end
s = [3, 1, 2].sort_by { |x| Apache.sleep 0.001; x }
Apache.rputs "#{h[21]} #{o} #{s.inspect}"
"""})
    r = requests.get(a.url("/t"), timeout=30)
    assert (r.status_code, r.text) == (200, "42 slept [1, 2, 3]"), \
        a.error_log()[-2000:]
    assert r.headers.get("Connection") == "close"


# /set?NAME sets a global, a top-level constant and instance variable to
# NAME, matches a regexp, and sleeps until /go?NAME; /peek?NAME says
# whether /set?NAME has set them, and what it sees itself.
TOPLEVEL = """\
mrubySharedDict gate 1m
<Location /set>
    mrubyHandlerMiddleCode 'd = Apache::SharedDict.new("gate"); \
v = Apache::Request.new.args; $tl_value = v; TL_VALUE = v; @tl_value = v; \
v =~ Regexp.new("(.)"); d["set-" + v] = "1"; t = Time.now + 60; \
sleep 0.05 until d["go-" + v] || Time.now > t; \
Apache.rputs "#{$tl_value} #{TL_VALUE} #{@tl_value} #{Regexp.last_match(1)}"'
</Location>
<Location /peek>
    mrubyHandlerMiddleCode 'n = Apache::Request.new.args; \
Apache.rputs "#{Apache::SharedDict.new("gate")["set-" + n]}|\
#{$tl_value.inspect} #{Object.const_defined?(:TL_VALUE)} \
#{@tl_value.inspect} #{Regexp.last_match.inspect}"'
</Location>
<Location /go>
    mrubyHandlerMiddleCode 'Apache::SharedDict.new("gate")[\
"go-" + Apache::Request.new.args] = "1"; Apache.rputs "go"'
</Location>
"""


def test_a_sleeping_handlers_top_level_state_is_its_own(apache):
    """Two handlers set the same global, top-level constant and instance
    variable to their own values and match a regexp, then sleep; each
    finds its own after its sleep, and every request that set nothing sees
    neither, before, between and after.  A sleeper gives its interpreter
    back, and the requests one after another meanwhile take that one (the
    one given back last).  (The cleanup of each request that ended
    meanwhile used to remove what the sleepers had set, and the first one
    after each /set saw it.)"""
    a = apache(TOPLEVEL, mpm="event", mpm_conf=FOUR_THREADS)
    nothing = "nil false nil nil"

    def peek(name="x"):
        r = requests.get(a.url("/peek?" + name), timeout=30)
        assert r.status_code == 200
        flag, seen = r.text.split("|")
        assert seen == nothing
        return flag

    peek()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(requests.get, a.url("/set?a"), timeout=120)
        wait_for("/set?a to set", lambda: peek("a") == "1")
        second = pool.submit(requests.get, a.url("/set?b"), timeout=120)
        wait_for("/set?b to set", lambda: peek("b") == "1")
        assert requests.get(a.url("/go?a"), timeout=30).text == "go"
        r = first.result(120)
        assert (r.status_code, r.text) == (200, "a a a a")
        assert not second.done()
        peek()
        assert requests.get(a.url("/go?b"), timeout=30).text == "go"
        r = second.result(120)
        assert (r.status_code, r.text) == (200, "b b b b")
    peek()


# A Redis call waits for its reply the same way.  /blpop?<port> blocks in
# BLPOP on the Redis side until the test pushes, /late?<port> until its
# 3 s timeout; /ping answers at once.
REDIS_WAITS = """\
mrubySharedDict meet 1m
<Location /blpop>
    mrubyHandlerMiddleCode 'port = Apache::Request.new.args.to_i; \
r = Redis.new("127.0.0.1", port, timeout: 60); \
Apache.rputs r.call("BLPOP", "q", 50).inspect'
</Location>
<Location /late>
    mrubyHandlerMiddleCode 'port = Apache::Request.new.args.to_i; \
d = Apache::SharedDict.new("meet"); d.incr("in", 1, init: 0); \
r = Redis.new("127.0.0.1", port, timeout: 3); \
begin; r.call("BLPOP", "never", 0); \
rescue Redis::TimeoutError => e; \
Apache.rputs "#{e.class}: #{e.message}; in: #{d["in"]}"; end'
</Location>
<Location /get>
    mrubyHandlerMiddleCode 'port = Apache::Request.new.args.to_i; \
Apache.rputs Redis.new("127.0.0.1", port, timeout: 5).get("k")'
</Location>
<Location /ping>
    mrubyHandlerMiddleCode 'Apache.rputs "pong"'
</Location>
<Location /access>
    mrubyAccessCheckerMiddleCode 'port = Apache::Request.new.args.to_i; \
Redis.new("127.0.0.1", port, timeout: 60).call("BLPOP", "q", 50); \
Apache.return Apache::DECLINED'
    mrubyHandlerMiddleCode 'Apache.rputs "after access"'
</Location>
"""

REDIS_WAITERS = 12


def blocked_clients(redis):
    info = redis.command("INFO", "clients")
    return int(info.split("blocked_clients:")[1].split()[0])


def test_more_redis_waits_than_threads_all_wait_at_once(apache,
                                                        redis_server):
    """12 handlers blocked in BLPOP at the same moment in a child of 4
    threads, and a request that does not wait is answered meanwhile: a
    script waiting for Redis holds no thread.  (When the call blocks its
    thread, Redis never sees more than 4 blocked clients.)"""
    a = apache(REDIS_WAITS, mpm="event", mpm_conf=FOUR_THREADS)
    port = redis_server.port
    with concurrent.futures.ThreadPoolExecutor(REDIS_WAITERS) as pool:
        waiters = [pool.submit(requests.get, a.url(f"/blpop?{port}"),
                               timeout=120) for _ in range(REDIS_WAITERS)]
        wait_for("all waiters blocked in Redis",
                 lambda: blocked_clients(redis_server) == REDIS_WAITERS)
        assert requests.get(a.url("/ping"), timeout=10).text == "pong"
        values = [f"v{i}" for i in range(REDIS_WAITERS)]
        redis_server.command("RPUSH", "q", *values)
        rs = [f.result() for f in waiters]
    assert [r.status_code for r in rs] == [200] * REDIS_WAITERS, \
        a.error_log()[-2000:]
    assert sorted(r.text for r in rs) == sorted(
        f'["q", "{v}"]' for v in values)
    assert {r.headers.get("Connection") for r in rs} == {"close"}


def test_redis_timeout_while_suspended_is_a_timeout_error(apache,
                                                          redis_server):
    """6 handlers whose BLPOP outlasts their 3 s timeout, in a child of 4
    threads: each gets Redis::TimeoutError after all 6 were waiting at
    once (the deadline ended the socket's watch), and the interpreters'
    next command gets its answer."""
    a = apache(REDIS_WAITS, mpm="event", mpm_conf=FOUR_THREADS)
    port = redis_server.port
    n = 6
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        rs = list(pool.map(lambda _: requests.get(a.url(f"/late?{port}"),
                                                  timeout=120), range(n)))
    assert [r.status_code for r in rs] == [200] * n, a.error_log()[-2000:]
    assert {r.text for r in rs} == {
        f"Redis::TimeoutError: 127.0.0.1:{port}: timed out; in: {n}"}
    redis_server.command("SET", "k", "after")
    for _ in range(n):
        assert requests.get(a.url(f"/get?{port}"), timeout=30).text == "after"


def test_redis_waits_that_cannot_suspend_block_as_before(apache,
                                                         redis_server):
    """prefork, and an access checker on event: the Redis call waits on
    its thread, and the connection stays open."""
    port = redis_server.port
    for mpm, path, answer in (("prefork", f"/blpop?{port}", '["q", "p"]'),
                              ("event", f"/access?{port}", "after access")):
        a = apache(REDIS_WAITS, mpm=mpm)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiter = pool.submit(requests.get, a.url(path), timeout=120)
            wait_for("the call blocked in Redis",
                     lambda: blocked_clients(redis_server) == 1)
            redis_server.command("RPUSH", "q", "p")
            r = waiter.result()
        assert (r.status_code, r.text) == (200, answer), a.error_log()[-2000:]
        assert r.headers.get("Connection") != "close"


def test_client_that_leaves_mid_redis_wait_cancels_the_call(apache,
                                                           redis_server):
    """The script waiting in BLPOP is cancelled within the second the
    request looks at its socket (its ensure runs), its link to Redis is
    closed (Redis no longer counts a blocked client), and the next call
    gets its answer."""
    a = apache(REDIS_WAITS.replace(
        "Apache.rputs r.call(\"BLPOP\", \"q\", 50).inspect'",
        "begin; Apache.rputs r.call(\"BLPOP\", \"q\", 50).inspect; ensure; "
        "Apache.errlogger Apache::APLOG_NOTICE, \"ensure ran\"; end'"),
        mpm="event", mpm_conf=FOUR_THREADS)
    port = redis_server.port
    with socket.create_connection(("127.0.0.1", a.port), timeout=10) as s:
        s.sendall(f"GET /blpop?{port} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        wait_for("the call blocked in Redis",
                 lambda: blocked_clients(redis_server) == 1)
    log = a.wait_log("ensure ran", timeout=15)
    assert "the client went away while the script waited" in log
    wait_for("the link closed", lambda: blocked_clients(redis_server) == 0)
    redis_server.command("SET", "k", "after")
    assert requests.get(a.url(f"/get?{port}"), timeout=30).text == "after"

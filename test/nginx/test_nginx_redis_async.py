"""ngx_mruby: the Redis class waits for its replies without blocking the
worker (the run is suspended, the socket is watched by nginx's event loop):
other requests are served meanwhile, a stopped Redis server times out with
the usual error, a client that leaves mid-wait frees its coroutine and its
link, and replies never cross between requests that share a connection.

Each wait is for a condition (Redis says a client is blocked, a log line),
bounded; nothing relies on a fixed pause."""

import concurrent.futures
import os
import signal
import socket
import time

import harness


def code(ruby):
    """An inline script as an nginx string argument."""
    return "'" + ruby.replace("\\", "\\\\").replace("'", "\\'") + "'"


def loc(path, ruby):
    return f"location = {path} {{ mruby_content_handler_code {code(ruby)}; }}\n"


# /blpop?<port>: waits up to 20 s for an item of list q.
BLPOP = """
port = Nginx::Request.new.args.to_i
r = Redis.new("127.0.0.1", port, timeout: 30)
Nginx.rputs r.blpop("q", 20).inspect
"""

# /get?<port>: the value of k.
GET = """
port = Nginx::Request.new.args.to_i
Nginx.rputs Redis.new("127.0.0.1", port, timeout: 30).get("k").to_s
"""

# /count: coroutines alive, finished stacks kept.
COUNT = 'Nginx.rputs Nginx::Async.coroutines.join(" ")'


def info(redis, field):
    for line in redis.command("INFO", "clients").splitlines():
        if line.startswith(field + ":"):
            return int(line.split(":")[1])
    raise AssertionError(f"no {field} in INFO clients")


def wait_for(cond, what, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_request_waiting_on_redis_does_not_block_the_worker(
        nginx, redis_server):
    """BLPOP waits in Redis; another request, on the same worker and the
    same Redis server, is answered before it ends (with the blocking client
    it would wait the 20 s out; its 10 s client timeout fails the test)."""
    n = nginx(loc("/blpop", BLPOP) + loc("/get", GET))
    port = redis_server.port
    redis_server.command("SET", "k", "mine")
    assert n.get(f"/get?{port}").text == "mine"

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        slow = pool.submit(n.get, f"/blpop?{port}", timeout=60)
        wait_for(lambda: info(redis_server, "blocked_clients") == 1,
                 "BLPOP to block in Redis")
        r = n.get(f"/get?{port}", timeout=10)
        assert (r.status_code, r.text) == (200, "mine")
        assert not slow.done()
        # two links now: the blocked one and the one GET took (plus the
        # test's own connection; one it closed may linger a moment)
        wait_for(lambda: info(redis_server, "connected_clients") == 2 + 1,
                 "two links and the test's connection")
        redis_server.command("RPUSH", "q", "item")
        r = slow.result(30)
        assert (r.status_code, r.text) == (200, '["q", "item"]')

    # both links are idle again and each answers its own request
    for _ in range(4):
        assert n.get(f"/get?{port}").text == "mine"
    assert len(n.worker_pids()) == 1


def test_many_requests_wait_on_redis_at_once(nginx, redis_server):
    """50 BLPOPs at once on one worker, each on a link of its own, each
    given its own item; afterwards at most MRB_REDIS_KEEP_IDLE links stay."""
    n = nginx(loc("/blpop", BLPOP))
    port = redis_server.port
    with concurrent.futures.ThreadPoolExecutor(50) as pool:
        futures = [pool.submit(n.get, f"/blpop?{port}", timeout=60)
                   for _ in range(50)]
        wait_for(lambda: info(redis_server, "blocked_clients") == 50,
                 "50 BLPOPs to block in Redis")
        for i in range(50):
            redis_server.command("RPUSH", "q", f"i{i}")
        texts = sorted(f.result(30).text for f in futures)
    assert texts == sorted(f'["q", "i{i}"]' for i in range(50))
    # 16 idle links kept, plus the test's own connection
    wait_for(lambda: info(redis_server, "connected_clients") <= 16 + 1,
             "the links beyond 16 to close")


def test_a_stopped_redis_times_out_without_stalling_others(
        nginx, redis_server):
    """A Redis server that stops answering (SIGSTOP): the command times out
    with the error the blocking client gave, and another request is served
    while it waits; after the server continues, the next request gets its
    own reply, not the late one of the command that timed out."""
    slow_get = """
port = Nginx::Request.new.args.to_i
r = Redis.new("127.0.0.1", port, timeout: 10)
Nginx.errlogger Nginx::LOG_NOTICE, "sending GET"
begin
  Nginx.rputs r.get("k").to_s
rescue Redis::TimeoutError => e
  Nginx.rputs "#{e.class}: #{e.message}"
end
"""
    n = nginx(loc("/slow", slow_get) + loc("/get", GET)
              + loc("/fast", 'Nginx.rputs "fast"'))
    port = redis_server.port
    redis_server.command("SET", "k", "mine")
    assert n.get(f"/slow?{port}").text == "mine"   # a link, kept

    pid = redis_server.proc.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            slow = pool.submit(n.get, f"/slow?{port}", timeout=60)
            wait_for(lambda: n.error_log().count("sending GET") == 2,
                     "the second GET to be sent")
            assert n.get("/fast", timeout=10).text == "fast"
            assert not slow.done()
            r = slow.result(30)
        assert (r.status_code, r.text) == (
            200, f"Redis::TimeoutError: 127.0.0.1:{port}: timed out")
    finally:
        os.kill(pid, signal.SIGCONT)

    redis_server.command("SET", "k", "after")
    assert n.get(f"/get?{port}").text == "after"


def pool_counts(n):
    """Coroutines alive (less /count's own) and finished stacks kept."""
    live, idle = n.get("/count").text.split()
    return int(live) - 1, int(idle)


def test_a_client_that_leaves_mid_wait_frees_its_coroutine_and_link(
        nginx, redis_server):
    """The client of a request blocked in BLPOP closes its connection: the
    script is cancelled, its link closed (Redis sees it go: the item pushed
    later is not taken by a stale BLPOP), the coroutine freed; the next
    request on the same connection pool gets its own reply."""
    blpop_logged = """
port = Nginx::Request.new.args.to_i
r = Redis.new("127.0.0.1", port, timeout: 30)
begin
  Nginx.rputs r.blpop("q", 20).inspect
ensure
  Nginx.errlogger Nginx::LOG_NOTICE, "blpop: ensure ran"
end
"""
    n = nginx(loc("/blpop", blpop_logged) + loc("/get", GET)
              + loc("/count", COUNT))
    port = redis_server.port
    redis_server.command("SET", "k", "mine")
    assert n.get(f"/get?{port}").text == "mine"
    # one link, and the test's own connection
    wait_for(lambda: info(redis_server, "connected_clients") == 1 + 1,
             "one link")

    for round_ in range(3):
        s = socket.create_connection(("127.0.0.1", n.port), timeout=10)
        s.sendall(f"GET /blpop?{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        wait_for(lambda: info(redis_server, "blocked_clients") == 1,
                 "BLPOP to block in Redis")
        assert pool_counts(n)[0] == 1
        s.close()
        wait_for(lambda: info(redis_server, "blocked_clients") == 0,
                 "the cancelled request's link to close")
        wait_for(lambda: pool_counts(n)[0] == 0, "the coroutine to go")

        # nothing takes the item: no BLPOP is left on any link
        redis_server.command("RPUSH", "q", f"item{round_}")
        assert redis_server.command("LLEN", "q") == ":1"
        redis_server.command("DEL", "q")
        assert n.get(f"/get?{port}").text == "mine"

    n.wait_log("blpop: ensure ran")
    assert n.error_log().count("blpop: ensure ran") == 3
    # the link each cancelled request held was closed, not kept: one link
    # (the last GET's) is left
    wait_for(lambda: info(redis_server, "connected_clients") == 1 + 1,
             "one link")


def tx_with_gets_around_its_wait(n, main, gate):
    """/tx, which waits on gate until this pushes "go" to it, with a /get
    of main's "k" before it and one while it waits, both "v": /tx's
    response."""
    main.command("SET", "k", "v")
    assert n.get("/get").text == '"v"'
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(n.get, "/tx", timeout=60)
        wait_for(lambda: info(gate, "blocked_clients") == 1,
                 "/tx to wait on gate")
        assert n.get("/get", timeout=10).text == '"v"'
        gate.command("RPUSH", "go", "1")
        return first.result(30)


def test_a_transaction_keeps_its_link_while_its_request_waits(nginx):
    """A request inside MULTI waits (on another Redis server); a request
    that sends GET (and closes its Redis object) meanwhile on the same
    connection gets its value, not "QUEUED", and the transaction's EXEC
    gets its own replies on the link it kept."""
    with harness.Redis("tx") as main, harness.Redis("gate") as gate:
        tx = f"""
r = Redis.new("127.0.0.1", {main.port}, timeout: 30)
r.call("MULTI")
r.set("t", "from-tx")
Redis.new("127.0.0.1", {gate.port}, timeout: 30).blpop("go", 20)
Nginx.rputs r.call("EXEC").inspect
"""
        # close: the idle links go, not the one the transaction holds
        get = f"""
r = Redis.new("127.0.0.1", {main.port})
v = r.get("k")
r.close
Nginx.rputs v.inspect
"""
        n = nginx(loc("/tx", tx) + loc("/get", get))
        r = tx_with_gets_around_its_wait(n, main, gate)
        assert (r.status_code, r.text) == (200, '["OK"]')
        assert main.command("GET", "t") == "from-tx"
        main.remove()
        gate.remove()


def test_a_link_a_nested_run_left_in_multi_stays_with_its_request(nginx):
    """A script run inside the request's script (an mruby_set_code
    variable the content script reads) starts MULTI and ends: the link it
    left stays the request's (the outermost run's), so the content script,
    after a wait on another Redis server, gets its EXEC on that link; a
    request meanwhile gets its own value, not "QUEUED"; no MULTI is left
    open on any link after the request."""
    with harness.Redis("tx") as main, harness.Redis("gate") as gate:
        # Redis named by a String: the script names nothing that waits, so
        # it is run when the content script reads $tx, nested in it (one
        # that names Redis is run by the rewrite phase, a run of its own)
        nested = ('r = Object.const_get("Redis").new("127.0.0.1", MAIN, '
                  'timeout: 30); '
                  'r.call("MULTI"); r.set("t", "nested"); "queued"')
        content = """
v = Nginx::Request.new.var.tx
Redis.new("127.0.0.1", GATE, timeout: 30).blpop("go", 20)
e = Redis.new("127.0.0.1", MAIN, timeout: 30).call("EXEC")
Nginx.rputs "#{v} #{e.inspect}"
"""
        get = 'Nginx.rputs Redis.new("127.0.0.1", MAIN).get("k").inspect'

        def port(ruby):
            return (ruby.replace("MAIN", str(main.port))
                    .replace("GATE", str(gate.port)))

        n = nginx("location = /tx {\n"
                  f"    mruby_set_code $tx {code(port(nested))};\n"
                  f"    mruby_content_handler_code {code(port(content))};\n"
                  "}\n" + loc("/get", port(get)))
        r = tx_with_gets_around_its_wait(n, main, gate)
        assert (r.status_code, r.text) == (200, 'queued ["OK"]')
        assert main.command("GET", "t") == "nested"
        # no transaction left open on any link, and the next requests,
        # whichever idle link they take, get their values
        clients = main.command("CLIENT", "LIST").splitlines()
        assert all("multi=-1" in c for c in clients), clients
        for _ in range(3):
            assert n.get("/get").text == '"v"'
        main.remove()
        gate.remove()


def test_a_script_that_set_a_top_level_constant_waits_without_blocking(
        nginx, redis_server):
    """The slide-30 script: `Server = get_server_class` and a global, then
    a Redis call that waits (BLPOP): the worker answers another request
    meanwhile, which finishes first and sees neither the constant nor the
    global, and the script finds both after its reply.  (While the
    top-level state could not survive a wait such a call blocked the
    worker: /peek waited out the BLPOP and its 10 s timeout failed.)"""
    const = """
Server = get_server_class
$redis_port = Server::Request.new.args.to_i
v = Redis.new("127.0.0.1", $redis_port, timeout: 30).blpop("q", 20)
Server.rputs "#{v.inspect} #{Server.name} #{$redis_port.class}"
"""
    peek = ('Nginx.rputs "#{Object.const_defined?(:Server)} '
            '#{$redis_port.inspect}"')
    n = nginx(loc("/const", const) + loc("/peek", peek))
    port = redis_server.port
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(n.get, f"/const?{port}", timeout=60)
        wait_for(lambda: info(redis_server, "blocked_clients") == 1,
                 "BLPOP to block in Redis")
        r = n.get("/peek", timeout=10)
        assert (r.status_code, r.text) == (200, "false nil")
        assert not first.done()
        redis_server.command("RPUSH", "q", "item")
        r = first.result(30)
        assert (r.status_code, r.text) == (200, '["q", "item"] Nginx Integer')
    r = n.get("/peek", timeout=10)
    assert (r.status_code, r.text) == (200, "false nil")


def test_a_stream_script_waits_on_redis_without_blocking(nginx, redis_server):
    """A stream script in BLPOP: the worker answers HTTP meanwhile; the item
    pushed lets the session through."""
    from harness import read_until_closed
    script = (f'v = Redis.new("127.0.0.1", {redis_server.port}, timeout: 30)'
              '.blpop("sq", 20); '
              'Nginx.return(v ? Nginx::Stream::OK : Nginx::Stream::ABORT)')
    stream = ("server {\n    listen 127.0.0.1:{port2};\n"
              f"    mruby_stream_code {code(script)};\n"
              '    return "got\\n";\n}')
    n = nginx(loc("/fast", 'Nginx.rputs "fast"'), stream_conf=stream)

    def talk():
        with socket.create_connection(("127.0.0.1", n.port2),
                                      timeout=60) as s:
            return read_until_closed(s)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        session = pool.submit(talk)
        wait_for(lambda: info(redis_server, "blocked_clients") == 1,
                 "the stream script's BLPOP to block in Redis")
        assert n.get("/fast", timeout=10).text == "fast"
        assert not session.done()
        redis_server.command("RPUSH", "sq", "go")
        assert session.result(30) == b"got\n"

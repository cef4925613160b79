"""::Redis on real servers against a real redis-server: commands and reply
types, pipelining, errors as exception classes, one kept connection per
interpreter, reconnection, timeouts.  The scripts are the same under Apache
and nginx."""

import socket
import threading
import time

import pytest

import harness

# /api?<port>: every answer on its own line.
API = r'''
Server = get_server_class
port = Server::Request.new.args.to_i
r = Redis.new("127.0.0.1", port, timeout: 2)
out = []
r.call("FLUSHDB")
out << r.ping
out << r.set("s", "v\0\xff").inspect
out << r.get("s").bytes.inspect
out << r["missing"].inspect
r["n"] = 5
out << [r.incr("n"), r.incrby("n", 10), r.decr("n")].inspect
out << r.exists("n", "s", "missing").inspect
out << r.expire("n", 100).inspect
out << (r.ttl("n") > 90).inspect
out << r.del("n", "missing").inspect
out << r.hset("h", "a", 1).inspect
out << r.hset("h", "b", "two").inspect
out << r.hgetall("h").inspect
out << r.call(:hgetall, "h").inspect
out << r.hget("h", "b").inspect
out << r.rpush("l", 1, 2, 3).inspect
out << r.lpush("l", 0).inspect
out << r.lrange("l", 0, -1).inspect
out << r.mget("s", "missing").map { |v| v.nil? }.inspect
out << r.publish("chan", "msg").inspect
out << r.call("SET", "k", 1.5).inspect
out << r.get("k").inspect
out << r.keys("*").sort.inspect
out << r.pipelined { |p| p.incr("c"); p.expire("c", 30); p.get("c") }.inspect
r.queue("INCR", "c")
r.queue("LPUSH", "k", "x")
replies = r.commit
out << [replies[0], replies[1].class].inspect
begin
  r.incr("h")
rescue Redis::ReplyError => e
  out << e.message.split(" ")[0]
end
begin
  r.pipelined { |p| p.set("z", 1); p.incr("h"); p.set("z", 2) }
rescue Redis::ReplyError => e
  out << "pipeline raised; z=#{r.get("z")}"
end
out << [Redis::ReplyError, Redis::ConnectionError, Redis::TimeoutError].map {
  |c| c.ancestors.take_while { |a| a != StandardError }.map(&:to_s) }.inspect
Server.rputs out.join("\n")
'''

API_EXPECTED = "\n".join([
    "PONG",
    '"OK"',
    "[118, 0, 255]",
    "nil",
    "[6, 16, 15]",
    "2",
    "true",
    "true",
    "1",
    "true",
    "true",
    '{"a"=>"1", "b"=>"two"}',
    '{"a"=>"1", "b"=>"two"}',
    '"two"',
    "3",
    "4",
    '["0", "1", "2", "3"]',
    "[false, true]",
    "0",
    '"OK"',
    '"1.5"',
    '["h", "k", "l", "s"]',
    '[1, 1, "1"]',
    "[2, Redis::ReplyError]",
    "WRONGTYPE",
    "pipeline raised; z=2",
    '[["Redis::ReplyError", "Redis::BaseError"], '
    '["Redis::ConnectionError", "Redis::BaseError"], '
    '["Redis::TimeoutError", "Redis::ConnectionError", "Redis::BaseError"]]',
])

# /id?<port>: the server-side id of the connection this interpreter uses.
CLIENT_ID = r'''
port = get_server_class::Request.new.args.to_i
get_server_class.rputs Redis.new("127.0.0.1", port).call("CLIENT", "ID").to_s
'''

# /incr?<port>: INCR n through the kept connection.
INCR = r'''
port = get_server_class::Request.new.args.to_i
get_server_class.rputs Redis.new("127.0.0.1", port).incr("n").to_s
'''

# /down?<port>: what a script sees of a server that is not there.
DOWN = r'''
port = get_server_class::Request.new.args.to_i
begin
  Redis.new("127.0.0.1", port)
  get_server_class.rputs "connected?!"
rescue Redis::ConnectionError => e
  get_server_class.rputs "#{e.class}: #{e.message}"
end
'''

# /slow?<port>: a reply that takes longer than the timeout, then a command
# on the same object (reconnected).
SLOW = r'''
port = get_server_class::Request.new.args.to_i
r = Redis.new("127.0.0.1", port, timeout: 0.2)
out = []
begin
  r.blpop("nothing", 2)
rescue Redis::TimeoutError => e
  out << "#{e.class}: #{e.message}"
end
out << r.ping
get_server_class.rputs out.join("\n")
'''


def server(kind, apache, nginx, scripts, **kw):
    """A server with one location per script: {"/name": code}."""
    files = {f"{loc.strip('/')}.rb": code for loc, code in scripts.items()}
    if kind == "apache":
        conf = "\n".join(
            f"<Location {loc}>\n    mrubyHandlerMiddle {{dir}}/"
            f"{loc.strip('/')}.rb\n</Location>" for loc in scripts)
        return apache(conf, files=files, **kw)
    conf = "\n".join(
        f"location = {loc} {{ mruby_content_handler {{dir}}/"
        f"{loc.strip('/')}.rb; }}" for loc in scripts)
    return nginx(conf, files=files, **kw)


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_commands_and_replies(kind, apache, nginx, redis_server):
    s = server(kind, apache, nginx, {"/api": API})
    r = s.get(f"/api?{redis_server.port}")
    assert r.status_code == 200, s.error_log()[-2000:]
    assert r.text == harness.inspected(API_EXPECTED)


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_connection_kept_per_interpreter(kind, apache, nginx, redis_server):
    """Redis.new on every request, one connection: the same client id each
    time (one worker, one interpreter)."""
    if kind == "apache":
        s = server(kind, apache, nginx, {"/id": CLIENT_ID, "/incr": INCR},
                   mpm="prefork", mpm_conf=harness.ONE_CHILD["prefork"])
    else:
        s = server(kind, apache, nginx, {"/id": CLIENT_ID, "/incr": INCR})
    ids = {s.get(f"/id?{redis_server.port}").text for _ in range(10)}
    assert len(ids) == 1
    before = ids.pop()
    assert before.isdigit()

    # the server closed it: the next call opens a new one and runs once
    redis_server.command("CLIENT", "KILL", "TYPE", "normal")
    after = s.get(f"/incr?{redis_server.port}")
    assert (after.status_code, after.text) == (200, "1"), \
        s.error_log()[-2000:]
    assert redis_server.command("GET", "n") == "1"
    after = s.get(f"/id?{redis_server.port}").text
    assert after.isdigit() and int(after) > int(before)


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_connection_refused_is_a_connection_error(kind, apache, nginx):
    port = harness.free_port()
    s = server(kind, apache, nginx, {"/down": DOWN})
    r = s.get(f"/down?{port}")
    assert r.text == ("Redis::CannotConnectError: connect to 127.0.0.1:"
                      f"{port}: Connection refused")


# initialize called a second time on one object
AGAIN = r'''
port = get_server_class::Request.new.args.to_i
r = Redis.new("127.0.0.1", port)
begin
  r.send(:initialize, "127.0.0.1", port)
  out = "initialized twice"
rescue RuntimeError => e
  out = e.message
end
get_server_class.rputs "#{out}; #{r.ping}"
'''


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_a_redis_object_is_initialized_once(kind, apache, nginx,
                                            redis_server):
    """A second initialize raises and leaves the object as it was.  (It
    used to replace the object's state, leaking the first one's.)"""
    s = server(kind, apache, nginx, {"/again": AGAIN})
    r = s.get(f"/again?{redis_server.port}")
    assert (r.status_code, r.text) == (
        200, "Redis#initialize: this Redis object is initialized already; "
             "PONG"), s.error_log()[-2000:]


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_timeout_is_a_timeout_error(kind, apache, nginx, redis_server):
    s = server(kind, apache, nginx, {"/slow": SLOW})
    r = s.get(f"/slow?{redis_server.port}")
    assert r.text == (f"Redis::TimeoutError: 127.0.0.1:{redis_server.port}: "
                      "timed out\nPONG")


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_uncaught_reply_error_is_a_500_with_a_log_line(kind, apache, nginx,
                                                       redis_server):
    code = r'''
port = get_server_class::Request.new.args.to_i
Redis.new("127.0.0.1", port).call("NOSUCHCOMMAND")
'''
    s = server(kind, apache, nginx, {"/bad": code})
    r = s.get(f"/bad?{redis_server.port}")
    assert r.status_code == 500
    assert "NOSUCHCOMMAND" not in r.text.upper()
    s.wait_log("Redis::ReplyError")


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_failed_connect_is_not_tried_again_for_a_second(kind, apache, nginx):
    """After a refused connect, Redis.new fails at once without connecting
    for one second, then tries again."""
    s = server(kind, apache, nginx, {"/down": DOWN},
               **({"mpm": "prefork", "mpm_conf": harness.ONE_CHILD["prefork"]}
                  if kind == "apache" else {}))
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        refused = ("Redis::CannotConnectError: connect to 127.0.0.1:"
                   f"{port}: Connection refused")
        assert s.get(f"/down?{port}").text == refused
        failed_at = time.monotonic()
        # now something listens, but the second try within the second
        # does not connect
        listener.listen(8)
        listener.setblocking(False)
        r = s.get(f"/down?{port}")
        assert time.monotonic() - failed_at < 1.0, "too slow to tell"
        assert r.text.startswith("Redis::CannotConnectError: "), r.text
        with pytest.raises(BlockingIOError):
            listener.accept()
        # after the second, it connects (and gets no answer from us)
        time.sleep(1.1)
        listener.setblocking(True)
        listener.settimeout(5)
        t = threading.Thread(target=s.get, args=(f"/down?{port}",))
        t.start()
        conn, _ = listener.accept()
        conn.close()
        t.join(10)


def one_interpreter(kind, apache, nginx, scripts):
    if kind == "apache":
        return server(kind, apache, nginx, scripts, mpm="prefork",
                      mpm_conf=harness.ONE_CHILD["prefork"])
    return server(kind, apache, nginx, scripts)


# An argument whose to_s changes (and frees the buffer of) an argument
# converted before it: the command must carry the arguments as they are
# once all are converted, never bytes from a freed buffer.
MUTATING_ARGS = r'''
port = get_server_class::Request.new.args.to_i
class Mutator
  def initialize(victim); @victim = victim; end
  def to_s; @victim.replace("new-key-" + "y" * 200); "value"; end
end
r = Redis.new("127.0.0.1", port)
r.call("FLUSHDB")
key = "old-key-" + "k" * 200
r.call("SET", key, Mutator.new(key))
get_server_class.rputs [r.get("new-key-" + "y" * 200), r.dbsize].inspect
'''

@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_arguments_changed_by_a_later_to_s(kind, apache, nginx,
                                           redis_server):
    s = server(kind, apache, nginx, {"/args": MUTATING_ARGS})
    r = s.get(f"/args?{redis_server.port}")
    assert r.status_code == 200, s.error_log()[-2000:]
    assert r.text == '["value", 1]'


# /leave?<port>&<how>: leaves the kept connection in a state of its own,
# then raises; /get?<port>: what the next request reads.
LEAVE = r'''
port, how = get_server_class::Request.new.args.split("&")
r = Redis.new("127.0.0.1", port.to_i)
case how
when "multi" then r.call("MULTI"); r.set("k", "in-tx")
when "select" then r.select(1); r.set("k", "db1")
when "subscribe" then r.call("SUBSCRIBE", "chan")
when "watch" then r.call("WATCH", "k")
end
raise "left the connection in #{how}"
'''

GET = r'''
port = get_server_class::Request.new.args.to_i
r = Redis.new("127.0.0.1", port)
get_server_class.rputs [r.get("k"), r.set("k2", 1)].inspect
'''

# MULTI ... EXEC in one request leaves nothing behind: the connection stays.
TX = r'''
port = get_server_class::Request.new.args.to_i
r = Redis.new("127.0.0.1", port)
r.call("MULTI"); r.incr("n"); r.call("EXEC")
get_server_class.rputs r.info("stats")[/total_connections_received:(\d+)/, 1]
'''


@pytest.mark.parametrize("kind", ["apache", "nginx"])
@pytest.mark.parametrize("how", ["multi", "select", "subscribe"])
def test_connection_state_does_not_leak_into_the_next_request(
        kind, how, apache, nginx, redis_server):
    s = one_interpreter(kind, apache, nginx, {"/leave": LEAVE, "/get": GET})
    redis_server.command("SET", "k", "db0")
    assert s.get(f"/get?{redis_server.port}").text == '["db0", "OK"]'
    assert s.get(f"/leave?{redis_server.port}&{how}").status_code == 500
    r = s.get(f"/get?{redis_server.port}")
    assert r.status_code == 200, s.error_log()[-2000:]
    assert r.text == '["db0", "OK"]'


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_a_finished_transaction_keeps_the_connection(kind, apache, nginx,
                                                      redis_server):
    s = one_interpreter(kind, apache, nginx, {"/tx": TX})
    counts = [s.get(f"/tx?{redis_server.port}").text for _ in range(4)]
    assert len(set(counts)) == 1, counts


class TricklingServer:
    """Answers every command with +PONG, one byte every `pace` seconds:
    each read finds a byte well within the timeout, the reply does not."""

    def __init__(self, pace=0.15):
        self.pace = pace
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._trickle, args=(conn,),
                             daemon=True).start()

    def _trickle(self, conn):
        with conn:
            try:
                conn.recv(4096)
                for b in b"+PONG\r\n":
                    if self.stop.is_set():
                        return
                    time.sleep(self.pace)
                    conn.sendall(bytes([b]))
            except OSError:
                pass

    def close(self):
        self.stop.set()
        self.sock.close()


TRICKLE = r'''
port = get_server_class::Request.new.args.to_i
r = Redis.new("127.0.0.1", port, timeout: 0.4)
t = Time.now
begin
  r.ping
  out = "answered"
rescue Redis::TimeoutError => e
  out = e.class.to_s
end
get_server_class.rputs "#{out} #{((Time.now - t) * 1000).to_i}"
'''


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_timeout_bounds_the_whole_command(kind, apache, nginx):
    """A server trickling its reply a byte at a time (7 bytes, 0.15 s
    apart: 1.05 s) is timed out after 0.4 s, not answered after 1 s."""
    trickle = TricklingServer()
    try:
        s = server(kind, apache, nginx, {"/t": TRICKLE})
        r = s.get(f"/t?{trickle.port}")
        assert r.status_code == 200, s.error_log()[-2000:]
        what, ms = r.text.split()
        assert what == "Redis::TimeoutError"
        assert 350 <= int(ms) < 700
    finally:
        trickle.close()

"""The Redis class has mruby-redis's whole method list (the client the
original ngx_mruby builds in), with its return types: exists?, hexists?,
expire, hset, hsetnx and setnx are booleans; keys, hkeys, hvals, hgetall
and exec are nil when empty; mset and hmset return the object; set takes
its options Hash; queue / reply / bulk_reply give status replies as
Symbols and error replies as exception objects; after close the object
raises Redis::ClosedError; Redis.connect_set_raw names the server of every
Redis.new without arguments; its error classes (AuthError, ProtocolError,
OOMError, ClosedError) are there.  Against a real redis-server, one script
on both servers."""

import socket
import threading

import pytest

import harness

# /api?<port>: every answer on its own line.
API = r'''
Server = get_server_class
port = Server::Request.new.args.to_i
r = Redis.new("127.0.0.1", port, 2)
out = []
r.flushdb
out << r.exists?("k").inspect
out << r.set("k", "v").inspect
out << r.exists?("k").inspect
out << r.set("k", "w", "NX" => true).inspect
out << r.set("t", "1", "EX" => 100, "XX" => true).inspect
out << r.set("t", "1", "PX" => 100000).inspect
out << (r.ttl("t") > 90).inspect
begin
  r.set("k", "v", :EX => 1)
rescue ArgumentError => e
  out << e.class.to_s
end
out << [r.setnx("k", "x"), r.setnx("n", "x")].inspect
out << [r.expire("k", 100), r.expire("missing", 100)].inspect
out << [r.hset("h", "f", "1"), r.hset("h", "f", "2"),
        r.hsetnx("h", "f", "3")].inspect
out << [r.hexists?("h", "f"), r.hexists?("h", "g")].inspect
out << [r.hkeys("h"), r.hvals("none"), r.hgetall("none"),
        r.keys("nomatch*")].inspect
out << [r.mset("a", "1", "b", "2").equal?(r),
        r.hmset("h2", "x", "1").equal?(r), r.mget("a", "b")].inspect
out << r.randomkey.class.to_s
r.zadd("z", 1, "one")
r.zadd("z", 2, "two")
out << [r.zrank("z", "one"), r.zrevrank("z", "one"),
        r.zrevrank("z", "none")].inspect
out << [r.pfadd("hll", "a", "b", "c"), r.pfadd("hll2", "c", "d"),
        r.pfmerge("hll3", "hll", "hll2"), r.pfcount("hll3"),
        r.pfcount("hll", "hll2")].inspect
out << [r.multi, r.incr("c"), r.incr("c"), r.exec].inspect
out << [r.watch("c"), r.unwatch, r.multi, r.discard].inspect
r.queue(:set, "q", "1")
r.queue(:incr, "q")
r.queue(:incr, "k")
out << r.reply.inspect
r.queue(:get, "q")
out << r.bulk_reply.map { |v| v.is_a?(Exception) ? v.class : v }.inspect
begin
  r.reply
rescue RuntimeError => e
  out << e.message
end
out << [r.keepalive, r.enable_keepalive, r.keepalive].inspect
r.call("CONFIG", "SET", "requirepass", "secret")
begin
  r.auth("wrong")
rescue Redis::AuthError => e
  out << "#{e.class} < #{e.class.superclass}"
end
out << r.auth("secret").inspect
r.call("CONFIG", "SET", "requirepass", "")
r.close
out << r.connected?.inspect
begin
  r.get("k")
rescue Redis::ClosedError => e
  out << "#{e.class}: #{e.message}"
end
out << Redis.new("127.0.0.1", port).get("k").inspect
Server.rputs out.join("\n")
'''

API_EXPECTED = "\n".join([
    "false",
    '"OK"',
    "true",
    "nil",
    "nil",
    '"OK"',
    "true",
    "ArgumentError",
    "[false, true]",
    "[true, false]",
    "[true, false, false]",
    "[true, false]",
    '[["f"], nil, nil, nil]',
    '[true, true, ["1", "2"]]',
    "String",
    "[0, 1, nil]",
    '[1, 1, "OK", 4, 4]',
    '["OK", "QUEUED", "QUEUED", [1, 2]]',
    '["OK", "OK", "OK", "OK"]',
    ":OK",
    '[2, Redis::ReplyError, "2"]',
    "nothing queued yet",
    "[:on, nil, :on]",
    "Redis::AuthError < Redis::ReplyError",
    '"OK"',
    "false",
    "Redis::ClosedError: connection is already closed",
    '"v"',
])

# /default: Redis.new without arguments, after a startup script's
# Redis.connect_set_raw(host, port)
DEFAULT = r'''
get_server_class.rputs Redis.new.get("k").inspect
'''

# /garbage?<port>: a server that does not speak Redis's protocol
GARBAGE = r'''
port = get_server_class::Request.new.args.to_i
begin
  Redis.new("127.0.0.1", port).ping
  get_server_class.rputs "answered"
rescue Redis::ProtocolError => e
  get_server_class.rputs "#{e.class} < #{e.class.superclass}"
end
'''


def server(kind, apache, nginx, scripts, init=""):
    """A server with one location per script: {"/name": code}; init: a
    startup script (child_init, init_worker)."""
    files = {f"{loc.strip('/')}.rb": code for loc, code in scripts.items()}
    if kind == "apache":
        conf = "\n".join(
            f"<Location {loc}>\n    mrubyHandlerMiddle {{dir}}/"
            f"{loc.strip('/')}.rb\n</Location>" for loc in scripts)
        if init:
            conf += f"\nmrubyChildInitMiddleCode '{init}'\n"
        return apache(conf, files=files, mpm="prefork")
    conf = "\n".join(
        f"location = {loc} {{ mruby_content_handler {{dir}}/"
        f"{loc.strip('/')}.rb; }}" for loc in scripts)
    if init:
        conf = (f"mruby_init_worker_code '{init}';\n"
                f"server {{\n    listen 127.0.0.1:{{port}};\n{conf}\n}}")
    return nginx(conf, files=files)


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_mruby_redis_methods_and_reply_types(kind, apache, nginx,
                                             redis_server):
    s = server(kind, apache, nginx, {"/api": API})
    r = s.get(f"/api?{redis_server.port}")
    assert r.status_code == 200, s.error_log()[-2000:]
    assert r.text == harness.inspected(API_EXPECTED)


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_connect_set_raw_names_the_server_of_redis_new(kind, apache, nginx,
                                                        redis_server):
    redis_server.command("SET", "k", "from the named server")
    s = server(kind, apache, nginx, {"/default": DEFAULT},
               init=f'Redis.connect_set_raw("127.0.0.1", '
                    f'{redis_server.port})')
    r = s.get("/default")
    assert (r.status_code, r.text) == (200, '"from the named server"'), \
        s.error_log()[-2000:]


class GarbageServer:
    """Answers every command with a line that is not Redis's protocol."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                try:
                    conn.settimeout(2)
                    conn.recv(4096)
                    conn.sendall(b"hello\r\n")
                    conn.recv(4096)
                except OSError:
                    pass

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_a_reply_out_of_protocol_is_a_protocol_error(kind, apache, nginx):
    garbage = GarbageServer()
    try:
        s = server(kind, apache, nginx, {"/garbage": GARBAGE})
        r = s.get(f"/garbage?{garbage.port}")
        assert (r.status_code, r.text) == \
            (200, "Redis::ProtocolError < Redis::ConnectionError"), \
            s.error_log()[-2000:]
    finally:
        garbage.close()

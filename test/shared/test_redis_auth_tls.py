"""::Redis to an ACL user, over a Unix socket and over TLS, against real
redis-servers on loopback: commands work, a refused password is a
Redis::AuthError (a ReplyError) that names no credential, in the response
or the error log, and a TLS handshake waits as any Redis wait does (on
nginx, on the event loop).  The scripts are the same under Apache and
nginx."""

import os
import socket
import threading
import time

import pytest

import harness
from test_redis import server

# Never in a URL (the access log) or in any answer or log line.
SECRET = "s3cret-Pw-4e1b9a"
DEFAULT_SECRET = "dEfault-Pw-77c2d0"
WRONG = "wr0ng-Pw-0f3c6a"


@pytest.fixture
def acl_redis(_servers):
    """A redis-server whose default user has a password (requirepass)
    and with an ACL user "app"."""
    r = harness.Redis(args=[
        "--user", "default", "on", f">{DEFAULT_SECRET}", "~*", "&*",
        "+@all",
        "--user", "app", "on", f">{SECRET}", "~*", "&*", "+@all",
    ], auth=("app", SECRET))
    _servers.servers.append(r)
    r.start()
    return r


ACL = r'''
port = get_server_class::Request.new.args.to_i
out = []
app = Redis.new("127.0.0.1", port, username: "app", password: "%(secret)s")
out << app.call("ACL", "WHOAMI")
out << app.set("k", "v")
out << app.get("k")
dflt = Redis.new("127.0.0.1", port, password: "%(default)s")
out << dflt.call("ACL", "WHOAMI")
out << dflt.get("k")
# the same user again: the interpreter's connection, not a new one
out << (Redis.new("127.0.0.1", port, username: "app",
                  password: "%(secret)s").call("CLIENT", "ID") ==
        app.call("CLIENT", "ID"))
out << app.inspect.include?("%(secret)s")
get_server_class.rputs out.join("\n")
''' % {"secret": SECRET, "default": DEFAULT_SECRET}


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_acl_user_and_password(kind, apache, nginx, acl_redis):
    s = server(kind, apache, nginx, {"/acl": ACL})
    r = s.get(f"/acl?{acl_redis.port}")
    assert (r.status_code, r.text) == (
        200, "app\nOK\nv\ndefault\nv\ntrue\nfalse"), s.error_log()[-2000:]
    assert SECRET not in s.error_log()


WRONG_CAUGHT = r'''
port = get_server_class::Request.new.args.to_i
out = []
[["app", "%(wrong)s"], [nil, "%(wrong)s"]].each do |user, pw|
  begin
    Redis.new("127.0.0.1", port, username: user, password: pw)
    out << "connected?!"
  rescue Redis::ReplyError => e
    out << "#{e.class}: #{e.message}"
    out << e.inspect
    out << e.backtrace.to_a.join(" ")
  end
end
# the right password after a wrong one: a connection of its own
out << Redis.new("127.0.0.1", port, username: "app",
                 password: "%(secret)s").call("ACL", "WHOAMI")
get_server_class.rputs out.join("\n")
''' % {"wrong": WRONG, "secret": SECRET}

WRONG_UNCAUGHT = r'''
port = get_server_class::Request.new.args.to_i
Redis.new("127.0.0.1", port, username: "app", password: "%(wrong)s")
''' % {"wrong": WRONG}


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_wrong_password_is_a_reply_error_without_the_secret(
        kind, apache, nginx, acl_redis):
    s = server(kind, apache, nginx, {"/caught": WRONG_CAUGHT,
                                     "/uncaught": WRONG_UNCAUGHT})
    r = s.get(f"/caught?{acl_redis.port}")
    assert r.status_code == 200, s.error_log()[-2000:]
    lines = r.text.split("\n")
    refused = (f"Redis::AuthError: 127.0.0.1:{acl_redis.port}: AUTH: "
               "WRONGPASS invalid username-password pair or user is "
               "disabled.")
    assert lines[0] == refused
    assert lines[3] == refused
    assert lines[-1] == "app"
    assert WRONG not in r.text and SECRET not in r.text

    r = s.get(f"/uncaught?{acl_redis.port}")
    assert r.status_code == 500
    log = s.wait_log("Redis::AuthError")
    assert "WRONGPASS" in log
    assert WRONG not in log and SECRET not in log


UNIX = r'''
path = "%(path)s"
out = []
r = Redis.new(path: path, timeout: 2)
out << r.set("k", "unix")
out << r.get("k")
out << r.pipelined { |p| p.incr("n"); p.incr("n") }.inspect
out << r.call("CLIENT", "INFO").include?("addr=#{path}:0")
out << [r.host, r.port, r.path == path].inspect
begin
  Redis.new(path: path + ".missing")
rescue Redis::ConnectionError => e
  out << e.message
end
get_server_class.rputs out.join("\n")
'''


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_unix_socket(kind, apache, nginx, _servers, tmpdir_www):
    path = os.path.join(tmpdir_www, "redis.sock")
    rs = harness.Redis(unixsocket=path)
    _servers.servers.append(rs)
    rs.start()
    s = server(kind, apache, nginx, {"/unix": UNIX % {"path": path}})
    r = s.get("/unix")
    assert (r.status_code, r.text) == (
        200, f"OK\nunix\n[1, 2]\ntrue\n[nil, nil, true]\n"
             f"connect to {path}.missing: No such file or directory"), \
        s.error_log()[-2000:]
    assert rs.command("GET", "k") == "unix"


# /both?<port>: the TCP server on <port>, and a Unix socket at the relative
# path "127.0.0.1:<port>" (in the server's directory, its workers' working
# directory), each written and read through objects of its own and then
# through new objects on the interpreter's kept connections
BOTH = r'''
port = get_server_class::Request.new.args.to_i
tcp = Redis.new("127.0.0.1", port)
unix = Redis.new(path: "127.0.0.1:#{port}")
tcp.set("where", "tcp")
unix.set("where", "unix")
get_server_class.rputs [tcp.get("where"), unix.get("where"),
  Redis.new("127.0.0.1", port).get("where"),
  Redis.new(path: "127.0.0.1:#{port}").get("where")].join(" ")
'''


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_unix_socket_named_as_a_tcp_address_is_its_own_connection(
        kind, apache, nginx, _servers, redis_server):
    s = server(kind, apache, nginx, {"/both": BOTH})
    rs = harness.Redis(unixsocket=os.path.join(
        s.dir, f"127.0.0.1:{redis_server.port}"))
    _servers.servers.append(rs)
    rs.start()
    r = s.get(f"/both?{redis_server.port}")
    assert (r.status_code, r.text) == (200, "tcp unix tcp unix"), \
        s.error_log()[-2000:]
    assert redis_server.command("GET", "where") == "tcp"
    assert rs.command("GET", "where") == "unix"


@pytest.fixture
def tls(tmpdir_www):
    """Certificates of a test CA, and of another CA nobody trusts."""
    files = harness.tls_files(tmpdir_www)
    files["other_ca"] = harness.tls_files(tmpdir_www, "other")["ca"]
    return files


@pytest.fixture
def tls_redis(_servers, tls):
    """A TLS-only redis-server (no plain port) that asks for a client
    certificate of the test CA, with a password."""
    r = harness.Redis(args=["--requirepass", SECRET], auth=(None, SECRET),
                      tls=(tls["ca"], tls["server_cert"], tls["server_key"]))
    _servers.servers.append(r)
    r.start()
    return r


TLS = r'''
port = get_server_class::Request.new.args.to_i
tls = { ca_file: "%(ca)s", cert: "%(cert)s", key: "%(key)s" }
out = []
r = Redis.new("127.0.0.1", port, password: "%(secret)s", ssl: true,
              ssl_params: tls, timeout: 5)
big = "x" * 300_000
out << r.set("big", big)
out << (r.get("big") == big)
out << r.pipelined { |p| 50.times { |i| p.set("k#{i}", big[0, 1000 * i]) } }
        .uniq.inspect
out << (r.mget("k49", "k10") == [big[0, 49_000], big[0, 10_000]])
out << r.call("CONFIG", "GET", "tls-port").inspect
# a CA that did not sign the server's certificate
begin
  Redis.new("127.0.0.1", port, password: "%(secret)s", ssl: true,
            ssl_params: tls.merge(ca_file: "%(other_ca)s"))
rescue Redis::ConnectionError => e
  out << e.message
end
# no client certificate, which the server asks for
begin
  Redis.new("127.0.0.1", port, password: "%(secret)s", ssl: true,
            ssl_params: { ca_file: "%(ca)s" }).ping
  out << "no certificate accepted?!"
rescue Redis::ConnectionError => e
  out << e.class.to_s
end
[{ ca_file: "%(ca)s.missing" }, { cert: "%(cert)s" }, { verify: 0 }]
    .each do |params|
  begin
    Redis.new("127.0.0.1", port, ssl: true, ssl_params: params)
  rescue ArgumentError => e
    out << e.message
  end
end
begin
  Redis.new(path: "/nowhere.sock", ssl: true)
rescue ArgumentError => e
  out << e.message
end
get_server_class.rputs out.join("\n")
'''


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_tls_with_a_client_certificate(kind, apache, nginx, tls, tls_redis):
    code = TLS % {"ca": tls["ca"], "cert": tls["client_cert"],
                  "key": tls["client_key"], "other_ca": tls["other_ca"],
                  "secret": SECRET}
    s = server(kind, apache, nginx, {"/tls": code})
    r = s.get(f"/tls?{tls_redis.port}")
    assert r.status_code == 200, s.error_log()[-2000:]
    lines = r.text.split("\n")
    refused = (f"connect to 127.0.0.1:{tls_redis.port}: TLS handshake: the "
               "server's certificate is refused: ")
    assert lines[5].startswith(refused), lines[5]
    lines[5] = refused
    assert lines == [
        "OK", "true", '["OK"]', "true",
        f'["tls-port", "{tls_redis.port}"]',
        refused,
        "Redis::CannotConnectError",
        f"Redis.new: ssl_params: {tls['ca']}.missing: No such file or "
        "directory",
        "Redis.new: ssl_params: a client certificate needs its key, and a "
        "key its certificate: give both cert and key",
        "Redis.new: ssl_params: unknown key :verify (known: :ca_file, "
        ":ca_path, :cert, :key)",
        "Redis.new: ssl: true with a path: Redis speaks TLS on its "
        "tls-port (TCP) only",
    ], s.error_log()[-2000:]
    assert harness.Redis.command(tls_redis, "STRLEN", "big") == ":300000"
    assert SECRET not in s.error_log()


# /stall?<port>: a TLS connect to a server that accepts and never answers
STALL = r'''
port = get_server_class::Request.new.args.to_i
begin
  Redis.new("127.0.0.1", port, ssl: true, timeout: 1.5)
  get_server_class.rputs "connected?!"
rescue Redis::TimeoutError => e
  get_server_class.rputs e.message
end
'''

FAST = r'''
get_server_class.rputs "fast"
'''


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_tls_handshake_waits_without_holding_the_worker(kind, apache, nginx):
    """The handshake's wait is a Redis wait: on nginx's single worker
    another request is served while it waits; both time out as the
    timeout says."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    try:
        s = server(kind, apache, nginx, {"/stall": STALL, "/fast": FAST})
        done = []
        t = threading.Thread(
            target=lambda: done.append(s.get(f"/stall?{port}").text))
        t.start()
        conn, _ = listener.accept()   # the handshake has begun
        fast = s.get("/fast")
        finished_first = not done
        t.join(10)
        conn.close()
        assert (fast.status_code, fast.text) == (200, "fast")
        assert finished_first
        assert done == [f"connect to 127.0.0.1:{port}: timed out"]
    finally:
        listener.close()


def one_node_tls_cluster(_servers, tls, args=()):
    """A Redis Cluster of one TLS-only master serving every slot, with a
    password (enough for the options to reach each node's ::Redis); args:
    more of its options."""
    r = harness.Redis(
        args=["--requirepass", SECRET, "--masterauth", SECRET,
              "--cluster-enabled", "yes", "--tls-cluster", "yes",
              "--tls-replication", "yes", *args],
        auth=(None, SECRET),
        tls=(tls["ca"], tls["server_cert"], tls["server_key"]))
    _servers.servers.append(r)
    r.start()
    assert r.command("CLUSTER", "ADDSLOTSRANGE", "0", "16383") == "+OK"
    for _ in range(100):
        if "cluster_state:ok" in r.command("CLUSTER", "INFO"):
            return r
        time.sleep(0.1)
    raise harness.HarnessError("the one-node cluster did not reach "
                               "cluster_state:ok")


@pytest.fixture
def tls_cluster_node(_servers, tls):
    return one_node_tls_cluster(_servers, tls)


CLUSTER = r'''
port = get_server_class::Request.new.args.to_i
tls = { ca_file: "%(ca)s", cert: "%(cert)s", key: "%(key)s" }
out = []
c = Redis::Cluster.new(["127.0.0.1:#{port}"], password: "%(secret)s",
                       ssl: true, ssl_params: tls, timeout: 5)
out << c.set("{u1}a", "1")
out << c.incr("{u1}a")
out << c.call("CONFIG", "GET", "tls-cluster").inspect
out << (c.inspect + Redis::Cluster.__map_for("127.0.0.1:#{port} 5",
        ["127.0.0.1:#{port}"], 5, nil, "%(secret)s", true,
        tls).inspect).include?("%(secret)s")
begin
  Redis::Cluster.new(["127.0.0.1:#{port}"], password: "%(wrong)s",
                     ssl: true, ssl_params: tls).get("x")
  out << "connected?!"
rescue Redis::ReplyError => e
  out << "#{e.class}: #{e.message}"
end
begin
  Redis::Cluster.new(["127.0.0.1:#{port}"], path: "/nowhere.sock")
rescue ArgumentError => e
  out << e.class.to_s
end
get_server_class.rputs out.join("\n")
'''


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_cluster_with_a_password_over_tls(kind, apache, nginx, tls,
                                          tls_cluster_node):
    port = tls_cluster_node.port
    code = CLUSTER % {"ca": tls["ca"], "cert": tls["client_cert"],
                      "key": tls["client_key"], "secret": SECRET,
                      "wrong": WRONG}
    s = server(kind, apache, nginx, {"/cluster": code})
    r = s.get(f"/cluster?{port}")
    assert (r.status_code, r.text) == (200, "\n".join([
        "OK", "2", '["tls-cluster", "yes"]', "false",
        f"Redis::AuthError: 127.0.0.1:{port}: AUTH: WRONGPASS invalid "
        "username-password pair or user is disabled.",
        "ArgumentError"])), s.error_log()[-2000:]
    log = s.error_log()
    assert SECRET not in log and WRONG not in log


# /cluster?<port>&<ssl>: INCR n through a Redis::Cluster with or without
# TLS, the node's certificate trusted through the system's CAs (the
# workers' SSL_CERT_FILE): the reply, or the error's class
CLUSTER_SSL_OR_NOT = r'''
port, ssl = get_server_class::Request.new.args.split("&")
c = Redis::Cluster.new(["127.0.0.1:#{port}"], password: "%(secret)s",
                       ssl: ssl == "ssl", timeout: 2)
begin
  get_server_class.rputs c.incr("n").to_s
rescue Redis::BaseError => e
  get_server_class.rputs e.class.to_s
end
''' % {"secret": SECRET}


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_clusters_with_and_without_tls_keep_maps_of_their_own(
        kind, apache, nginx, _servers, tls, monkeypatch):
    """Two Redis::Cluster over the same node, one with TLS and one
    without, have a slot map each: the TLS one is read once, however the
    requests alternate (the plain one never gets through: the node speaks
    TLS only)."""
    node = one_node_tls_cluster(_servers, tls,
                                ["--tls-auth-clients", "no"])
    monkeypatch.setenv("SSL_CERT_FILE", tls["ca"])   # Apache's workers
    kw = {"main_conf": f"env SSL_CERT_FILE={tls['ca']};"}   # nginx's
    s = harness.one_interpreter(
        kind if kind == "nginx" else "apache-prefork", apache, nginx,
        {"/cluster": "cluster.rb"}, {"cluster.rb": CLUSTER_SSL_OR_NOT},
        **(kw if kind == "nginx" else {}))
    answers = [s.get(f"/cluster?{node.port}&{ssl}").text
               for ssl in ("ssl", "plain", "ssl", "plain", "ssl")]
    assert answers == ["1", "Redis::ConnectionError", "2",
                       "Redis::ConnectionError", "3"], s.error_log()[-2000:]
    stats = node.command("INFO", "commandstats")
    assert "cmdstat_cluster|slots:calls=1," in stats, stats
    assert SECRET not in s.error_log()


# /kept?<port>: INCR n through the interpreter's kept TLS connection
KEPT = r'''
port = get_server_class::Request.new.args.to_i
r = Redis.new("127.0.0.1", port, password: "%(secret)s", ssl: true,
              ssl_params: { ca_file: "%(ca)s", cert: "%(cert)s",
                            key: "%(key)s" })
get_server_class.rputs "#{r.incr("n")} #{r.call("CLIENT", "ID")}"
'''


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_tls_connection_kept_and_reopened_after_the_server_closed_it(
        kind, apache, nginx, tls, tls_redis):
    """The TLS link is kept across requests, and one the server closed
    (CLIENT KILL) is reopened by the next command, sent once."""
    code = KEPT % {"ca": tls["ca"], "cert": tls["client_cert"],
                   "key": tls["client_key"], "secret": SECRET}
    if kind == "apache":
        s = server(kind, apache, nginx, {"/kept": code}, mpm="prefork",
                   mpm_conf=harness.ONE_CHILD["prefork"])
    else:
        s = server(kind, apache, nginx, {"/kept": code})
    answers = [s.get(f"/kept?{tls_redis.port}").text.split()
               for _ in range(3)]
    assert [a[0] for a in answers] == ["1", "2", "3"], s.error_log()[-2000:]
    assert len({a[1] for a in answers}) == 1

    assert tls_redis.command("CLIENT", "KILL", "TYPE", "normal",
                             "SKIPME", "yes") == ":1"
    n, after = s.get(f"/kept?{tls_redis.port}").text.split()
    assert n == "4", s.error_log()[-2000:]
    assert int(after) > int(answers[0][1])
    assert tls_redis.command("GET", "n") == "4"

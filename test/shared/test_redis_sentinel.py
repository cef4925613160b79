"""Redis.new(sentinels:) on real servers against a real master with two
replicas and three redis-sentinel on loopback: the master and a replica
found through the sentinels and checked with ROLE, once per interpreter; a
wrong name refused with a clear error; the same over TLS with an ACL user
on the servers and a password on the sentinels, through a failover, and a
wrong or missing password a Redis::AuthError that names no secret; and
SENTINEL FAILOVER under load: requests fail only while it runs, none waits
past its timeout, none answers wrong, and the first request after it
succeeds.  One script, both servers; requests one after another run in
one interpreter."""

import concurrent.futures
import re
import threading
import time

import pytest

import harness

KINDS = ["nginx", "apache-event"]

# /where?sentinels&name&role: the server found, its ROLE, and a few
# commands there.
WHERE = r'''
Server = get_server_class
sentinels, name, role = Server::Request.new.args.split("&")
out = []
begin
  r = Redis.new(sentinels: sentinels.split(","), name: name,
                role: role.to_sym, timeout: 2)
  out << "#{r.host}:#{r.port}" << r.call("ROLE")[0]
  if role == "master"
    r.set("k", "v")
    out << r.get("k") << r.pipelined { |p| p.incr("n"); p.get("k") }.inspect
  else
    out << r.get("seeded").inspect
  end
rescue Redis::BaseError, ArgumentError => e
  out << "#{e.class}: #{e.message}"
end
Server.rputs out.join("\n")
'''

# /rw?sentinels&i: SET k<i> <i>, then GET it back.
RW = r'''
Server = get_server_class
sentinels, i = Server::Request.new.args.split("&")
begin
  r = Redis.new(sentinels: sentinels.split(","), name: "mymaster",
                timeout: 0.5)
  r.set("k#{i}", i)
  Server.rputs "#{r.get("k#{i}")} #{r.port}"
rescue Redis::BaseError => e
  Server.rputs "ERR #{e.class}: #{e.message}"
end
'''


@pytest.fixture
def sentinel(_servers):
    s = harness.RedisSentinel()
    _servers.servers.append(s)
    return s.start()


def serve(kind, apache, nginx, script):
    """script as /where and /rw, one interpreter."""
    name = "where" if script == WHERE else "rw"
    return harness.one_interpreter(kind, apache, nginx,
                                   {f"/{name}": "script.rb"},
                                   {"script.rb": script})


def calls(node, command):
    m = re.search(rf"cmdstat_{re.escape(command)}:calls=(\d+)",
                  node.command("INFO", "commandstats"))
    return int(m.group(1)) if m else 0


@pytest.mark.parametrize("kind", KINDS)
def test_master_and_replica_found(kind, apache, nginx, sentinel):
    """The master, then a replica, as the sentinels name them; ROLE asked
    once per server and interpreter, not per request."""
    sentinels = ",".join(sentinel.addresses())
    master = sentinel.master
    assert master.command("SET", "seeded", "yes") == "+OK"
    assert master.command("WAIT", 2, 5000) == ":2"
    s = serve(kind, apache, nginx, WHERE)
    for n in range(1, 4):
        r = s.get(f"/where?{sentinels}&mymaster&master")
        assert (r.status_code, r.text) == (
            200, f'127.0.0.1:{master.port}\nmaster\nv\n[{n}, "v"]'), \
            s.error_log()[-2000:]
    assert calls(master, "role") == 3 + 1     # one check, 3 by the script
    assert calls(master, "set") == 3 + 1

    r = s.get(f"/where?{sentinels}&mymaster&replica")
    replica_ports = {n.port for n in sentinel.replicas}
    lines = r.text.split("\n")
    assert r.status_code == 200 and len(lines) == 3, s.error_log()[-2000:]
    assert int(lines[0].split(":")[1]) in replica_ports
    assert lines[1:] == ["slave", '"yes"']


# /mutate?sentinels: a script that changes its list and name after
# Redis.new.
MUTATE = r'''
Server = get_server_class
sentinels = Server::Request.new.args.split(",")
name = "mymaster"
r = Redis.new(sentinels: sentinels, name: name, timeout: 2)
sentinels << "127.0.0.1:1"
name << "!"
Server.rputs r.get("k").inspect
'''


@pytest.mark.parametrize("kind", KINDS)
def test_group_kept_when_a_script_changes_its_list(kind, apache, nginx,
                                                   sentinel):
    """The interpreter's group is found again after a script changed the
    Array and the String it gave: the master is asked ROLE once."""
    s = harness.one_interpreter(kind, apache, nginx,
                                {"/mutate": "mutate.rb"},
                                {"mutate.rb": MUTATE})
    for _ in range(3):
        r = s.get(f"/mutate?{','.join(sentinel.addresses())}")
        assert (r.status_code, r.text) == (200, "nil"), s.error_log()[-2000:]
    assert calls(sentinel.master, "role") == 1


@pytest.mark.parametrize("kind", KINDS)
def test_wrong_name_and_arguments(kind, apache, nginx, sentinel):
    sentinels = ",".join(sentinel.addresses())
    s = serve(kind, apache, nginx, WHERE)
    r = s.get(f"/where?{sentinels}&nosuch&master")
    assert r.text == (
        'Redis::ConnectionError: Redis: no sentinel monitors a master named '
        f'"nosuch" (asked {", ".join(sentinel.addresses())})'), \
        s.error_log()[-2000:]
    r = s.get(f"/where?{sentinels}&mymaster&primary")
    assert r.text == ("ArgumentError: Redis.new: role: is :master or "
                      ":replica, not :primary")
    r = s.get("/where?127.0.0.1&mymaster&master")
    assert r.text == ('ArgumentError: Redis.new: sentinels: is an Array of '
                      '"host:port" Strings, not ["127.0.0.1"]')


# Never in a URL (the access log) or in any answer or log line.
SECRET = "app-Pw-5d2e8c"
DEFAULT_SECRET = "dEfault-Pw-91b7f4"
SENTINEL_SECRET = "sEntinel-Pw-3a6c0e"
WRONG = "wr0ng-Pw-c81d27"


@pytest.fixture
def secure_sentinel(_servers, tmpdir_www):
    """Servers and sentinels TLS only (client certificates of a test CA),
    the servers with a password for the default user (the sentinels'
    auth-pass) and an ACL user "app", the sentinels with a password of
    their own."""
    tls = harness.tls_files(tmpdir_www)
    s = harness.RedisSentinel(
        "sentinel-tls", password=DEFAULT_SECRET, users=[("app", SECRET)],
        sentinel_password=SENTINEL_SECRET,
        tls=(tls["ca"], tls["server_cert"], tls["server_key"]))
    _servers.servers.append(s)
    s.start()
    s.client_tls = tls
    return s


# /secure?sentinels&role: as the ACL user "app", over TLS, the sentinels
# with their password; on the master an INCR first (refused by a master
# that became a replica, and sent again on the new one).
SECURE = r'''
Server = get_server_class
sentinels, role = Server::Request.new.args.split("&")
out = []
r = Redis.new(sentinels: sentinels.split(","), name: "mymaster",
              role: role.to_sym, username: "app", password: "%(secret)s",
              sentinel_password: "%(sentinel_secret)s", ssl: true,
              ssl_params: { ca_file: "%(ca)s", cert: "%(cert)s",
                            key: "%(key)s" }, timeout: 2)
out << r.incr("n") if role == "master"
out << "#{r.host}:#{r.port}" << r.call("ROLE")[0]
out << r.call("ACL", "WHOAMI") << r.call("CONFIG", "GET", "tls-port")[1]
out << (r.inspect + Redis::Sentinel.instance_variable_get(:@groups).inspect)
       .include?("Pw-")
Server.rputs out.join("\n")
'''

# /wrong?sentinels: each wrong or missing password, caught; then the
# right ones; then options that do not go together.
WRONG_CAUGHT = r'''
Server = get_server_class
sentinels = Server::Request.new.args.split(",")
tls = { ca_file: "%(ca)s", cert: "%(cert)s", key: "%(key)s" }
out = []
[["app", "%(wrong)s", "%(sentinel_secret)s"],
 ["app", nil, "%(sentinel_secret)s"],
 ["app", "%(secret)s", "%(wrong)s"],
 ["app", "%(secret)s", nil]].each do |user, pw, sentinel_pw|
  begin
    Redis.new(sentinels: sentinels, name: "mymaster", username: pw && user,
              password: pw, sentinel_password: sentinel_pw, ssl: true,
              ssl_params: tls, timeout: 2)
    out << "connected?!"
  rescue Redis::ReplyError => e
    out << "#{e.class}: #{e.message}"
    out << e.backtrace.to_a.join(" ")
  end
end
out << Redis.new(sentinels: sentinels, name: "mymaster", username: "app",
                 password: "%(secret)s",
                 sentinel_password: "%(sentinel_secret)s", ssl: true,
                 ssl_params: tls).call("ACL", "WHOAMI")
[{ sentinels: sentinels, name: "mymaster", path: "/run/redis.sock" },
 { sentinels: sentinels, name: "mymaster", sentinel_username: "app" },
 { sentinel_password: "%(sentinel_secret)s" }].each do |o|
  begin
    Redis.new(**o)
    out << "connected?!"
  rescue ArgumentError => e
    out << e.message
  end
end
Server.rputs out.join("\n")
'''

WRONG_UNCAUGHT = r'''
sentinels = get_server_class::Request.new.args.split(",")
Redis.new(sentinels: sentinels, name: "mymaster", username: "app",
          password: "%(wrong)s", sentinel_password: "%(sentinel_secret)s",
          ssl: true, ssl_params: { ca_file: "%(ca)s", cert: "%(cert)s",
                                   key: "%(key)s" })
'''


def secure_scripts(sentinel, *scripts):
    files = {"ca": sentinel.client_tls["ca"],
             "cert": sentinel.client_tls["client_cert"],
             "key": sentinel.client_tls["client_key"], "secret": SECRET,
             "sentinel_secret": SENTINEL_SECRET, "wrong": WRONG}
    return [script % files for script in scripts]


@pytest.mark.parametrize("kind", KINDS)
def test_acl_user_and_tls_through_a_failover(kind, apache, nginx,
                                             secure_sentinel):
    """The master and a replica found over TLS with the sentinels'
    password, used as the ACL user; ROLE asked once for the master in
    three requests; after SENTINEL FAILOVER the INCR refused by the old
    master is sent again on the new one, with the same user and TLS."""
    sentinel = secure_sentinel
    sentinels = ",".join(sentinel.addresses())
    master = sentinel.master
    code, = secure_scripts(sentinel, SECURE)
    s = harness.one_interpreter(kind, apache, nginx, {"/secure": "s.rb"},
                                {"s.rb": code})
    for n in range(1, 4):
        r = s.get(f"/secure?{sentinels}&master")
        assert (r.status_code, r.text) == (200, "\n".join([
            str(n), f"127.0.0.1:{master.port}", "master", "app",
            str(master.port), "false"])), s.error_log()[-2000:]
    assert calls(master, "role") == 3 + 1

    r = s.get(f"/secure?{sentinels}&replica")
    lines = r.text.split("\n")
    replica_ports = {str(n.port) for n in sentinel.replicas}
    assert r.status_code == 200 and len(lines) == 5, s.error_log()[-2000:]
    assert lines[0].split(":")[1] in replica_ports
    assert lines[1:] == ["slave", "app", lines[0].split(":")[1], "false"]

    new = sentinel.failover()
    r = s.get(f"/secure?{sentinels}&master")
    lines = r.text.split("\n")
    assert r.status_code == 200 and lines[1:] == [
        f"127.0.0.1:{new.port}", "master", "app", str(new.port),
        "false"], (r.text, s.error_log()[-2000:])
    log = s.error_log()
    assert SECRET not in log and SENTINEL_SECRET not in log


@pytest.mark.parametrize("kind", KINDS)
def test_wrong_password_is_a_reply_error_without_the_secret(
        kind, apache, nginx, secure_sentinel):
    """A wrong or missing password, the servers' or the sentinels', is a
    Redis::AuthError naming the server that refused it and no secret, in
    the answer or the error log; the right ones work after them; options
    that do not go together are an ArgumentError."""
    sentinel = secure_sentinel
    master = sentinel.master.port
    first = sentinel.sentinels[0]
    caught, uncaught = secure_scripts(sentinel, WRONG_CAUGHT, WRONG_UNCAUGHT)
    s = harness.one_interpreter(kind, apache, nginx,
                                {"/caught": "c.rb", "/uncaught": "u.rb"},
                                {"c.rb": caught, "u.rb": uncaught})
    r = s.get(f"/caught?{','.join(sentinel.addresses())}")
    assert r.status_code == 200, s.error_log()[-2000:]
    lines = r.text.split("\n")
    wrongpass = ("AUTH: WRONGPASS invalid username-password pair or user "
                 "is disabled.")
    assert lines[0::2][:4] == [
        f"Redis::AuthError: 127.0.0.1:{master}: {wrongpass}",
        f"Redis::AuthError: 127.0.0.1:{master}: NOAUTH Authentication "
        "required.",
        f"Redis::AuthError: 127.0.0.1:{first}: {wrongpass}",
        f"Redis::AuthError: 127.0.0.1:{first}: NOAUTH Authentication "
        "required.",
    ], r.text
    assert lines[8:] == [
        "app",
        "Redis.new: path: with sentinels: the sentinels name their servers "
        "by host and port",
        "Redis.new: sentinel_username: without sentinel_password:",
        "Redis.new: sentinel_password: goes with sentinels:",
    ], r.text
    for secret in (WRONG, SECRET, SENTINEL_SECRET, DEFAULT_SECRET):
        assert secret not in r.text

    r = s.get(f"/uncaught?{','.join(sentinel.addresses())}")
    assert r.status_code == 500
    log = s.wait_log("Redis::AuthError")
    assert "WRONGPASS" in log
    for secret in (WRONG, SECRET, SENTINEL_SECRET, DEFAULT_SECRET):
        assert secret not in log


def load(server, sentinels, stop, first):
    """Requests /rw one after another until stop is set: a list of
    (i, started, ended, text), i counting from first.  Each on a
    connection of its own: Apache's event MPM closes idle kept-alive
    connections when its threads are busy, and a request sent on one
    then would get no answer at all."""
    done = []
    i = first
    while not stop.is_set():
        started = time.monotonic()
        text = server.get(f"/rw?{sentinels}&{i}", timeout=10,
                          headers={"Connection": "close"}).text
        done.append((i, started, time.monotonic(), text))
        i += 1
    return done


@pytest.mark.parametrize("kind", KINDS)
def test_failover_under_load(kind, apache, nginx, _servers):
    """SENTINEL FAILOVER while four clients write and read back: every
    answer is the request's own value or an error; errors only between
    the FAILOVER and the end of the switch; no request waits past its
    commands' timeouts; after the switch every request succeeds, on the
    new master, and no write acknowledged after the old master began
    refusing is lost: the servers refuse writes on a master that lost a
    replica (min-replicas-to-write 2), as docs/shared_state.md advises,
    and the client follows the NOREPLICAS refusals to the new master."""
    sentinel = harness.RedisSentinel(min_replicas=2)
    _servers.servers.append(sentinel)
    sentinel.start()
    sentinels = ",".join(sentinel.addresses())
    s = serve(kind, apache, nginx, RW)
    assert s.get(f"/rw?{sentinels}&0").text == f"0 {sentinel.master.port}"

    clients = 4
    stop = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(clients) as ex:
        futures = [ex.submit(load, s, sentinels, stop, 1 + c * 1000000)
                   for c in range(clients)]
        time.sleep(1)
        began = time.monotonic()
        try:
            new = sentinel.failover()
        finally:
            switched = time.monotonic()
            # the load goes on for a second on the new master
            time.sleep(1)
            stop.set()
        results = [f.result() for f in futures]
    results = [r for rs in results for r in rs]

    errors = [r for r in results if r[3].startswith("ERR ")]
    wrong = [r for r in results if not r[3].startswith("ERR ")
             and r[3].split(" ")[0] != str(r[0])]
    slow = [r for r in results if r[2] - r[1] > 3 * 0.5 + 1.0]
    assert not wrong, wrong[:5]
    assert not slow, slow[:5]
    assert all(began <= r[2] and r[1] <= switched for r in errors), \
        [(r[1] - began, r[2] - began, r[3]) for r in errors][:5]
    late = [r for r in results if r[1] > switched]
    assert late and all(r[3] == f"{r[0]} {new.port}" for r in late), \
        late[:5]
    lost = [r for r in results if not r[3].startswith("ERR ")
            and new.command("GET", f"k{r[0]}") != str(r[0])]
    print(f"{kind}: {len(results)} requests, {len(errors)} errors "
          f"in {switched - began:.2f} s of failover, "
          f"{len(lost)} acknowledged writes lost; errors: "
          f"{sorted({r[3][:80] for r in errors})}")
    # Replication is asynchronous: a write the old master acknowledged
    # just before the promoted replica left it may not have reached it.
    # None acknowledged after the old master began refusing (the first
    # error) is lost: the client went on to the new master.
    assert errors
    first_refusal = min(r[2] for r in errors)
    assert all(r[1] < first_refusal for r in lost), \
        [(r[0], r[1] - began, r[2] - began) for r in lost][:10]

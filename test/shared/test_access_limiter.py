"""examples/access_limiter on real servers: the access-limiter post's configuration as
written (Apache) and the same scripts under nginx, a worker killed in the
middle of requests, and fleet mode (servers sharing a limit through one
Redis, a Redis Cluster or Sentinel; a server killed; Redis down)."""

import concurrent.futures
import os
import re
import signal
import threading
import time

import pytest
import requests

import harness

EXAMPLE = os.path.join(harness.REPO, "examples", "access_limiter")
SCRIPTS = ("access_limiter_init.rb", "access_limiter_worker_init.rb",
           "access_limiter.rb", "access_limiter_end.rb")

# Reads a count: /count?<filename>
COUNT = r'''
Server = get_server_class
d = Server::SharedDict.new("access_limiter")
Server.rputs d[Server::Request.new.args].inspect
'''

# Reads the fleet's count in Redis: /fleet_count?<filename>
FLEET_COUNT = r'''
Server = get_server_class
Server.rputs AccessLimiter.fleet_count(Server::Request.new.args).inspect
'''


def read(name):
    with open(os.path.join(EXAMPLE, name)) as f:
        return f.read()


def ruby_strings(items):
    return "[%s]" % ", ".join(f'"{i}"' for i in items)


def install(server, threshold=2, redis=None, fail_open=True, lease=60):
    """Copies the example's scripts under server.dir/access_limiter, with
    the settings block of access_limiter.rb changed as asked (redis: a
    "host:port", a list of a cluster's nodes, or a harness.RedisSentinel);
    returns that directory."""
    for name in SCRIPTS:
        text = read(name)
        if name == "access_limiter.rb":
            text = text.replace("threshold = 2", f"threshold = {threshold}")
            if isinstance(redis, list):    # a cluster's nodes
                text = text.replace("redis = nil",
                                    f"redis = {ruby_strings(redis)}")
            elif isinstance(redis, harness.RedisSentinel):
                text = text.replace("redis = nil", "redis = { sentinels: "
                                    f"{ruby_strings(redis.addresses())}, "
                                    f'name: "{redis.NAME}" }}')
            elif redis:
                text = text.replace("redis = nil", f'redis = "{redis}"')
            if not fail_open:
                text = text.replace("fail_open = true", "fail_open = false")
            text = text.replace("lease = 60 ", f"lease = {lease} ")
            assert "threshold = %d" % threshold in text
            assert "lease = %s " % lease in text
        server.write(f"access_limiter/{name}", text)
    return os.path.join(server.dir, "access_limiter")


def start_apache(apache, mpm="event", sleep=2, docroot=None, loglevel="info",
                 modules=(), extra_conf="", declare=True, **settings):
    """Apache with the example's apache.conf as written (paths to our copy
    of the scripts), a slow sleep.php, and /count."""
    a = apache(start=False, mpm=mpm, loglevel=loglevel, modules=modules)
    d = install(a, **settings)
    # the slow page waits until the test opens its gate (open_gate), at
    # most `sleep` seconds: requests that must overlap do, however slowly
    # the machine runs them
    a.write("sleep.rb", f"""\
deadline = Time.now + {sleep}
Apache.sleep 0.01 until File.exist?("{a.dir}/gate") || Time.now > deadline
Apache.rputs "loaded"
""")
    a.write("count.rb", COUNT)
    a.write("fleet_count.rb", FLEET_COUNT)
    conf = read("apache.conf").replace("@DIR@", d)
    if not declare:
        # as the access-limiter post prints it: no dictionary declared
        conf = conf.replace("mrubySharedDict access_limiter 1m\n", "")
        assert "mrubySharedDict" not in conf
    # the demo handler, with our sleep time
    conf = conf.replace(f"{d}/sleep.rb", "{dir}/sleep.rb")
    if docroot:
        # fleet members share one document tree, as real ones would
        conf += (f"\nDocumentRoot {docroot}\n<Directory {docroot}>\n"
                 "  Require all granted\n</Directory>\n")
    a.conf = (conf + "\n<Location /count>\n  mrubyHandlerMiddle "
              "{dir}/count.rb\n</Location>\n<Location /fleet_count>\n"
              "  mrubyHandlerMiddle {dir}/fleet_count.rb\n</Location>\n"
              + extra_conf)
    a.write_doc("access_limiter/sleep.php", "<?php sleep(3); ?>")
    a.write_doc("access_limiter/fast.php", "fast")
    a.start()
    return a


REQUEST_ID_MAP = ("map $request_id $access_limiter_request_id "
                  "{ default $request_id; }")


def start_nginx(nginx, workers=2, page_kb=3, listen="", loglevel="info",
                declare=True, docroot=None, request_id=True, **settings):
    """nginx with the example's nginx-http.conf and nginx.conf (sleep.php:
    page_kb KB at 1 KB/s), /count and /fleet_count; docroot: another
    server's document tree to serve (fleet members share one);
    request_id=False: without the map that keeps $request_id."""
    n = nginx(start=False, workers=workers, loglevel=loglevel)
    d = install(n, **settings)
    n.write("count.rb", COUNT)
    n.write("fleet_count.rb", FLEET_COUNT)
    http = read("nginx-http.conf").replace("@DIR@", d)
    if not declare:
        http = http.replace("mruby_shared_dict access_limiter 1m;\n", "")
        assert "mruby_shared_dict" not in http
    if not request_id:
        http = http.replace(REQUEST_ID_MAP, "")
        assert "map $request_id" not in http
    server = read("nginx.conf").replace("@DIR@", d)
    root = docroot or "{docroot}"
    n.conf = f"""{http}
server {{
    listen 127.0.0.1:{{port}} {listen};
    root {root};
    location = /count {{ mruby_content_handler {{dir}}/count.rb; }}
    location = /fleet_count {{
        mruby_content_handler {{dir}}/fleet_count.rb;
    }}
{server}
}}"""
    with open(os.path.join(EXAMPLE, "htdocs", "sleep.php"), "rb") as f:
        page = f.read()
    page = page * (page_kb * 1024 // len(page))
    if docroot:
        path = os.path.join(docroot, "access_limiter", "sleep.php")
        with open(path, "wb") as f:
            f.write(page)
    else:
        n.write_doc("access_limiter/sleep.php", page)
        n.write_doc("access_limiter/fast.php", "fast")
    n.start()
    return n


def open_gate(*servers):
    """Lets the slow pages of servers finish (see start_apache)."""
    for s in servers:
        s.write("gate", "")


def close_gate(*servers):
    """Makes the slow pages of servers wait again."""
    for s in servers:
        if os.path.exists(os.path.join(s.dir, "gate")):
            os.remove(os.path.join(s.dir, "gate"))


def gated_gets(urls, servers, early):
    """GETs every url at once (one connection each) to servers whose slow
    pages wait on their gates; once `early` responses arrived (the
    refusals), opens the gates; returns the responses in order."""
    def one(url):
        return requests.get(url, timeout=60, headers={"Connection": "close"})
    with concurrent.futures.ThreadPoolExecutor(len(urls)) as ex:
        futures = [ex.submit(one, u) for u in urls]
        deadline = time.monotonic() + 30
        while sum(f.done() for f in futures) < early:
            assert time.monotonic() < deadline, "refusals did not come"
            time.sleep(0.02)
        open_gate(*servers)
        return [f.result() for f in futures]


def redis_count_gone(redis_server, filename, timeout=5.0):
    """Waits until the fleet's key of filename is gone from Redis: the log
    phase's count out runs after the response went out."""
    deadline = time.monotonic() + timeout
    key = limiter_key(filename)
    while redis_server.command("EXISTS", key) != ":0":
        assert time.monotonic() < deadline, f"{key} still counted"
        time.sleep(0.02)


def concurrent_gets(urls):
    """GETs every url at once (one connection each); returns the responses
    in order."""
    def one(url):
        return requests.get(url, timeout=30, headers={"Connection": "close"})
    with concurrent.futures.ThreadPoolExecutor(len(urls)) as ex:
        return list(ex.map(one, urls))


def count(server, filename):
    """The count of filename in the dictionary, as the server reads it."""
    return requests.get(server.url("/count?" + filename), timeout=10,
                        headers={"Connection": "close"}).text


def fleet_count(server, filename):
    """The fleet's count of filename in Redis, as the server reads it."""
    return requests.get(server.url("/fleet_count?" + filename), timeout=10,
                        headers={"Connection": "close"}).text


def settled_count(server, filename, want="0", timeout=5.0):
    """count(), asked again until it is want or timeout passes: a request's
    log phase, which counts it out, runs after its response has gone."""
    deadline = time.monotonic() + timeout
    while True:
        got = count(server, filename)
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def sleep_php(server):
    return os.path.join(server.docroot, "access_limiter", "sleep.php")


def statuses(responses):
    return sorted(r.status_code for r in responses)


@pytest.mark.parametrize("mpm", ["event", "prefork"])
def test_post_config_apache_ten_at_once(apache, mpm):
    """Threshold 2, ten concurrent requests to a slow page: two load, eight
    get 503, with the post's log lines; afterwards the count is back to 0."""
    a = start_apache(apache, mpm=mpm, sleep=30)
    a.wait_log("access_limiter: counting in shared dictionary access_limiter")
    rs = gated_gets([a.url("/access_limiter/sleep.php")] * 10, [a], early=8)
    assert statuses(rs) == [200] * 2 + [503] * 8
    assert [r.text for r in rs if r.status_code == 200] == ["loaded"] * 2

    f = sleep_php(a)
    log = a.wait_log(f"access_limiter: file:{f} reached threshold: 2: "
                     "return 503")
    for n in range(1, 4):
        assert f"access_limiter: file:{f} counter:{n}" in log
    assert re.search(r"\[mruby:info\] .* access_limiter: file:\S+ counter:1",
                     log)
    assert re.search(r"\[mruby:notice\] .* access_limiter: file:\S+ reached "
                     r"threshold: 2: return 503", log)
    assert log.count("reached threshold: 2: return 503") == 8
    assert settled_count(a, f) == "0"

    # not limited: another file, and the same file once the two are done
    assert a.get("/access_limiter/fast.php").status_code == 200
    assert a.get("/access_limiter/sleep.php").status_code == 200


UNDECLARED_NOTICE = ('shared dictionary "access_limiter" was not declared: '
                     'made with the default size 1m; size it with '
                     'mrubySharedDict access_limiter <size> (Apache) or '
                     'mruby_shared_dict access_limiter <size>; (nginx)')


@pytest.mark.parametrize("mpm", ["event", "prefork"])
def test_post_config_as_printed_apache(apache, mpm):
    """The access-limiter post's configuration as it prints it (no mrubySharedDict): the
    post_config script makes the dictionary with the default size and says
    so; the limit works across the children."""
    a = start_apache(apache, mpm=mpm, sleep=30, declare=False)
    assert UNDECLARED_NOTICE in a.wait_log("was not declared")
    rs = gated_gets([a.url("/access_limiter/sleep.php")] * 6, [a], early=4)
    assert statuses(rs) == [200] * 2 + [503] * 4
    assert settled_count(a, sleep_php(a)) == "0"


def test_post_config_as_printed_nginx(nginx):
    """The same without mruby_shared_dict: mruby_init makes it in the
    master, both workers count in it."""
    n = start_nginx(nginx, workers=2, declare=False)
    assert UNDECLARED_NOTICE in n.wait_log("was not declared")
    rs = concurrent_gets([n.url("/access_limiter/sleep.php")] * 6)
    assert statuses(rs) == [200] * 2 + [503] * 4


def test_undeclared_dictionary_in_a_request_is_an_error(apache):
    """A request script cannot make a dictionary (its worker could not
    share it): the error says what to do."""
    a2 = apache("""
<Location /new>
    mrubyHandlerMiddleCode 'Apache::SharedDict.new("fresh")'
</Location>
""")
    assert a2.get("/new").status_code == 500
    assert ('no shared dictionary named "fresh": declare it with '
            'mrubySharedDict (Apache) or mruby_shared_dict (nginx), or open '
            'it first in a post_config / mruby_init script (not in a startup '
            'script)') in a2.wait_log("fresh")


def test_sub_request_not_counted_apache(apache):
    """A page that includes a limited file (an SSI sub-request, which runs
    the access phase but never the log phase) leaves no count behind."""
    a = start_apache(apache, modules=["include"], extra_conf="""
<Location /access_limiter/page.shtml>
  Options +Includes
  SetOutputFilter INCLUDES
</Location>
""")
    a.write_doc("access_limiter/page.shtml",
                '<!--#include virtual="fast.php" -->\n')
    for _ in range(3):
        r = a.get("/access_limiter/page.shtml")
        assert (r.status_code, r.text) == (200, "fast\n")
    f = os.path.join(a.docroot, "access_limiter", "fast.php")
    assert count(a, f) == "nil"
    assert a.get("/access_limiter/fast.php").status_code == 200
    assert settled_count(a, f) == "0"


def test_same_scripts_nginx_ten_at_once(nginx):
    n = start_nginx(nginx, workers=2)
    rs = concurrent_gets([n.url("/access_limiter/sleep.php")] * 10)
    assert statuses(rs) == [200] * 2 + [503] * 8
    assert all(len(r.content) == 3072 for r in rs if r.status_code == 200)

    f = sleep_php(n)
    log = n.wait_log(f"access_limiter: file:{f} reached threshold: 2: "
                     "return 503")
    assert f"access_limiter: file:{f} counter:2" in log
    assert log.count("reached threshold: 2: return 503") == 8
    assert settled_count(n, f) == "0"
    assert n.get("/access_limiter/fast.php").status_code == 200


def test_counter_line_only_at_info_apache(apache):
    """LogLevel warn: no counter:N line, while refusals still work and are
    logged (Apache logs notice whatever its LogLevel)."""
    a = start_apache(apache, loglevel="warn", threshold=0)
    rs = [a.get("/access_limiter/fast.php") for _ in range(3)]
    assert statuses(rs) == [503] * 3
    f = os.path.join(a.docroot, "access_limiter", "fast.php")
    log = a.wait_log(f"access_limiter: file:{f} reached threshold: 0: "
                     "return 503")
    assert "counter:" not in log
    assert settled_count(a, f) == "0"


def test_counter_line_only_at_info_nginx(nginx):
    n = start_nginx(nginx, loglevel="warn", threshold=0)
    rs = [n.get("/access_limiter/fast.php") for _ in range(3)]
    assert statuses(rs) == [503] * 3
    f = os.path.join(n.docroot, "access_limiter", "fast.php")
    assert settled_count(n, f) == "0"
    assert "counter:" not in n.error_log()


def counter_pids(log, filename):
    """{count: pid} from the "[pid N] ... file:F counter:C" lines."""
    out = {}
    for m in re.finditer(r"\[pid (\d+)[^\]]*\].*access_limiter: file:"
                         + re.escape(filename) + r" counter:(\d+)", log):
        out[int(m.group(2))] = int(m.group(1))
    return out


def test_killed_worker_counts_recover_running_ones_stay(apache):
    """Prefork: requests A and B run in two children; one child is killed.
    Within 5 s the count is 1 (B's), never 0 while B runs: a third request
    is let in, a fourth is refused."""
    a = start_apache(apache, mpm="prefork", sleep=30)
    f = sleep_php(a)
    url = a.url("/access_limiter/sleep.php")

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        ra = ex.submit(requests.get, url, timeout=30)
        rb = ex.submit(requests.get, url, timeout=30)
        a.wait_log(f"file:{f} counter:2")
        pids = counter_pids(a.error_log(), f)
        assert pids[1] != pids[2], "A and B in one child: not prefork?"
        os.kill(pids[1], signal.SIGKILL)
        killed = time.monotonic()

        seen = []
        while True:
            seen.append(count(a, f))
            if seen[-1] == "1" or time.monotonic() - killed > 5:
                break
            time.sleep(0.1)
        assert seen[-1] == "1", seen
        assert time.monotonic() - killed < 5
        assert "0" not in seen

        rc = ex.submit(requests.get, url, timeout=30)
        deadline = time.monotonic() + 5
        while a.error_log().count(f"file:{f} counter:2") < 2:
            assert time.monotonic() < deadline, "C was not counted in"
            time.sleep(0.05)
        rd = requests.get(url, timeout=30)
        assert rd.status_code == 503          # B and C are both counted
        open_gate(a)

        # whichever of A and B was in the killed child failed; the other
        # loaded, as did C
        outcomes = []
        for fut in (ra, rb):
            try:
                outcomes.append(fut.result().status_code)
            except requests.exceptions.RequestException:
                outcomes.append("killed")
        assert sorted(outcomes, key=str) == [200, "killed"]
        assert rc.result().status_code == 200

    assert settled_count(a, f) == "0"


def test_fleet_two_apaches_share_a_limit(apache, redis_server):
    """Two servers, one Redis, threshold 2: five requests to each at once
    give two successes in all."""
    addr = f"127.0.0.1:{redis_server.port}"
    a1 = start_apache(apache, redis=addr, sleep=30)
    a2 = start_apache(apache, redis=addr, sleep=30, docroot=a1.docroot)
    five_each_two_load([a1, a2], redis_server)


def five_each_two_load(servers, redis_node):
    """Five requests to each of servers at once, threshold 2: two load in
    all, the others get 503 (so each server refuses some, and logs it),
    no server logs a Redis error, and every count goes back out of
    redis_node."""
    close_gate(*servers)
    urls = [s.url("/access_limiter/sleep.php") for s in servers
            for _ in range(5)]
    refused = len(urls) - 2
    rs = gated_gets(urls, servers, early=refused)
    assert statuses(rs) == [200] * 2 + [503] * refused

    f = sleep_php(servers[0])
    for s in servers:
        log = s.wait_log(f"file:{f} reached threshold: 2: return 503")
        assert "unavailable" not in log
    redis_count_gone(redis_node, f, timeout=10)


def limiter_key(filename):
    """The fleet's key of filename: its running requests' entries."""
    return "access_limiter:{%s}" % filename


@pytest.fixture
def cluster(_servers):
    c = harness.RedisCluster()
    _servers.servers.append(c)
    return c.start()


def calls(node, command):
    """The calls of command node has run (INFO commandstats)."""
    m = re.search(rf"cmdstat_{command}:calls=(\d+)",
                  node.command("INFO", "commandstats"))
    return int(m.group(1)) if m else 0


def test_fleet_nginx_and_apaches_share_a_limit_on_a_cluster(apache, nginx,
                                                            cluster):
    """Two Apaches (event) and an nginx (two workers), a six-node Redis
    Cluster (each server given other nodes), threshold 2: two rounds of
    five requests to each server at once give two successes in all per
    round; the file's count is on the master of its key's slot, and gone
    after each round."""
    seeds = cluster.seeds()
    a1 = start_apache(apache, redis=seeds[0:2], sleep=30)
    # nginx's slow page is 6 KB at 1 KB/s: a request it lets in outlasts
    # the refusals of its round
    n = start_nginx(nginx, redis=seeds[2:4], page_kb=6, docroot=a1.docroot)
    a2 = start_apache(apache, redis=seeds[4:6], sleep=30, docroot=a1.docroot)
    servers = [a1, n, a2]
    f = sleep_php(a1)
    owner_id, owner = cluster.node_of_slot(
        cluster.key_slot(limiter_key(f)))

    for _ in range(2):
        five_each_two_load(servers, owner)
        assert fleet_count(a1, f) == fleet_count(n, f) == "0"
    # every count went to the file's slot, on its master: 30 in (EVAL) and
    # 30 out (ZREM)
    assert calls(owner, "eval") >= 30 and calls(owner, "zrem") == 30
    assert [calls(m, c) for i, m in cluster.masters().items()
            if i != owner_id for c in ("eval", "zrem")] == [0] * 4


# A killed server's counts: the lease (s), and how late past its end the
# test may see them gone (the count is read every 50 ms, each read a
# request and a round trip to Redis on a loaded machine).
LEASE = 3
LEASE_MARGIN = 0.5


@pytest.mark.parametrize("victim", ["apache", "nginx"])
def test_fleet_killed_server_gives_its_holds_back_within_the_lease(
        victim, apache, nginx, cluster):
    """Three servers on a cluster, lease 3 s: the victim (an Apache or an
    nginx) counts two slow requests in, then an Apache and an nginx one
    each; the victim is SIGKILLed whole (master and workers), so nothing
    of it counts out.  The fleet's count is 4 until the leases of the
    victim's requests end, 3 s after they were counted in, then 2: the
    live servers' requests, which stay."""
    seeds = cluster.seeds()
    settings = dict(threshold=10, lease=LEASE)
    a = start_apache(apache, redis=seeds[0:2], sleep=60, **settings)
    # every nginx serves the slow page as 10 KB at 1 KB/s: the live one's
    # request outlasts the victim's lease
    n = start_nginx(nginx, redis=seeds[2:4], page_kb=10, docroot=a.docroot,
                    **settings)
    if victim == "apache":
        v = start_apache(apache, redis=seeds[4:6], sleep=60,
                         docroot=a.docroot, **settings)
    else:
        v = start_nginx(nginx, redis=seeds[4:6], page_kb=10,
                        docroot=a.docroot, **settings)
    f = sleep_php(a)
    url = "/access_limiter/sleep.php"

    ex = concurrent.futures.ThreadPoolExecutor(4)
    try:
        sent = time.monotonic()
        held = [ex.submit(requests.get, v.url(url), timeout=60)
                for _ in range(2)]
        v.wait_log(f"file:{f} counter:2", timeout=10)
        counted = time.monotonic()
        # the live servers count in a second later: their requests' leases
        # end a second after the victim's
        time.sleep(1)
        held += [ex.submit(requests.get, s.url(url), timeout=60)
                 for s in (a, n)]
        deadline = time.monotonic() + 10
        while fleet_count(a, f) != "4":
            assert time.monotonic() < deadline, fleet_count(a, f)
            time.sleep(0.05)

        os.killpg(v.proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        v.proc.wait(10)

        # each of the victim's requests stops counting at the end of its
        # own lease: 4, 3, 2
        seen = []
        while time.monotonic() < killed + LEASE + 2:
            seen.append((time.monotonic(), fleet_count(a, f)))
            if seen[-1][1] == "2":
                break
            time.sleep(0.05)
        counts = [c for _, c in seen]
        assert counts == sorted(counts, reverse=True), seen
        assert set(counts) <= {"4", "3", "2"}, seen
        first = next(t for t, c in seen if c != "4")
        back, got = seen[-1]
        print(f"\nvictim {victim}: its counts gone {back - killed:.2f} s "
              f"after the kill, {back - counted:.2f} s after its last "
              f"count in was seen, the first {first - sent:.2f} s after "
              f"they were sent (lease {LEASE} s)")
        assert got == "2", seen
        # not before their leases: they began when the victim counted them
        # in, after they were sent; and within them, plus the margin
        assert first - sent >= LEASE
        assert back - counted <= LEASE + LEASE_MARGIN
        # the live servers' counts stay
        assert fleet_count(n, f) == "2"
        open_gate(a)
        outcomes = []
        for fut in held:
            try:
                outcomes.append(fut.result().status_code)
            except requests.exceptions.RequestException:
                outcomes.append("killed")
        assert outcomes == ["killed", "killed", 200, 200]
    finally:
        open_gate(a)
        ex.shutdown(wait=True)
    # the live servers counted out; the victim's entries went with their
    # lease, or go with the set's expiry
    _, owner = cluster.node_of_slot(cluster.key_slot(limiter_key(f)))
    redis_count_gone(owner, f, timeout=LEASE + 5)
    assert fleet_count(a, f) == "0"


def test_fleet_each_request_has_its_own_lease(apache, redis_server):
    """Each request counted in is an entry of the file's sorted set, named
    by its server and itself, scored with the end of its lease (lease = 60
    s); an entry whose lease ended no longer counts, and the next count in
    drops it; the set's expiry is renewed by each count in."""
    a = start_apache(apache, redis=f"127.0.0.1:{redis_server.port}",
                     sleep=30)
    f = sleep_php(a)
    key = limiter_key(f)
    url = a.url("/access_limiter/sleep.php")

    def first_entry():
        # its name, and its lease's end less Redis's time now (ms)
        return redis_server.command(
            "EVAL", "local t = redis.call('TIME') "
            "local e = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES') "
            "return e[1] .. ' ' .. (e[2] - (t[1] * 1000 "
            "+ math.floor(t[2] / 1000)))", 1, key).split()

    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        first = ex.submit(requests.get, url, timeout=60)
        a.wait_log("counter:1")
        name, left = first_entry()
        assert re.fullmatch(r"[^/]+/%d/[0-9a-f]{32}" % a.proc.pid, name)
        assert 50000 <= int(left) <= 60000
        assert 50 <= int(redis_server.command("TTL", key)[1:]) <= 60
        # end its lease by hand: it no longer counts
        redis_server.command("ZADD", key, "XX", 0, name)
        redis_server.command("EXPIRE", key, 5)
        assert fleet_count(a, f) == "0"
        second = ex.submit(requests.get, url, timeout=60)
        deadline = time.monotonic() + 5
        while a.error_log().count(f"file:{f} counter:1") < 2:
            assert time.monotonic() < deadline, "not counted in"
            time.sleep(0.05)
        assert redis_server.command("ZCARD", key) == ":1"
        assert first_entry()[0] != name
        assert 50 <= int(redis_server.command("TTL", key)[1:]) <= 60
        open_gate(a)
        assert first.result().status_code == second.result().status_code \
            == 200
    redis_count_gone(redis_server, f)


def entries(node, filename):
    """The fleet's entries of filename on node: names and lease ends."""
    return node.command("EVAL", "return table.concat(redis.call('ZRANGE', "
                        "KEYS[1], 0, -1, 'WITHSCORES'), ' ')", 1,
                        limiter_key(filename))


@pytest.fixture
def sentinel(_servers):
    s = harness.RedisSentinel()
    _servers.servers.append(s)
    return s.start()


def test_fleet_through_sentinel_nginx_and_apache_share_a_limit(
        apache, nginx, sentinel):
    """An Apache (event) and an nginx reach the master through the
    sentinels (redis = { sentinels: [...], name: "mymaster" }), threshold
    2: five requests to each at once give two successes in all; the
    counts were on the master, and are gone after."""
    a = start_apache(apache, redis=sentinel, sleep=30)
    n = start_nginx(nginx, redis=sentinel, page_kb=6, docroot=a.docroot)
    five_each_two_load([a, n], sentinel.master)
    assert calls(sentinel.master, "eval") >= 10
    assert calls(sentinel.master, "zrem") == 10


def test_fleet_counts_through_a_sentinel_failover(apache, nginx, sentinel):
    """Threshold 2, two requests held on an Apache, counted on the master
    the sentinels name; SENTINEL FAILOVER.  After it the new master has
    the same entries with the same lease ends (a key like any, replicated),
    the fleet's count read there is still 2, a request to the nginx is
    refused, and once the held requests end the count is 0 there."""
    a = start_apache(apache, redis=sentinel, sleep=60)
    n = start_nginx(nginx, redis=sentinel, docroot=a.docroot)
    f = sleep_php(a)
    url = "/access_limiter/sleep.php"
    old = sentinel.master
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        held = [ex.submit(requests.get, a.url(url), timeout=90)
                for _ in range(2)]
        a.wait_log(f"file:{f} counter:2")
        assert n.get(url).status_code == 503
        assert fleet_count(a, f) == fleet_count(n, f) == "2"
        before = entries(old, f)
        assert len(before.split()) == 4

        started = time.monotonic()
        new = sentinel.failover()
        took = time.monotonic() - started
        assert new is not old
        assert entries(new, f) == before

        counts = [fleet_count(s, f) for s in (a, n)]
        refused = n.get(url).status_code
        print(f"\nfailover in {took:.1f} s; then counts {counts}, "
              f"a third request {refused}")
        assert counts == ["2", "2"]
        assert refused == 503
        open_gate(a)
        assert [h.result().status_code for h in held] == [200, 200]
    redis_count_gone(new, f, timeout=10)
    for s in (a, n):
        assert "unavailable" not in s.error_log()


def test_fleet_counts_through_a_sentinel_failover_under_load(apache, nginx,
                                                             sentinel):
    """Four clients request a limited page of an Apache and an nginx
    (threshold 1000, lease 5 s) without pause through SENTINEL FAILOVER,
    with Redis's default configuration, which loses the writes the old
    master takes between the promotion and its reset: a count out lost
    there leaves its entry on the new master.  Once the load stops, every
    entry left ends with its lease: the count is 0 within the lease (plus
    the margin) of the last request, and no request was refused."""
    settings = dict(threshold=1000, lease=5)
    a = start_apache(apache, redis=sentinel, sleep=0, **settings)
    n = start_nginx(nginx, redis=sentinel, docroot=a.docroot, **settings)
    with open(os.path.join(a.docroot, "access_limiter", "fast.php"),
              "w") as out:
        out.write("fast")
    f = os.path.join(a.docroot, "access_limiter", "fast.php")
    stop = threading.Event()

    def load(server):
        codes = {}
        with requests.Session() as s:
            s.trust_env = False
            while not stop.is_set():
                try:
                    code = s.get(server.url("/access_limiter/fast.php"),
                                 timeout=10).status_code
                except requests.exceptions.RequestException as e:
                    code = type(e).__name__
                codes[code] = codes.get(code, 0) + 1
        return codes

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        clients = [ex.submit(load, s) for s in (a, n, a, n)]
        time.sleep(1)
        started = time.monotonic()
        sentinel.failover()
        took = time.monotonic() - started
        stop.set()
        codes = {}
        for c in clients:
            for code, k in c.result().items():
                codes[code] = codes.get(code, 0) + k
    ended = time.monotonic()
    left = fleet_count(a, f)
    while fleet_count(a, f) != "0" and time.monotonic() < ended + 10:
        time.sleep(0.05)
    zero = time.monotonic() - ended
    failed_open = sum(s.error_log().count("failing open") for s in (a, n))
    print(f"\nfailover in {took:.1f} s under load: {codes} responses, "
          f"{failed_open} let through uncounted (Redis unavailable), "
          f"{left} entries left after the load, count 0 {zero:.2f} s "
          "after it")
    assert set(codes) == {200}
    assert fleet_count(a, f) == fleet_count(n, f) == "0"
    assert zero <= 5 + LEASE_MARGIN


def test_fleet_nginx_without_request_id_says_what_to_add(nginx,
                                                         redis_server):
    """Fleet mode names a request in Redis by $request_id, which nginx
    makes anew at each read unless the configuration names it: without the
    example's map, the first count in of a worker refuses, with a 500 and
    a log line that says what to add."""
    n = start_nginx(nginx, workers=1, request_id=False,
                    redis=f"127.0.0.1:{redis_server.port}")
    assert n.get("/access_limiter/fast.php").status_code == 500
    n.wait_log("access_limiter: fleet mode needs nginx to keep $request_id "
               f"for the request: add `{REQUEST_ID_MAP}` to the http block "
               "(see nginx-http.conf)")


def test_fleet_redis_down_fails_open(apache):
    port = harness.free_port()                 # nobody listens there
    a = start_apache(apache, redis=f"127.0.0.1:{port}", sleep=0)
    rs = concurrent_gets([a.url("/access_limiter/sleep.php")] * 4)
    assert statuses(rs) == [200] * 4
    log = a.wait_log(f"access_limiter: redis 127.0.0.1:{port} unavailable "
                     f"(Redis::CannotConnectError: connect to 127.0.0.1:{port}: "
                     "Connection refused): failing open for ")
    assert "[mruby:err" in log


def test_fleet_redis_down_fail_closed(apache):
    port = harness.free_port()
    a = start_apache(apache, redis=f"127.0.0.1:{port}", sleep=0,
                     fail_open=False)
    assert a.get("/access_limiter/sleep.php").status_code == 503
    a.wait_log(f"access_limiter: redis 127.0.0.1:{port} unavailable")
    a.wait_log("failing closed for ")


def test_fleet_redis_restarted_reconnects(apache, redis_server):
    """A kept connection the server closed is reopened by the next call:
    no error, the limit still holds."""
    addr = f"127.0.0.1:{redis_server.port}"
    a = start_apache(apache, redis=addr, sleep=0)
    assert a.get("/access_limiter/sleep.php").status_code == 200
    # the log phase runs after the response went out: let its count out
    # finish, or the kill may cut it mid-command
    redis_count_gone(redis_server, sleep_php(a))
    redis_server.command("CLIENT", "KILL", "TYPE", "normal")
    assert a.get("/access_limiter/sleep.php").status_code == 200
    assert "unavailable" not in a.error_log()


def test_killed_nginx_worker_counts_recover_running_ones_stay(nginx):
    """Two workers (reuseport spreads the connections): slow requests until
    both workers run some; one worker is killed; within 5 s the count is
    what the other still runs, never less."""
    n = start_nginx(nginx, workers=2, page_kb=12, listen="reuseport",
                    threshold=20)
    f = sleep_php(n)
    url = n.url("/access_limiter/sleep.php")
    line = re.compile(r"(\d+)#\d+: \*\d+ access_limiter: file:"
                      + re.escape(f) + r" counter:\d+")

    # reuseport hashes each connection to a worker: 8 connections all went
    # to one worker in about 1 run of 128 (2 / 2^8); 16 make it 1 in 32,768
    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        futures, per_pid = [], {}
        while len(per_pid) < 2 and len(futures) < 16:
            futures.append(ex.submit(requests.get, url, timeout=60))
            deadline = time.monotonic() + 5
            while len(line.findall(n.error_log())) < len(futures):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            per_pid = {}
            for pid in line.findall(n.error_log()):
                per_pid[int(pid)] = per_pid.get(int(pid), 0) + 1
        assert len(per_pid) == 2, "reuseport put every request on one worker"

        victim, survivor = sorted(per_pid)
        assert count(n, f) == str(len(futures))
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()

        seen = []
        while True:
            seen.append(count(n, f))
            if (seen[-1] == str(per_pid[survivor])
                    or time.monotonic() - killed > 5):
                break
            time.sleep(0.1)
        assert seen[-1] == str(per_pid[survivor]), seen
        assert time.monotonic() - killed < 5
        assert all(int(c) >= per_pid[survivor] for c in seen), seen

        ok = 0
        for fut in futures:
            try:
                ok += fut.result().status_code == 200
            except requests.exceptions.RequestException:
                pass
        assert ok == per_pid[survivor]

    assert settled_count(n, f) == "0"

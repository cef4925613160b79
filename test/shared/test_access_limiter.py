"""examples/access_limiter on real servers: the access-limiter post's configuration as
written (Apache) and the same scripts under nginx, a worker killed in the
middle of requests, and fleet mode (two Apaches sharing a limit through
Redis, Redis down)."""

import concurrent.futures
import os
import re
import signal
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


def read(name):
    with open(os.path.join(EXAMPLE, name)) as f:
        return f.read()


def install(server, threshold=2, redis=None, fail_open=True):
    """Copies the example's scripts under server.dir/access_limiter, with
    the settings block of access_limiter.rb changed as asked; returns that
    directory."""
    for name in SCRIPTS:
        text = read(name)
        if name == "access_limiter.rb":
            text = text.replace("threshold = 2", f"threshold = {threshold}")
            if isinstance(redis, list):    # a cluster's nodes
                text = text.replace("redis = nil", "redis = %s" % ", ".join(
                    f'"{n}"' for n in redis).join("[]"))
            elif redis:
                text = text.replace("redis = nil", f'redis = "{redis}"')
            if not fail_open:
                text = text.replace("fail_open = true", "fail_open = false")
            assert "threshold = %d" % threshold in text
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
    a.conf = conf + "\n<Location /count>\n  mrubyHandlerMiddle {dir}/count.rb\n</Location>\n" + extra_conf
    a.write_doc("access_limiter/sleep.php", "<?php sleep(3); ?>")
    a.write_doc("access_limiter/fast.php", "fast")
    a.start()
    return a


def start_nginx(nginx, workers=2, page_kb=3, listen="", loglevel="info",
                declare=True, **settings):
    """nginx with the example's nginx-http.conf and nginx.conf (sleep.php:
    page_kb KB at 1 KB/s), and /count."""
    n = nginx(start=False, workers=workers, loglevel=loglevel)
    d = install(n, **settings)
    n.write("count.rb", COUNT)
    http = read("nginx-http.conf").replace("@DIR@", d)
    if not declare:
        http = http.replace("mruby_shared_dict access_limiter 1m;\n", "")
        assert "mruby_shared_dict" not in http
    server = read("nginx.conf").replace("@DIR@", d)
    n.conf = f"""{http}
server {{
    listen 127.0.0.1:{{port}} {listen};
    root {{docroot}};
    location = /count {{ mruby_content_handler {{dir}}/count.rb; }}
{server}
}}"""
    with open(os.path.join(EXAMPLE, "htdocs", "sleep.php"), "rb") as f:
        page = f.read()
    n.write_doc("access_limiter/sleep.php", page * (page_kb * 1024 // len(page)))
    n.write_doc("access_limiter/fast.php", "fast")
    n.start()
    return n


def open_gate(*servers):
    """Lets the slow pages of servers finish (see start_apache)."""
    for s in servers:
        s.write("gate", "")


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


def redis_count_gone(redis_server, key, timeout=5.0):
    """Waits until key is gone from Redis: the log phase's DECR runs after
    the response went out."""
    deadline = time.monotonic() + timeout
    while redis_server.command("GET", key) != "$-1":
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
    urls = ([a1.url("/access_limiter/sleep.php")] * 5
            + [a2.url("/access_limiter/sleep.php")] * 5)
    rs = gated_gets(urls, [a1, a2], early=8)
    assert statuses(rs) == [200] * 2 + [503] * 8

    f = sleep_php(a1)
    for a in (a1, a2):
        log = a.wait_log(f"file:{f} reached threshold: 2: return 503")
        assert "unavailable" not in log
    # every count went back out of Redis
    redis_count_gone(redis_server, limiter_key(f))


def limiter_key(filename):
    return "access_limiter:{%s}" % filename


def test_fleet_three_apaches_share_a_limit_on_a_cluster(apache, _servers):
    """Three servers, a six-node Redis Cluster (each server given other
    nodes), threshold 2: five requests to each at once give two successes
    in all; the file's count is on the master of its key's slot, and gone
    after."""
    cluster = harness.RedisCluster()
    _servers.servers.append(cluster)
    cluster.start()
    seeds = cluster.seeds()
    a1 = start_apache(apache, redis=seeds[0:2], sleep=30)
    servers = [a1] + [start_apache(apache, redis=seeds[i:i + 2], sleep=30,
                                   docroot=a1.docroot) for i in (2, 4)]
    urls = [a.url("/access_limiter/sleep.php") for a in servers
            for _ in range(5)]
    rs = gated_gets(urls, servers, early=13)
    assert statuses(rs) == [200] * 2 + [503] * 13

    f = sleep_php(a1)
    for a in servers:
        log = a.wait_log(f"file:{f} reached threshold: 2: return 503")
        assert "unavailable" not in log
    owner_id, owner = cluster.node_of_slot(cluster.key_slot(limiter_key(f)))
    redis_count_gone(owner, limiter_key(f))

    def evals(node):
        stats = node.command("INFO", "commandstats")
        return int(stats.split("cmdstat_eval:calls=")[1].split(",")[0]) \
            if "cmdstat_eval:" in stats else 0
    # every count went to the file's slot, on its master: 15 in (and out)
    assert evals(owner) >= 15
    assert [evals(m) for i, m in cluster.masters().items()
            if i != owner_id] == [0, 0]


def test_fleet_each_count_renews_the_lease(apache, redis_server):
    """In fleet mode each INCR renews the key's EXPIRE (lease = 60 s), so a
    count outlives a dead server by the lease and no longer."""
    a = start_apache(apache, redis=f"127.0.0.1:{redis_server.port}",
                     sleep=30)
    key = limiter_key(sleep_php(a))
    url = a.url("/access_limiter/sleep.php")
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        first = ex.submit(requests.get, url, timeout=60)
        a.wait_log("counter:1")
        ttl = int(redis_server.command("TTL", key)[1:])
        assert 50 <= ttl <= 60
        # shorten the lease by hand: the next count renews it
        redis_server.command("EXPIRE", key, 5)
        second = ex.submit(requests.get, url, timeout=60)
        a.wait_log("counter:2")
        ttl = int(redis_server.command("TTL", key)[1:])
        assert 50 <= ttl <= 60
        open_gate(a)
        assert first.result().status_code == second.result().status_code \
            == 200
    redis_count_gone(redis_server, key)


def test_fleet_redis_down_fails_open(apache):
    port = harness.free_port()                 # nobody listens there
    a = start_apache(apache, redis=f"127.0.0.1:{port}", sleep=0)
    rs = concurrent_gets([a.url("/access_limiter/sleep.php")] * 4)
    assert statuses(rs) == [200] * 4
    log = a.wait_log(f"access_limiter: redis 127.0.0.1:{port} unavailable "
                     f"(Redis::ConnectionError: connect to 127.0.0.1:{port}: "
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
    # the log phase runs after the response went out: let its DECR finish,
    # or the kill may cut it mid-command
    redis_count_gone(redis_server, limiter_key(sleep_php(a)))
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

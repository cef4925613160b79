"""Redis::Cluster under load while the cluster changes: a slot migrated
(SETSLOT MIGRATING/IMPORTING and MIGRATE) while requests run, a master
SIGKILLed and its replica promoted, a master frozen with SIGSTOP.  The
load is a few threads, each on a kept-alive connection, sending requests
one after another for a bounded time; every request says what it read,
and the test knows what it should have read."""

import os
import signal
import socket
import threading
import time

import pytest

import harness

KINDS = ["nginx", "apache-event"]
# fewer than Apache's one child's 4 threads: at its MaxRequestWorkers, the
# event MPM closes kept-alive connections as requests come on them
THREADS = {"nginx": 6, "apache-event": 3}
LOAD_LIMIT = 60.0     # s, whatever happens to the fault
# what a request may take beyond its command's timeout: the HTTP round
# trip and the run, on a loaded machine
SLACK = 0.7

# /kv?seeds&op&key[&value]: op get (GET key), set (SET key value, then
# GET key) or mget (MGET key value); answers "ok <what was read>" or
# "error <class>: <message>".  tag.name is {tag}name.
KV = r'''
Server = get_server_class
seeds, op, key, value = Server::Request.new.args.split("&")
keys = [key, value].map do |k|
  tag, name = k.to_s.split(".")
  name ? "{#{tag}}#{name}" : k
end
c = Redis::Cluster.new(seeds.split(","), timeout: TIMEOUT)
begin
  case op
  when "get" then got = c.get(keys[0])
  when "set" then c.set(keys[0], value); got = c.get(keys[0])
  when "mget" then got = c.mget(keys[0], keys[1]).join(",")
  end
  Server.rputs "ok #{got}"
rescue Redis::BaseError => e
  Server.rputs "error #{e.class}: #{e.message}"
end
'''


class Load:
    """threads threads, thread i sending work(i, n) (n its count so far:
    (path, expected body)) until stop() or LOAD_LIMIT.  .done: (thread,
    start, end, path, expected, status, body), times time.monotonic()."""

    def __init__(self, server, work, threads):
        self.server = server
        self.work = work
        self.done = []
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,))
                        for i in range(threads)]

    def _run(self, i):
        import requests
        end = time.monotonic() + LOAD_LIMIT
        with requests.Session() as http:
            http.trust_env = False
            n = 0
            while not self.stopping.is_set() and time.monotonic() < end:
                path, expected = self.work(i, n)
                t0 = time.monotonic()
                try:
                    r = http.get(self.server.url(path), timeout=10)
                    status, body = r.status_code, r.text
                except Exception as e:     # recorded as a failure
                    status, body = 0, repr(e)
                self.done.append((i, t0, time.monotonic(), path, expected,
                                  status, body))
                n += 1

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        for t in self.threads:
            t.join()
        return False

    def wrong(self):
        """Requests that answered something else than expected."""
        return [d for d in self.done
                if d[5] == 200 and d[6].startswith("ok ")
                and d[6] != "ok " + d[4]]

    def failed(self):
        return [d for d in self.done
                if d[5] != 200 or not d[6].startswith("ok ")]

    def unexplained(self):
        """Failures that are not a Redis error the script rescued (a 500,
        another exception)."""
        return [d for d in self.failed()
                if d[5] != 200 or not d[6].startswith("error Redis::")]


def serve(kind, apache, nginx, timeout):
    return harness.one_interpreter(
        kind, apache, nginx, {"/kv": "kv.rb"},
        {"kv.rb": KV.replace("TIMEOUT", str(timeout))}, loglevel="warn")


def preload(s, seeds, keys):
    """Each key set to "v-<key>" (as the URL has it) through the
    cluster."""
    for k in keys:
        r = s.get(f"/kv?{seeds}&set&{k}&v-{k}")
        assert r.text == f"ok v-{k}", s.error_log()[-2000:]


def summary(done):
    return "\n".join(f"{d[0]} {d[2] - d[1]:.3f}s {d[3]}: {d[5]} {d[6]}"
                     for d in done[:20])


@pytest.fixture
def cluster(_servers):
    c = harness.RedisCluster()
    _servers.servers.append(c)
    return c.start()


# A small cluster-node-timeout, so that a master killed is failed over in
# a few seconds.
NODE_TIMEOUT = 1000   # ms


@pytest.fixture
def fast_cluster(_servers):
    c = harness.RedisCluster(node_timeout=NODE_TIMEOUT)
    _servers.servers.append(c)
    return c.start()


def migrate(cluster, slot, src_id, src, dst_id, dst, batch=3, pause=0.05):
    """Moves slot from src to dst as redis-cli's resharding does,
    batch keys per MIGRATE with a pause between them, requests running."""
    assert dst.command("CLUSTER", "SETSLOT", slot, "IMPORTING",
                       src_id) == "+OK"
    assert src.command("CLUSTER", "SETSLOT", slot, "MIGRATING",
                       dst_id) == "+OK"
    for _ in range(1000):
        keys = cluster.cli(src, "CLUSTER", "GETKEYSINSLOT", slot,
                           batch).split()
        if not keys:
            break
        assert src.command("MIGRATE", dst.host, dst.port, "", 0, 5000,
                           "KEYS", *keys) == "+OK"
        time.sleep(pause)
    for node in [dst, src] + [m for m in cluster.masters().values()
                              if m not in (dst, src)]:
        assert node.command("CLUSTER", "SETSLOT", slot, "NODE",
                            dst_id) == "+OK"


def asks(node):
    for line in node.command("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_asking:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


@pytest.mark.parametrize("kind", KINDS)
def test_slot_migrated_under_load(kind, apache, nginx, cluster):
    """A slot of 30 keys moved to another master and back, 3 keys per
    MIGRATE, while threads read those keys, write keys of their own in
    it (SET, then GET) and read two of them with MGET (TRYAGAIN while
    they are on two nodes): every request answers what was written."""
    seeds = ",".join(cluster.seeds())
    s = serve(kind, apache, nginx, 2)
    keys = [f"m.{i}" for i in range(30)]
    preload(s, seeds, keys)
    slot = cluster.key_slot("{m}")
    src_id, src = cluster.node_of_slot(slot)
    dst_id, dst = next((i, m) for i, m in cluster.masters().items()
                       if i != src_id)

    def work(i, n):
        if i % 3 == 0:
            v = f"w{i}-{n}"
            return f"/kv?{seeds}&set&m.w{i}&{v}", v
        if i % 3 == 1:
            return f"/kv?{seeds}&mget&m.1&m.2", "v-m.1,v-m.2"
        k = keys[n % len(keys)]
        return f"/kv?{seeds}&get&{k}", f"v-{k}"

    with Load(s, work, THREADS[kind]) as load:
        time.sleep(0.3)
        started = len(load.done)
        migrate(cluster, slot, src_id, src, dst_id, dst)
        migrate(cluster, slot, dst_id, dst, src_id, src)
        during = len(load.done) - started
        time.sleep(0.3)
    assert load.wrong() == [], summary(load.wrong())
    assert load.failed() == [], summary(load.failed())
    assert during > 20
    assert asks(src) + asks(dst) > 0     # requests met the migrations


@pytest.mark.parametrize("kind", KINDS)
def test_tryagain_is_retried_until_the_timeout(kind, apache, nginx, cluster):
    """An MGET whose two keys stay on two nodes for 1.6 s of its 2 s
    timeout: TRYAGAIN is retried until the keys are together again.  The
    pauses double from 10 ms; the client gave up at 1.27 s, when the next
    pause (1.28 s) would have passed the deadline, instead of sleeping
    only to it."""
    seeds = ",".join(cluster.seeds())
    s = serve(kind, apache, nginx, 2)
    preload(s, seeds, ["t.1", "t.2"])
    slot = cluster.key_slot("{t}")
    src_id, src = cluster.node_of_slot(slot)
    dst_id, dst = next((i, m) for i, m in cluster.masters().items()
                       if i != src_id)
    assert dst.command("CLUSTER", "SETSLOT", slot, "IMPORTING",
                       src_id) == "+OK"
    assert src.command("CLUSTER", "SETSLOT", slot, "MIGRATING",
                       dst_id) == "+OK"
    assert src.command("MIGRATE", dst.host, dst.port, "", 0, 5000,
                       "KEYS", "{t}1") == "+OK"

    def finish():
        time.sleep(1.6)
        assert src.command("MIGRATE", dst.host, dst.port, "", 0, 5000,
                           "KEYS", "{t}2") == "+OK"
        for node in [dst, src] + [m for m in cluster.masters().values()
                                  if m not in (dst, src)]:
            node.command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)

    mover = threading.Thread(target=finish)
    t0 = time.monotonic()
    mover.start()
    try:
        r = s.get(f"/kv?{seeds}&mget&t.1&t.2", timeout=10)
    finally:
        mover.join()
    took = time.monotonic() - t0
    assert r.text == "ok v-t.1,v-t.2", (took, r.text)
    assert 1.6 <= took < 2.0 + SLACK, took


def killed_window(load, t_kill, t_promoted):
    failed = load.failed()
    return (min((d[1] for d in failed), default=t_kill) - t_kill,
            max((d[2] for d in failed), default=t_kill) - t_kill,
            t_promoted - t_kill)


@pytest.mark.parametrize("kind", KINDS)
def test_master_killed_under_load(kind, apache, nginx, fast_cluster):
    """A master SIGKILLed while threads read keys of every master: the
    replica is promoted after cluster-node-timeout and the election;
    requests fail only between the kill and the promotion, none waits
    past its timeout, none answers wrong, and every request sent after
    the promotion succeeds, the first one included."""
    cluster = fast_cluster
    timeout = 1.0
    seeds = ",".join(cluster.seeds())
    s = serve(kind, apache, nginx, timeout)
    keys = [f"k{i}" for i in range(30)]
    preload(s, seeds, keys)
    victim_id, victim = next(iter(cluster.masters().items()))
    replica = cluster.replica_of(victim_id)
    owners = {k: cluster.node_of_slot(cluster.key_slot(k))[1]
              for k in keys}
    assert victim in owners.values()

    def work(i, n):
        k = keys[(i * 7 + n) % len(keys)]
        return f"/kv?{seeds}&get&{k}", f"v-{k}"

    with Load(s, work, THREADS[kind]) as load:
        time.sleep(0.5)
        t_kill = time.monotonic()
        os.kill(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait()
        deadline = t_kill + 30
        while cluster.role(replica) != "master":
            assert time.monotonic() < deadline, "no failover"
            time.sleep(0.01)
        t_promoted = time.monotonic()
        time.sleep(1.5)
    first, last, promoted = killed_window(load, t_kill, t_promoted)
    print(f"{kind}: promoted {promoted:.2f}s after the kill "
          f"(cluster-node-timeout {NODE_TIMEOUT / 1000:.1f}s); requests "
          f"failed from {first:.2f}s to {last:.2f}s; "
          f"{len(load.failed())} of {len(load.done)} failed")
    assert load.wrong() == [], summary(load.wrong())
    assert load.unexplained() == [], summary(load.unexplained())
    assert promoted > NODE_TIMEOUT / 1000
    late = [d for d in load.failed() if d[1] > t_promoted or d[2] < t_kill]
    assert late == [], summary(late)
    slow = [d for d in load.done if d[2] - d[1] > timeout + SLACK]
    assert slow == [], summary(slow)
    after = [d for d in load.done if d[1] > t_promoted]
    assert any(owners[d[3].rsplit("&", 1)[1]] is victim for d in after)


@pytest.mark.parametrize("kind", KINDS)
def test_master_frozen_under_load(kind, apache, nginx, cluster):
    """A master stopped (SIGSTOP) for 2 s, less than cluster-node-timeout:
    requests for its slots fail within their timeout, the others are not
    delayed and all succeed; the frozen node is not asked for the slot
    map; after SIGCONT its slots answer again."""
    timeout = 0.5
    seeds = ",".join(cluster.seeds())
    s = serve(kind, apache, nginx, timeout)
    keys = [f"k{i}" for i in range(30)]
    preload(s, seeds, keys)
    frozen = cluster.nodes[0]
    assert frozen in cluster.masters().values()
    owners = {k: cluster.node_of_slot(cluster.key_slot(k))[1]
              for k in keys}

    def work(i, n):
        k = keys[(i * 7 + n) % len(keys)]
        return f"/kv?{seeds}&get&{k}", f"v-{k}"

    with Load(s, work, THREADS[kind]) as load:
        time.sleep(0.5)
        slots_reads = harness_slots_reads(frozen)
        t_stop = time.monotonic()
        os.kill(frozen.proc.pid, signal.SIGSTOP)
        time.sleep(2.0)
        os.kill(frozen.proc.pid, signal.SIGCONT)
        t_cont = time.monotonic()
        time.sleep(1.5)
    wrong, failed = load.wrong(), set(load.failed())
    assert wrong == [], summary(wrong)
    assert load.unexplained() == [], summary(load.unexplained())
    key = lambda d: d[3].rsplit("&", 1)[1]    # noqa: E731
    others = [d for d in load.done if owners[key(d)] is not frozen]
    theirs = [d for d in load.done if owners[key(d)] is frozen]
    assert [d for d in others if d in failed] == [], \
        summary([d for d in others if d in failed])
    slow = [d for d in load.done if d[2] - d[1] > timeout + SLACK]
    assert slow == [], summary(slow)
    # the frozen node's slots failed while it was, and only then
    failed = [d for d in theirs if d in failed]
    assert failed and all(t_stop < d[2] and d[1] < t_cont for d in failed), \
        summary(failed)
    assert any(d[1] > t_cont and d not in failed for d in theirs)
    # the map was read elsewhere (the node reads what was sent to it while
    # it was stopped when it runs again); but an Apache interpreter made
    # during the freeze reads its first map from the first node given
    time.sleep(0.2)
    made = 0 if kind == "nginx" else 4    # ONE_CHILD's ThreadsPerChild
    assert harness_slots_reads(frozen) - slots_reads <= made


def harness_slots_reads(node):
    for line in node.command("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_cluster|slots:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


PASSWORD = "clu5ter-Pw-3d81"

# /set?seed&key&value: SET through a cluster whose nodes ask for a
# password: the reply, or the error's class and message
AUTH_SET = r'''
Server = get_server_class
seed, key, value = Server::Request.new.args.split("&")
c = Redis::Cluster.new([seed], password: "%s", timeout: 2)
begin
  Server.rputs c.set(key, value)
rescue Redis::BaseError => e
  Server.rputs "#{e.class}: #{e.message}"
end
''' % PASSWORD


def two_masters_with_a_password(_servers):
    """A Redis Cluster of two masters without replicas, each with
    PASSWORD: the first serves slots 8192-16383 (foo's, 12182), the
    second 0-8191."""
    nodes, bus = [], []
    for first, last in (("8192", "16383"), ("0", "8191")):
        bus.append(harness.free_port())
        n = harness.Redis(args=[
            "--cluster-enabled", "yes", "--cluster-port", str(bus[-1]),
            "--requirepass", PASSWORD, "--masterauth", PASSWORD],
            auth=(None, PASSWORD))
        _servers.servers.append(n)
        n.start()
        assert n.command("CLUSTER", "ADDSLOTSRANGE", first, last) == "+OK"
        nodes.append(n)
    a, b = nodes
    assert a.command("CLUSTER", "MEET", b.host, b.port, bus[1]) == "+OK"
    for _ in range(200):
        if all("cluster_state:ok" in n.command("CLUSTER", "INFO")
               and "cluster_known_nodes:2" in n.command("CLUSTER", "INFO")
               for n in nodes):
            return a, b
        time.sleep(0.05)
    raise harness.HarnessError("the two masters did not form a cluster")


class Dropper:
    """A listener on port that accepts each connection and closes it at
    once, unanswered: a node's address whose server went away and where
    something still accepts (a proxy, a server shutting down)."""

    def __init__(self, port):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.accepted = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self):
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            self.accepted += 1
            conn.close()

    def stop(self):
        self.stopping.set()
        self.thread.join(5)
        self.sock.close()


@pytest.mark.parametrize("kind", KINDS)
def test_command_that_never_reached_its_node_goes_to_the_new_owner(
        kind, apache, nginx, _servers):
    """The master of foo's slot is gone and its address drops every
    connection before AUTH is answered: nothing of the SET reached it,
    though the error's text does not begin "connect to".  The map read
    again names the slot's new master, which gets the SET, once."""
    a, b = two_masters_with_a_password(_servers)
    s = harness.one_interpreter(kind, apache, nginx, {"/set": "set.rb"},
                                {"set.rb": AUTH_SET}, loglevel="warn")
    seed = f"{a.host}:{a.port}"
    assert s.get(f"/set?{seed}&k&v").text == "OK", s.error_log()[-2000:]

    # the slot moves to b (foo has no value yet), then a goes away
    b_id = b.command("CLUSTER", "MYID")
    for node in (b, a):
        assert node.command("CLUSTER", "SETSLOT", "12182", "NODE",
                            b_id) == "+OK"
    a.stop()
    dropper = Dropper(a.port)
    try:
        r = s.get(f"/set?{seed}&foo&moved")
    finally:
        dropper.stop()
    assert (r.status_code, r.text) == (200, "OK"), s.error_log()[-2000:]
    assert dropper.accepted >= 1
    assert b.command("GET", "foo") == "moved"
    assert PASSWORD not in s.error_log()

"""Redis::Cluster on real servers against a real six-node Redis Cluster
(three masters, a replica each) on loopback: keys spread over the masters
and read back, hash tags, cross-slot commands refused, a slot moved
(MOVED followed once, the map kept), a slot being migrated (ASK
followed, the map unchanged), reads from replicas (a killed replica and
one that answers MOVED leave them to the master), and the slot map that
an Apache child's interpreters share.  One script, both servers;
requests one after another run in one interpreter."""

import concurrent.futures
import os
import re
import signal
import time

import pytest
import requests

import harness

KINDS = ["nginx", "apache-event"]

# /spread?seeds: keys written and read back through the cluster, then the
# methods whose reply mruby-redis converts.
SPREAD = r'''
Server = get_server_class
c = Redis::Cluster.new(Server::Request.new.args.split(","), timeout: 2)
out = []
keys = (0...60).map { |i| "key#{i}" }
keys.each { |k| c.set(k, "v-#{k}") }
out << keys.all? { |k| c.get(k) == "v-#{k}" }
out << [Redis::Cluster.key_slot("foo"), Redis::Cluster.key_slot("123456789"),
        Redis::Cluster.key_slot("{user1000}.following") ==
        Redis::Cluster.key_slot("{user1000}.followers"),
        Redis::Cluster.key_slot("{}x") == Redis::Cluster.key_slot("{}y")].inspect
out << c.incr("n").to_s
out << c.exists?("key0").inspect
out << c.set("key1", "w", "NX" => true).inspect
c.hset("h", "f", "1")
out << c.hgetall("h").inspect
out << c["key2"]
out << c.call("EVAL", "return redis.call('GET', KEYS[1])", 1, "key3")
out << c.get(:key4)
out << c.call(:get, "key5", *[])
out << c.ping
Server.rputs out.join("\n")
'''

SPREAD_EXPECTED = "\n".join([
    "true",
    "[12182, 12739, true, false]",
    "1",
    "true",
    "nil",
    '{"f"=>"1"}',
    "v-key2",
    "v-key3",
    "v-key4",
    "v-key5",
    "PONG",
])

# /tags?seeds: keys of one hash tag together; the rest refused.
TAGS = r'''
Server = get_server_class
c = Redis::Cluster.new(Server::Request.new.args.split(","), timeout: 2)
out = []
c.mset("{u1}a", 1, "{u1}b", 2)
out << c.mget("{u1}a", "{u1}b").inspect
out << c.del("{u1}a", "{u1}b").to_s
[-> { c.mget("a", "b") }, -> { c.call("DEL", "a", "{u1}b") },
 -> { c.multi }, -> { c.queue("GET", "a") }].each do |f|
  begin
    f.call
    out << "sent?!"
  rescue Redis::ClusterError => e
    out << e.message
  end
end
out << (Redis::ClusterError.ancestors.include?(Redis::BaseError)).inspect
["127.0.0.1:1", ["nohost"], [1]].each do |bad|
  begin
    Redis::Cluster.new(bad)
    out << "made?!"
  rescue ArgumentError => e
    out << e.message
  end
end
Server.rputs out.join("\n")
'''

TAGS_EXPECTED = "\n".join([
    '["1", "2"]',
    "2",
    'Redis::Cluster: mget\'s keys are in different slots ("a" in 15495, '
    '"b" in 3300): give them one hash tag, as {tag}a and {tag}b, to keep '
    'them in one',
    'Redis::Cluster: DEL\'s keys are in different slots ("a" in 15495, '
    '"{u1}b" in 4574): give them one hash tag, as {tag}a and {tag}b, to '
    'keep them in one',
    "Redis::Cluster: multi is not supported on a cluster (it needs one "
    "connection, or every node)",
    "Redis::Cluster: queue is not supported on a cluster (pipelined is)",
    "true",
    'Redis::Cluster.new: the nodes are an Array of "host:port" Strings, '
    'not "127.0.0.1:1"',
    'Redis::Cluster.new: the nodes are an Array of "host:port" Strings, '
    'not ["nohost"]',
    'Redis::Cluster.new: the nodes are an Array of "host:port" Strings, '
    'not [1]',
])

# /get?seeds&key: GET key through the cluster; tag.name is {tag}name
# (braces would come percent-encoded).
GET = r'''
Server = get_server_class
seeds, key = Server::Request.new.args.split("&")
tag, name = key.split(".")
key = "{#{tag}}#{name}" if name
Server.rputs Redis::Cluster.new(seeds.split(","), timeout: 2).get(key).inspect
'''


# /pipeline?seeds: a pipeline over the three masters, answered in order;
# an error reply raises after the others ran.
PIPELINE = r'''
Server = get_server_class
c = Redis::Cluster.new(Server::Request.new.args.split(","), timeout: 2)
out = []
out << c.pipelined { |p|
  (0...9).each { |i| p.set("pk#{i}", "v#{i}") }
  (0...9).each { |i| p.get("pk#{i}") }
  p.incr("pn")
  p.expire("pn", 30)
  p.call("GET", "moving")
}.inspect
begin
  c.pipelined { |p| p.incr("pk0"); p.set("pk1", "w") }
rescue Redis::ReplyError => e
  out << e.message
end
out << c.get("pk1")
Server.rputs out.join("\n")
'''

PIPELINE_EXPECTED = "\n".join([
    str(["OK"] * 9 + [f"v{i}" for i in range(9)] + [1, 1, "here"])
    .replace("'", '"'),
    "ERR value is not an integer or out of range",
    "w",
])


@pytest.fixture
def cluster(_servers):
    c = harness.RedisCluster()
    _servers.servers.append(c)
    return c.start()


def serve(kind, apache, nginx, name, script):
    return harness.one_interpreter(kind, apache, nginx,
                                   {f"/{name}": f"{name}.rb"},
                                   {f"{name}.rb": script})


def commandstats(node):
    """{command: (calls, rejected_calls)} from INFO commandstats."""
    stats = {}
    for m in re.finditer(r"cmdstat_([^:]+):calls=(\d+),.*?rejected_calls="
                         r"(\d+)", node.command("INFO", "commandstats")):
        stats[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return stats


def calls(nodes, command):
    """The calls of command on each node, in order."""
    return [commandstats(n).get(command, (0, 0))[0] for n in nodes]


def rejected(node, command):
    return commandstats(node).get(command, (0, 0))[1]


def slots_reads(cluster):
    return sum(calls(cluster.nodes, "cluster|slots"))


def answers(kind, apache, nginx, cluster, name, script, expected):
    """/name?seeds of script answers expected."""
    s = serve(kind, apache, nginx, name, script)
    r = s.get(f"/{name}?" + ",".join(cluster.seeds()))
    assert (r.status_code, r.text) == (200, expected), s.error_log()[-2000:]


@pytest.mark.parametrize("kind", KINDS)
def test_keys_spread_over_the_masters(kind, apache, nginx, cluster):
    answers(kind, apache, nginx, cluster, "spread", SPREAD,
            harness.inspected(SPREAD_EXPECTED))
    # every master holds some of the 60 keys
    sizes = [int(m.command("DBSIZE")[1:])
             for m in cluster.masters().values()]
    assert len(sizes) == 3 and all(n > 5 for n in sizes)
    assert sum(sizes) == 60 + 2     # key0..59, n, h
    assert slots_reads(cluster) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_hash_tags_and_cross_slot_refused(kind, apache, nginx, cluster):
    answers(kind, apache, nginx, cluster, "tags", TAGS, TAGS_EXPECTED)


def move_slot(cluster, slot, key, dst_id, dst, finish=True):
    """Migrates slot from its master to dst as redis-cli's resharding
    does: IMPORTING on dst, MIGRATING on the source, key MIGRATEd; with
    finish, the slot then given to dst on every master."""
    src_id, src = cluster.node_of_slot(slot)
    assert dst.command("CLUSTER", "SETSLOT", slot, "IMPORTING",
                       src_id) == "+OK"
    assert src.command("CLUSTER", "SETSLOT", slot, "MIGRATING",
                       dst_id) == "+OK"
    assert src.command("MIGRATE", dst.host, dst.port, key, 0,
                       5000) == "+OK"
    if finish:
        for node in [dst, src] + [m for m in cluster.masters().values()
                                  if m not in (dst, src)]:
            assert node.command("CLUSTER", "SETSLOT", slot, "NODE",
                                dst_id) == "+OK"
    return src


def other_master(cluster, slot):
    src_id, _ = cluster.node_of_slot(slot)
    return next((i, m) for i, m in cluster.masters().items() if i != src_id)


@pytest.mark.parametrize("kind", KINDS)
def test_moved_slot_followed_once(kind, apache, nginx, cluster):
    """After a slot moved, the first GET gets MOVED from the old master
    and goes to the new one; the later ones go straight there, and the
    slot map is read once in all."""
    seeds = ",".join(cluster.seeds())
    key = "moving"
    slot = int(cluster.cli(cluster.nodes[0], "CLUSTER", "KEYSLOT", key))
    _, src = cluster.node_of_slot(slot)
    assert src.command("SET", key, "here") == "+OK"
    s = serve(kind, apache, nginx, "get", GET)
    r = s.get(f"/get?{seeds}&{key}")
    assert (r.status_code, r.text) == (200, '"here"'), s.error_log()[-2000:]

    dst_id, dst = other_master(cluster, slot)
    move_slot(cluster, slot, key, dst_id, dst)
    before_src = rejected(src, "get")
    before_dst = calls([dst], "get")[0]
    for _ in range(5):
        r = s.get(f"/get?{seeds}&{key}")
        assert (r.status_code, r.text) == (200, '"here"'), \
            s.error_log()[-2000:]
    assert rejected(src, "get") - before_src == 1     # one MOVED
    assert calls([dst], "get")[0] - before_dst == 5
    assert calls([src], "get")[0] == 1                 # the first request
    assert slots_reads(cluster) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_ask_during_migration(kind, apache, nginx, cluster):
    """A slot being migrated: a key still on the source is read there, one
    already moved is read on the destination after ASK, every time (the
    map keeps the source until the slot is given away)."""
    seeds = ",".join(cluster.seeds())
    old, new = "{mig}old", "{mig}new"
    arg = {old: "mig.old", new: "mig.new"}
    slot = int(cluster.cli(cluster.nodes[0], "CLUSTER", "KEYSLOT", old))
    _, src = cluster.node_of_slot(slot)
    assert src.command("SET", old, "stays") == "+OK"
    assert src.command("SET", new, "moves") == "+OK"
    s = serve(kind, apache, nginx, "get", GET)
    r = s.get(f"/get?{seeds}&{arg[old]}")
    assert (r.status_code, r.text) == (200, '"stays"'), s.error_log()[-2000:]

    dst_id, dst = other_master(cluster, slot)
    move_slot(cluster, slot, new, dst_id, dst, finish=False)
    for _ in range(2):
        for key, value in ((old, '"stays"'), (new, '"moves"')):
            r = s.get(f"/get?{seeds}&{arg[key]}")
            assert (r.status_code, r.text) == (200, value), \
                s.error_log()[-2000:]
    assert calls([dst], "asking") == [2]
    assert calls([dst], "get") == [2]
    assert calls([src], "get") == [3]    # old 3 times; new: ASK (rejected)
    assert slots_reads(cluster) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_pipeline_split_per_node(kind, apache, nginx, cluster):
    """A pipeline's commands go to their masters, one queue and commit
    each, the replies in the order sent; a command whose slot moved is
    followed (MOVED) and its reply put in its place; an error reply
    raises after the others ran."""
    seeds = ",".join(cluster.seeds())
    key = "moving"
    slot = cluster.key_slot(key)
    _, src = cluster.node_of_slot(slot)
    assert src.command("SET", key, "here") == "+OK"
    s = harness.one_interpreter(kind, apache, nginx,
                                {"/get": "get.rb", "/pipeline": "pipe.rb"},
                                {"get.rb": GET, "pipe.rb": PIPELINE})
    r = s.get(f"/get?{seeds}&{key}")     # the map read
    assert (r.status_code, r.text) == (200, '"here"'), s.error_log()[-2000:]
    dst_id, dst = other_master(cluster, slot)
    move_slot(cluster, slot, key, dst_id, dst)
    r = s.get(f"/pipeline?{seeds}")
    assert (r.status_code, r.text) == (200, PIPELINE_EXPECTED), \
        s.error_log()[-2000:]
    sizes = [int(m.command("DBSIZE")[1:])
             for m in cluster.masters().values()]
    assert all(n >= 2 for n in sizes)          # pk0..pk8 spread
    assert rejected(src, "get") == 1           # the MOVED
    assert slots_reads(cluster) == 1


# /replica?seeds&op&key[&value]: GET key (inspected), or SET key value,
# through a Redis::Cluster that reads from replicas.
REPLICA = r"""
Server = get_server_class
seeds, op, key, value = Server::Request.new.args.split("&")
c = Redis::Cluster.new(seeds.split(","), timeout: 2, replica: true)
Server.rputs(op == "set" ? c.set(key, value) : c.get(key).inspect)
"""


def replica_setup(kind, apache, nginx, cluster, key, value):
    """key set to value on its master and copied to the master's replica,
    the commands' counts then reset; the server of REPLICA; (server,
    master, replica, slot, get path)."""
    slot = cluster.key_slot(key)
    master_id, master = cluster.node_of_slot(slot)
    replica = cluster.replica_of(master_id)
    assert master.command("SET", key, value) == "+OK"
    assert master.command("WAIT", 1, 5000) == ":1"
    # CLUSTER SLOTS lists a replica once the node that answers knows it
    # has data (a replication offset, which gossip brings)
    deadline = time.monotonic() + 30
    while str(replica.port) not in cluster.cli(cluster.nodes[0], "CLUSTER",
                                               "SLOTS").split():
        assert time.monotonic() < deadline, "the replica is never listed"
        time.sleep(0.1)
    for n in cluster.nodes:
        assert n.command("CONFIG", "RESETSTAT") == "+OK"   # the counts
    s = serve(kind, apache, nginx, "replica", REPLICA)
    return s, master, replica, slot, \
        f"/replica?{','.join(cluster.seeds())}&get&{key}"


def get_ok(s, path, expected):
    r = s.get(path)
    assert (r.status_code, r.text) == (200, expected), s.error_log()[-2000:]


@pytest.mark.parametrize("kind", KINDS)
def test_reads_go_to_a_replica(kind, apache, nginx, cluster):
    """With replica: true a GET goes to a replica of its slot's master,
    on a connection that sent READONLY once; a SET still goes to the
    master."""
    s, master, replica, _, path = replica_setup(kind, apache, nginx,
                                                cluster, "rkey", "v1")
    for _ in range(5):
        get_ok(s, path, '"v1"')
    assert calls([replica, master], "get") == [5, 0]
    assert calls([replica], "readonly") == [1]

    seeds = ",".join(cluster.seeds())
    r = s.get(f"/replica?{seeds}&set&rkey&v2")
    assert (r.status_code, r.text) == (200, "OK"), s.error_log()[-2000:]
    assert calls([master], "set") == [1]
    assert rejected(replica, "set") == 0
    assert slots_reads(cluster) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_killed_replica_leaves_reads_to_the_master(kind, apache, nginx,
                                                     cluster):
    """A replica SIGKILLed between reads: every later read is answered,
    by the master."""
    s, master, replica, _, path = replica_setup(kind, apache, nginx,
                                                cluster, "rkey", "v1")
    get_ok(s, path, '"v1"')
    assert calls([replica, master], "get") == [1, 0]
    os.kill(replica.proc.pid, signal.SIGKILL)
    replica.proc.wait()
    for _ in range(5):
        get_ok(s, path, '"v1"')
    assert calls([master], "get") == [5]


def owner_seen_by(cluster, node, slot):
    """The node id of the master that serves slot, as node sees it."""
    for line in cluster.cli(node, "CLUSTER", "NODES").splitlines():
        f = line.split()
        for r in f[8:]:
            lo, _, hi = r.partition("-")
            if r[0] != "[" and int(lo) <= slot <= int(hi or lo):
                return f[0]
    return None


@pytest.mark.parametrize("kind", KINDS)
def test_a_replica_that_answers_moved_leaves_the_read_to_the_master(
        kind, apache, nginx, cluster):
    """After its slot moved to another master, the old master's replica
    answers MOVED: the read goes to the master the map names, which
    answers MOVED too, and then to the new one."""
    s, src, replica, slot, path = replica_setup(kind, apache, nginx,
                                                cluster, "moving", "here")
    get_ok(s, path, '"here"')
    dst_id, dst = other_master(cluster, slot)
    move_slot(cluster, slot, "moving", dst_id, dst)
    deadline = time.monotonic() + 30
    while owner_seen_by(cluster, replica, slot) != dst_id:
        assert time.monotonic() < deadline, "the replica never saw the move"
        time.sleep(0.1)
    get_ok(s, path, '"here"')
    assert [rejected(replica, "get"), rejected(src, "get")] == [1, 1]
    assert calls([dst], "get") == [1]


# /first?seeds&key&n: waits (sleep: the run is suspended) until n requests
# are there, then GETs key through the cluster; prints "together" (or
# "alone" after 20 s) and what it read.
FIRST = r"""
Server = get_server_class
seeds, key, n = Server::Request.new.args.split("&")
d = Server::SharedDict.new("meet")
d.incr("in", 1, init: 0)
t = Time.now + 20
sleep 0.01 while d["in"] < n.to_i && Time.now < t
got = Redis::Cluster.new(seeds.split(","), timeout: 2).get(key)
Server.rputs "#{d["in"] >= n.to_i ? "together" : "alone"} #{got.inspect}"
"""


@pytest.mark.parametrize("kind", KINDS)
def test_requests_at_once_read_the_map_once(kind, apache, nginx, cluster):
    """Four first requests at once, each needing the first map: one of
    them reads it, the others wait for that reading.  (Without the wait,
    Apache's four read it four times; nginx's happened to resume one
    after another.)"""
    n = 4
    s = harness.one_interpreter(kind, apache, nginx, {"/first": "first.rb"},
                                {"first.rb": FIRST},
                                nginx_main="mruby_shared_dict meet 1m;\n",
                                apache_main="mrubySharedDict meet 1m\n")
    url = s.url(f"/first?{','.join(cluster.seeds())}&nokey&{n}")
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        got = list(pool.map(lambda _: requests.get(url, timeout=60),
                            range(n)))
    assert [(r.status_code, r.text) for r in got] == \
        [(200, "together nil")] * n, s.error_log()[-2000:]
    assert slots_reads(cluster) == 1


# /meet?seeds&key&round&n in the fixups phase, whose waits hold the
# thread and the interpreter: waits until n requests of the round are
# there (in as many interpreters), then GETs key through the cluster;
# the handler prints "together" (or "alone" after 20 s) and what it read.
MEET = r"""
seeds, key, round, n = Apache::Request.new.args.split("&")
d = Apache::SharedDict.new("meet")
d.incr(round, 1, init: 0)
t = Time.now + 20
Apache.sleep 0.01 while d[round] < n.to_i && Time.now < t
got = Redis::Cluster.new(seeds.split(","), timeout: 2).get(key)
Apache::Request.new.notes["got"] =
  "#{d[round] >= n.to_i ? "together" : "alone"} #{got.inspect}"
"""

MEET_CONF = """
mrubySharedDict meet 1m
mrubyChildInitMiddleCode 'Apache.errlogger Apache::APLOG_NOTICE, "interpreter made"'
<Location /meet>
    mrubyFixupsMiddle {dir}/meet.rb
    mrubyHandlerMiddleCode 'Apache.rputs Apache::Request.new.notes["got"]'
</Location>
"""

# One event child with more threads than a round's requests.
ONE_EVENT_CHILD = ("StartServers 1\nServerLimit 1\nThreadsPerChild 8\n"
                   "ThreadLimit 8\nMaxRequestWorkers 8\n"
                   "MinSpareThreads 1\nMaxSpareThreads 8\n")


def test_the_slot_map_is_the_apache_childs(apache, cluster):
    """Four requests at once in four interpreters of one Apache child:
    CLUSTER SLOTS is read once for all of them.  After a slot moved, the
    one MOVED that a request gets changes the map of every interpreter:
    the four next requests go straight to the new master."""
    n = 4
    seeds = ",".join(cluster.seeds())
    key = "moving"
    slot = cluster.key_slot(key)
    _, src = cluster.node_of_slot(slot)
    assert src.command("SET", key, "here") == "+OK"
    a = apache(MEET_CONF, mpm="event", mpm_conf=ONE_EVENT_CHILD,
               files={"meet.rb": MEET})

    def meet(round, count):
        url = a.url(f"/meet?{seeds}&{key}&{round}&{count}")
        with concurrent.futures.ThreadPoolExecutor(count) as pool:
            return list(pool.map(lambda _: requests.get(url, timeout=60).text,
                                 range(count)))

    assert meet("first", n) == ['together "here"'] * n, a.error_log()[-2000:]
    assert a.error_log().count("interpreter made") == n
    assert slots_reads(cluster) == 1

    dst_id, dst = other_master(cluster, slot)
    move_slot(cluster, slot, key, dst_id, dst)
    assert meet("one", 1) == ['together "here"']
    assert rejected(src, "get") == 1
    assert meet("after", n) == ['together "here"'] * n
    assert rejected(src, "get") == 1
    assert calls([dst], "get") == [1 + n]
    assert slots_reads(cluster) == 1

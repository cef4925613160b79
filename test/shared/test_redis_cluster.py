"""Redis::Cluster on real servers against a real six-node Redis Cluster
(three masters, a replica each) on loopback: keys spread over the masters
and read back, hash tags, cross-slot commands refused, a slot moved
(MOVED followed once, the map kept) and a slot being migrated (ASK
followed, the map unchanged).  One script, both servers; requests one
after another run in one interpreter."""

import re

import pytest

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

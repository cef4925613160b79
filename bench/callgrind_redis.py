#!/usr/bin/env python3
"""Instructions per nginx request of a script that makes one Redis GET,
the way bench/callgrind.py counts them (callgrind on nginx with
master_process off, one keep-alive connection, a server life of 3,000
requests minus one of 1,000, divided by 2,000): what waiting for the reply
on the event loop (a coroutine, the socket watched through epoll) costs
next to the blocking client.  Compare builds by running it once with each
MRUBY_BUILD; `top` runs the same GET after setting a top-level constant
(the slide-30 script: the call used to block; now it waits as the other
does, and only the isolation cleanup's restore of the constant is extra);
`cluster` makes the GET through Redis::Cluster on a six-node Redis Cluster
(the slot map read at the first request, kept after).

    build/venv/bin/python bench/callgrind_redis.py [local|top|cluster]
"""

import sys

import callgrind
import valgrind

import harness

SCRIPT = {
    "local": 'r = Redis.new("127.0.0.1", {port})\n'
             'Nginx.rputs r.get("k")\n',
    "top": 'Server = get_server_class\n'
           'r = Redis.new("127.0.0.1", {port})\n'
           'Server.rputs r.get("k")\n',
    "cluster": 'r = Redis::Cluster.new({seeds})\n'
               'Nginx.rputs r.get("k")\n',
}


def main():
    case = sys.argv[1] if len(sys.argv) > 1 else "local"
    if case not in SCRIPT:
        sys.exit(__doc__)
    if case == "cluster":
        redis = harness.RedisCluster("callgrind-cluster").start()
        seeds = redis.seeds()
        _, owner = redis.node_of_slot(int(redis.cli(redis.nodes[0], "CLUSTER",
                                                     "KEYSLOT", "k")))
        owner.command("SET", "k", callgrind.BODY)
    else:
        redis = harness.Redis("callgrind").start()
        seeds = None
        redis.command("SET", "k", callgrind.BODY)
    try:
        s = harness.Nginx("location = /hello {\n"
                          "    mruby_content_handler {dir}/get.rb cache;\n}\n",
                          access_log=False, loglevel="warn")
        s.write("get.rb", SCRIPT[case].format(port=getattr(redis, "port", 0),
                                              seeds=seeds))
        cmd = valgrind.one_process(s)
        try:
            low = callgrind.instructions(s, cmd, 1000, "hello")
            high = callgrind.instructions(s, cmd, 3000, "hello")
        finally:
            s.remove()
    finally:
        redis.stop()
    redis.remove()
    print(f"nginx redis-get {case} ({harness.BUILD}): "
          f"{(high - low) / 2000:,.0f} instructions per request")


if __name__ == "__main__":
    main()

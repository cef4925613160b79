#!/usr/bin/env python3
"""Requests per second of one nginx worker while N requests wait on Redis.

A redis-server and an nginx with one worker (test/harness.py); for each N,
N clients each send one request whose script waits in BLPOP (nothing is
pushed until the measurement is over), then wrk (1 thread, 8 connections,
5 s) asks a hello-world content script; then the items are pushed and the
waiting requests end.  With a Redis client that blocks the worker, the
first waiting request stops every other one.  Wall-clock figures: run it
on a quiet machine, and compare builds in the same run
(MRUBY_BUILD=<dir> selects one).

    python3 bench/redis_wait.py [N,N,...]      (default 0,50,400)
"""

import os
import re
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "test"))

import harness  # noqa: E402

BLPOP = ("'r = Redis.new(\"127.0.0.1\", Nginx::Request.new.args.to_i, "
         "timeout: 60); Nginx.rputs r.blpop(\"q\", 50).inspect'")
HELLO = "'Nginx.rputs \"hello\"'"


def blocked(redis):
    for line in redis.command("INFO", "clients").splitlines():
        if line.startswith("blocked_clients:"):
            return int(line.split(":")[1])
    return -1


def wait_for(cond, timeout):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.05)


def measure(n, redis, count):
    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", n.port))
        s.sendall(f"GET /blpop?{redis.port} HTTP/1.1\r\nHost: x\r\n\r\n"
                  .encode())
        socks.append(s)
    # with a blocking client only the first one ever gets to Redis
    wait_for(lambda: blocked(redis) >= min(count, 1), 20)
    wait_for(lambda: blocked(redis) >= count, 5)
    waiting = blocked(redis)
    out = subprocess.run(["wrk", "-t1", "-c8", "-d5s", "--timeout", "2s",
                          n.url("/hello")], capture_output=True,
                         text=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    for _ in range(count):
        redis.command("RPUSH", "q", "x")
    for s in socks:
        s.close()
    wait_for(lambda: blocked(redis) == 0, 60)
    redis.command("DEL", "q")
    return waiting, rps


def main():
    counts = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1
                               else "0,50,400").split(",")]
    with harness.Redis("bench") as redis:
        n = harness.Nginx(
            f"location = /blpop {{ mruby_content_handler_code {BLPOP}; }}\n"
            f"location = /hello {{ mruby_content_handler_code {HELLO}; }}\n",
            access_log=False)
        n.start()
        try:
            for count in counts:
                waiting, rps = measure(n, redis, count)
                print(f"{harness.BUILD}: {count} sent, {waiting} waiting in "
                      f"Redis: hello {rps:.0f} req/s", flush=True)
        finally:
            n.stop()
            n.remove()
        redis.remove()


if __name__ == "__main__":
    main()

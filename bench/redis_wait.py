#!/usr/bin/env python3
"""Requests per second of one nginx worker, or one Apache event child,
while N requests wait on Redis.

A redis-server and an nginx with one worker (test/harness.py), or an
Apache event child of 64 threads whose BLPOPs run in the content handler
(they wait without a thread) or, with apache-access, in an access checker
(they hold their threads); for each N,
N clients each send one request whose script waits in BLPOP (nothing is
pushed until the measurement is over), then wrk (1 thread, 8 connections,
5 s) asks a hello-world content script; then the items are pushed and the
waiting requests end.  With a Redis client that blocks the worker, the
first waiting request stops every other one.  Wall-clock figures: run it
on a quiet machine, and compare builds in the same run
(MRUBY_BUILD=<dir> selects one).

    python3 bench/redis_wait.py [N,N,...] [nginx|apache|apache-access]
                                       (default 0,50,400 nginx)
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

# one child of 64 threads that accepts a connection per waiting request
APACHE_MPM = ("StartServers 1\nServerLimit 1\nThreadsPerChild 64\n"
              "ThreadLimit 64\nMinSpareThreads 1\nMaxSpareThreads 64\n"
              "MaxRequestWorkers 64\nAsyncRequestWorkerFactor 100\n"
              "MaxConnectionsPerChild 0\n")
APACHE_BLPOP = ("'r = Redis.new(\"127.0.0.1\", Apache::Request.new.args.to_i, "
                "timeout: 60); r.blpop(\"q\", 50)'")


def apache(where):
    """The Apache server: BLPOP in the handler or in an access checker."""
    if where == "apache":
        blpop = (f"mrubyHandlerMiddleCode {APACHE_BLPOP[:-1]}; "
                 "Apache.rputs \"done\"'")
    else:
        blpop = (f"mrubyAccessCheckerMiddleCode {APACHE_BLPOP}\n"
                 "    mrubyHandlerMiddleCode 'Apache.rputs \"done\"'")
    return harness.Apache(
        f"<Location /blpop>\n    {blpop}\n</Location>\n"
        "<Location /hello>\n    mrubyHandlerMiddleCode "
        "'Apache.rputs \"hello\"'\n</Location>\n",
        mpm="event", mpm_conf=APACHE_MPM, loglevel="warn", access_log=False)


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
    where = sys.argv[2] if len(sys.argv) > 2 else "nginx"
    with harness.Redis("bench") as redis:
        if where == "nginx":
            n = harness.Nginx(
                f"location = /blpop {{ mruby_content_handler_code {BLPOP}; }}\n"
                f"location = /hello {{ mruby_content_handler_code {HELLO}; }}\n",
                access_log=False)
        else:
            n = apache(where)
        n.start()
        try:
            for count in counts:
                waiting, rps = measure(n, redis, count)
                print(f"{harness.BUILD} {where}: {count} sent, {waiting} "
                      f"waiting in "
                      f"Redis: hello {rps:.0f} req/s", flush=True)
        finally:
            n.stop()
            n.remove()
        redis.remove()


if __name__ == "__main__":
    main()

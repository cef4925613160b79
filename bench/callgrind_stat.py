#!/usr/bin/env python3
"""Instructions and system calls per request of `stat` against `cache`.

The recipe of docs/architecture.md ("Where the time goes"): the server as
one process under valgrind --tool=callgrind (nginx with master_process
off, apache2 -X), one keep-alive connection, the instructions of a run of
3,000 requests minus those of a run of 1,000, divided by 2,000; so the
figures do not move with the machine's load.  Then the same server under
strace -c for 2,000 requests: the system calls per request (callgrind
does not see time spent in the kernel).

    python3 bench/callgrind_stat.py [nginx|apache ...]
"""

import os
import re
import subprocess
import sys
import time

import requests

import valgrind

import harness

HELLO = '{cls}.rputs "hello world"\n'
CONF = {
    ("nginx", "stat"): "location / { mruby_content_handler {dir}/h.rb; }",
    ("nginx", "cache"): "location / { mruby_content_handler {dir}/h.rb "
                        "cache; }",
    ("apache", "stat"): "<Location />\nmrubyHandlerMiddle {dir}/h.rb\n"
                        "</Location>",
    ("apache", "cache"): "<Location />\nmrubyHandlerMiddle {dir}/h.rb cache\n"
                         "</Location>",
}
CLASS = {"nginx": "Nginx", "apache": "Apache"}


def server(which, policy):
    if which == "nginx":
        s = harness.Nginx(CONF[which, policy], access_log=False,
                          loglevel="notice")
    else:
        s = harness.Apache(CONF[which, policy], mpm="prefork",
                           access_log=False, loglevel="notice")
    s.write("h.rb", HELLO.replace("{cls}", CLASS[which]))
    return s


def hammer(session, url, n):
    for _ in range(n):
        r = session.get(url, timeout=60)
        assert r.status_code == 200, r.status_code


def callgrind_run(which, policy, n):
    """Instructions of the whole run of a server that answers n requests:
    (the serving thread's, the other threads': Apache's watcher thread,
    whose work follows the events of the watched directories, not the
    requests)."""
    s = server(which, policy)
    url = s.url("/")
    counts = valgrind.life(s, valgrind.one_process(s), n,
                           lambda http, k: hammer(http, url, 1),
                           threads=True)
    s.remove()
    return counts[0], sum(counts[1:])


def callgrind(which, policy):
    """Per request: (3,000 requests - 1,000 requests) / 2,000, two runs
    (callgrind_control's dumps hang on an apache2 -X that switched to
    www-data)."""
    return valgrind.per_request(lambda n: callgrind_run(which, policy, n),
                                1000, 3000)


def syscalls(which, policy):
    s = server(which, policy)
    cmd = valgrind.one_process(s)
    log = os.path.join(s.dir, "strace.out")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        valgrind.wait_port(s.port, proc)
        session = requests.Session()
        url = s.url("/")
        hammer(session, url, 200)
        st = subprocess.Popen(["strace", "-c", "-f", "-o", log, "-p",
                               str(proc.pid)])
        time.sleep(1)
        hammer(session, url, 2000)
        st.terminate()
        st.wait(30)
    finally:
        proc.terminate()
        proc.wait(60)
    counts = {}
    with open(log) as f:
        for line in f:
            m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)",
                         line)
            if m:
                counts[m.group(2)] = int(m.group(1)) / 2000
    s.remove()
    return counts


def main():
    for which in sys.argv[1:] or ["nginx", "apache"]:
        for policy in ("cache", "stat"):
            ir, other = callgrind(which, policy)
            sc = syscalls(which, policy)
            per = ", ".join(f"{k} {v:.2f}" for k, v in sorted(sc.items())
                            if v >= 0.01)
            print(f"{which} {policy}: {ir:,.0f} instructions per request "
                  f"in the serving thread, {other:,.0f} in other threads; "
                  f"system calls per request: {per}", flush=True)


if __name__ == "__main__":
    main()

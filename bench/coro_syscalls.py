#!/usr/bin/env python3
"""System calls per request of N concurrent requests each sleeping 100 ms
on one nginx worker, and what the worker keeps after them.

    python3 bench/coro_syscalls.py [N ...]     # default: 300 1000

For each N: wrk with N connections (one thread) for 2 s of warm-up and a
window in which `strace -c -f -p WORKER` counts the worker's system calls;
nginx's stub_status counts the requests of the same window.  Then, after
wrk has stopped: the stacks the worker keeps (Nginx::Async.coroutines),
its stack mappings (a 4 KB PROT_NONE page followed by a mapping of the
stack size, /proc/PID/maps) and RSS, at once and again after the trims
(MRB_WAIT_TRIM_MS) had time to run.  strace slows the worker, so compare
the counts per request, not the rate: the requests of the window are
counted from just before strace attaches to just after it detached, so
the figures are, if anything, low.
"""

import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "test"))

import harness  # noqa: E402

STACK = 256 * 1024
PAGE = 4096


def stack_mappings(pid):
    """Coroutine stacks mapped in pid: a guard page, then the stack."""
    rows = []
    for line in open(f"/proc/{pid}/maps"):
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        rows.append((lo, hi, line.split()[1]))
    rows.sort()
    return sum(1 for a, b in zip(rows, rows[1:])
               if a[1] - a[0] == PAGE and a[2].startswith("---")
               and b[0] == a[1] and b[1] - b[0] == STACK
               and b[2].startswith("rw"))


def served(n):
    text = n.get("/status").text
    return int(text.split("\n")[2].split()[2])


def counts(n):
    live, idle = n.get("/count").text.split()
    return int(live) - 1, int(idle)


def measure(conns, window=4):
    n = harness.Nginx(
        "location /nap { mruby_content_handler_code "
        "'Nginx::Async.sleep 100; Nginx.rputs \"ok\"'; }\n"
        "location /count { mruby_content_handler_code "
        "'Nginx.rputs Nginx::Async.coroutines.join(\" \")'; }\n"
        "location /status { stub_status; }\n",
        main_conf="worker_rlimit_nofile 8192;", access_log=False,
        loglevel="warn", worker_connections=4096)
    n.start()
    try:
        pid = n.worker_pids()[0]
        wrk = subprocess.Popen(
            ["wrk", "-t", "1", "-c", str(conns), "-d", f"{window + 4}s",
             "--timeout", "10s", n.url("/nap")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(2)
        first = served(n)
        strace = subprocess.Popen(
            ["strace", "-c", "-f", "-p", str(pid)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(window)
        strace.send_signal(signal.SIGINT)
        table = strace.communicate(timeout=60)[1]
        last = served(n)
        wrk.wait(60)
        # stub_status counts its own two requests
        requests = last - first - 1
        calls = {}
        for m in re.finditer(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?"
                             r"(\w+)$", table, re.M):
            if m.group(2) != "total":
                calls[m.group(2)] = int(m.group(1))
        after = {"coroutines": counts(n), "stack_maps": stack_mappings(pid),
                 "rss_kb": harness.rss_kb(pid)}
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and stack_mappings(pid) > 64:
            time.sleep(0.2)
        later = {"coroutines": counts(n), "stack_maps": stack_mappings(pid),
                 "rss_kb": harness.rss_kb(pid)}
    finally:
        n.stop()
    return requests, calls, after, later


def main():
    for conns in [int(a) for a in sys.argv[1:]] or [300, 1000]:
        requests, calls, after, later = measure(conns)
        print(f"{conns} sleepers: {requests} requests in the window, "
              f"{os.getloadavg()[0]:.1f} load")
        for name in sorted(calls, key=lambda k: -calls[k]):
            print(f"  {name:16} {calls[name] / requests:8.3f} per request")
        print(f"  total            {sum(calls.values()) / requests:8.3f}")
        print(f"  just after: [live, idle] {list(after['coroutines'])}, "
              f"{after['stack_maps']} stacks mapped, "
              f"RSS {after['rss_kb']} KB")
        print(f"  then:       [live, idle] {list(later['coroutines'])}, "
              f"{later['stack_maps']} stacks mapped, "
              f"RSS {later['rss_kb']} KB")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The first pass over many scripts: the CPU a server's workers spend on
the first request of each of N `stat` scripts (one per site, as
bench/watch_scale.py lays them out), after a warm-up that made the
workers' interpreters.  A script's first run in an interpreter names its
file there (src/core/mrb_file_sym.c), which cost a scan of every name
before it.

    python3 bench/first_pass.py                      # N = 10,000, 100,000
    FIRST_PASS_SCALES=10000 FIRST_PASS_SERVERS=nginx python3 bench/first_pass.py

Prints one line per server and N: the workers' CPU seconds (user +
system, from /proc/PID/stat) over the pass, and per script.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import watch_scale  # noqa: E402

SCALES = [int(n) for n in
          os.environ.get("FIRST_PASS_SCALES", "10000,100000").split(",")]
SERVERS = os.environ.get("FIRST_PASS_SERVERS", "nginx,apache").split(",")
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pids):
    """User + system CPU seconds of the processes pids."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])    # utime, stime
    return total / TICKS


def run_one(which, n):
    s = watch_scale.make_server(which, n)
    try:
        s.start()
        watch_scale.warm_up(s)
        pids = s.worker_pids()
        cpu0 = cpu_s(pids)
        t0 = time.monotonic()
        watch_scale.request_all(s, n)
        wall = time.monotonic() - t0
        assert s.worker_pids() == pids, "a worker was replaced"
        cpu = cpu_s(pids) - cpu0
        cpu1 = cpu_s(pids)
        watch_scale.request_all(s, n)
        again = cpu_s(pids) - cpu1
    finally:
        s.stop()
    print(f"{which} N={n}: {cpu:.2f} s of worker CPU "
          f"({cpu / n * 1e6:.0f} us a script), {wall:.1f} s wall clock, "
          f"{len(pids)} worker(s); the same requests again: {again:.2f} s "
          f"({again / n * 1e6:.0f} us)", flush=True)


def main():
    for which in SERVERS:
        for n in SCALES:
            run_one(which, n)


if __name__ == "__main__":
    main()

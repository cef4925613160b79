#!/usr/bin/env python3
"""How much later than asked `Nginx::Async.sleep` ends, as a script sees
it (Time.now before and after), on one nginx worker.

    python3 bench/sleep_lateness.py [--samples 300] [--busy 1000]

Two cases: the worker alone (one client, one 10 ms sleep per request, so
the loop has nothing else to wake it), and busy (the same, while wrk keeps
--busy other connections sleeping 100 ms each).  Prints the mean, median,
99th percentile and minimum of (slept - asked) in milliseconds; a negative
minimum would be a sleep shorter than asked.  Timings: run it on a quiet
machine, and compare builds (MRUBY_BUILD) in the same sitting.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

import requests

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "test"))

import harness  # noqa: E402

CONF = ("location /late { mruby_content_handler_code "
        "'t = Time.now; Nginx::Async.sleep 10; "
        "Nginx.rputs(((Time.now - t) * 1000 - 10).to_s)'; }\n"
        "location /nap { mruby_content_handler_code "
        "'Nginx::Async.sleep 100; Nginx.rputs \"ok\"'; }\n")


def sample(n, count):
    session = requests.Session()
    return [float(session.get(n.url("/late"), timeout=30).text)
            for _ in range(count)]


def summary(xs):
    xs = sorted(xs)
    return (f"mean {statistics.mean(xs):.3f}, median "
            f"{statistics.median(xs):.3f}, p99 "
            f"{xs[int(len(xs) * 0.99) - 1]:.3f}, min {xs[0]:.3f} ms "
            f"({len(xs)} sleeps)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--busy", type=int, default=1000)
    args = ap.parse_args()
    n = harness.Nginx(CONF, main_conf="worker_rlimit_nofile 8192;",
                      access_log=False, loglevel="warn",
                      worker_connections=4096)
    n.start()
    try:
        print("alone:", summary(sample(n, args.samples)))
        wrk = subprocess.Popen(
            ["wrk", "-t", "1", "-c", str(args.busy), "-d", "600s",
             "--timeout", "10s", n.url("/nap")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(2)
            print(f"busy ({args.busy} others sleeping):",
                  summary(sample(n, args.samples)))
        finally:
            wrk.terminate()
            wrk.wait()
    finally:
        n.stop()


if __name__ == "__main__":
    main()

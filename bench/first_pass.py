#!/usr/bin/env python3
"""The first pass over many scripts: the CPU a server's workers spend on
the first request of each of N `stat` scripts (one per site, as
bench/watch_scale.py lays them out), after a warm-up that made the
workers' interpreters.  A script's first run in an interpreter names its
file there (src/core/mrb_file_sym.c), which cost a scan of every name
before it.

    python3 bench/first_pass.py                      # N = 10,000, 100,000
    FIRST_PASS_SCALES=10000 FIRST_PASS_SERVERS=nginx python3 bench/first_pass.py

The requests go over CLIENTS keep-alive connections, PIPELINE at a time
on each (HTTP/1.1 pipelining): a worker then reads a batch of requests
per wake-up, as under load, instead of sleeping in epoll_wait between two
requests of a client that waits for each answer (with one request at a
time from Python's requests, the same requests again cost nginx 68-85 us
each, 2026-11-27 at a load of 7-10: more than the first runs' own cost).

Prints one line per server and N: the workers' CPU seconds (user +
system, from /proc/PID/stat) over the pass and per script, and over the
same requests again (every script loaded: the cost of the requests
alone).
"""

import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import watch_scale  # noqa: E402

SCALES = [int(n) for n in
          os.environ.get("FIRST_PASS_SCALES", "10000,100000").split(",")]
SERVERS = os.environ.get("FIRST_PASS_SERVERS", "nginx,apache").split(",")
TICKS = os.sysconf("SC_CLK_TCK")
CLIENTS = watch_scale.CLIENTS
PIPELINE = 32


def cpu_s(pids):
    """User + system CPU seconds of the processes pids."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])    # utime, stime
    return total / TICKS


def read_response(sock, buf):
    """One response from sock (buf: bytes read and not used yet); returns
    (status, rest of buf)."""
    while b"\r\n\r\n" not in buf:
        buf += recv(sock)
    head, buf = buf.split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    fields = dict(line.lower().split(b":", 1) for line in lines[1:])
    if b"content-length" in fields:
        n = int(fields[b"content-length"])
        while len(buf) < n:
            buf += recv(sock)
        return status, buf[n:]
    while True:                                      # chunked
        while b"\r\n" not in buf:
            buf += recv(sock)
        size, buf = buf.split(b"\r\n", 1)
        n = int(size, 16)
        while len(buf) < n + 2:
            buf += recv(sock)
        buf = buf[n + 2:]
        if n == 0:
            return status, buf


def recv(sock):
    data = sock.recv(65536)
    if not data:
        raise RuntimeError("the server closed the connection")
    return data


def request_all(s, n):
    """Every script once: CLIENTS connections, PIPELINE requests at a time
    on each."""
    errors = []

    def run(k):
        paths = [f"/s/{i}.rb" for i in range(k, n, CLIENTS)]
        buf = b""
        with socket.create_connection((s.host, s.port), timeout=60) as sock:
            for at in range(0, len(paths), PIPELINE):
                batch = paths[at:at + PIPELINE]
                sock.sendall(b"".join(
                    f"GET {p} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
                    for p in batch))
                for p in batch:
                    status, buf = read_response(sock, buf)
                    if status != 200:
                        errors.append((p, status))

    watch_scale.in_clients(run)
    if errors:
        raise RuntimeError(f"requests failed: {errors[:5]}")


def run_one(which, n):
    s = watch_scale.make_server(which, n)
    try:
        s.start()
        watch_scale.warm_up(s)
        pids = s.worker_pids()
        cpu0 = cpu_s(pids)
        t0 = time.monotonic()
        request_all(s, n)
        wall = time.monotonic() - t0
        assert s.worker_pids() == pids, "a worker was replaced"
        cpu = cpu_s(pids) - cpu0
        cpu1 = cpu_s(pids)
        request_all(s, n)
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

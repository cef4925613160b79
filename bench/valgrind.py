"""What the callgrind launchers of bench/ share: instruction counts, which
do not move with the machine's load, as docs/architecture.md ("Where the
time goes") takes them.  Three recipes:

- life(): a server as one process (nginx with master_process off, apache2
  -X) under callgrind for a whole life of n requests; per_request() turns
  two lives into instructions per request (start-up and shutdown cancel
  out).  bench/callgrind.py, callgrind_stat.py, callgrind_sleep.py,
  callgrind_edits.py and callgrind_redis.py.
- counted(): the counters zeroed after a warm-up and dumped after n
  requests (callgrind_control), kept for callgrind_annotate.
  bench/callgrind_lib.py.
- program(): a program's own total (bench/coro.py's coro_bench count).
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import requests

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "test"))

import harness  # noqa: E402


def one_process(s):
    """Generates harness server s's files and returns the command that runs
    it as one process in the foreground."""
    s.generate()
    if s.name == "apache":
        return s.command() + ["-X"]
    with open(s.conf_path) as f:
        conf = f.read().replace("master_process on;", "master_process off;")
    with open(s.conf_path, "w") as f:
        f.write(conf)
    return s.command()


def total_ir(path):
    """The instructions of a callgrind output file."""
    with open(path) as f:
        for line in f:
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


def wait_port(port, proc=None, timeout=120):
    deadline = time.monotonic() + timeout
    while not harness.port_open(port):
        if (proc is not None and proc.poll() is not None) \
                or time.monotonic() > deadline:
            raise RuntimeError(f"the server on port {port} did not start")
        time.sleep(0.1)


def session():
    """A keep-alive client that ignores proxy settings."""
    http = requests.Session()
    http.trust_env = False
    return http


def life(s, cmd, n, request, threads=False):
    """Instructions of a whole life of server s (cmd: one_process(s)) that
    served n requests, request(http, k) making the k-th on one keep-alive
    session.  A list: the whole process; with threads, one per thread,
    the first thread's first (Apache's watcher thread is another)."""
    # apache2 -X writes its output as www-data, after it switched user:
    # one file per thread is made then, the single file at the start
    out = tempfile.mkdtemp(prefix="cg.", dir=s.dir)
    os.chmod(out, 0o777)
    argv = ["valgrind", "--tool=callgrind", "--dump-instr=no",
            f"--callgrind-out-file={out}/cg.out"]
    if threads:
        argv.append("--separate-threads=yes")
    else:
        open(f"{out}/cg.out", "w").close()
        os.chmod(f"{out}/cg.out", 0o666)
        shutil.chown(f"{out}/cg.out", "www-data", "www-data")
    proc = subprocess.Popen(argv + cmd, env=s.env(),
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_port(s.port, proc, timeout=300)
        http = session()
        for k in range(n):
            request(http, k)
        http.close()
    finally:
        stop(proc, s)
    # with threads, one file a thread (cg.out-01, ...) and an empty cg.out
    return [total_ir(os.path.join(out, f))
            for f in sorted(os.listdir(out))
            if f.startswith("cg.out-" if threads else "cg.out")]


def per_request(run, low, high):
    """(run(high) - run(low)) / (high - low), thread by thread: run(n) is
    a life of n requests, as life() counts it."""
    a, b = run(high), run(low)
    return [(x - y) / (high - low) for x, y in zip(a, b)]


def stop(proc, s):
    """Ends server s running under valgrind as proc, and waits for it:
    callgrind writes its output as the server exits, slow on a loaded
    machine (120 s was not always enough at a load of 12)."""
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        # valgrind can hand a process-directed signal to a thread that
        # blocks it (the run clock's, src/core/mrb_run_budget.c) and keep
        # it until another thread runs: a connection wakes the serving one
        try:
            socket.create_connection((s.host, s.port), timeout=5).close()
        except OSError:
            pass
    proc.wait(600)


def counted(s, cmd, path, warmup, n, out, headers=None):
    """Instructions per request of n GETs of path (with headers, a dict)
    on one connection after warmup more, the counters zeroed between
    (callgrind_control -z); the dump is out + ".1"."""
    proc = subprocess.Popen(["valgrind", "--tool=callgrind",
                             f"--callgrind-out-file={out}"] + cmd,
                            cwd=s.dir, env=s.env(),
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_port(s.port, proc)
        http = session()

        def send(count):
            for _ in range(count):
                r = http.get(s.url(path), headers=headers, timeout=120)
                if r.status_code != 200:
                    raise RuntimeError(f"{path}: {r.status_code} "
                                       f"{r.text[:80]!r}")
        send(warmup)
        subprocess.run(["callgrind_control", "-z", str(proc.pid)],
                       check=True, capture_output=True)
        send(n)
        subprocess.run(["callgrind_control", "-d", str(proc.pid)],
                       check=True, capture_output=True)
        http.close()
    finally:
        stop(proc, s)
    return total_ir(out + ".1") // n


def program(argv, timeout=1200):
    """Instructions of a program's whole run (valgrind's summary)."""
    err = subprocess.run(["valgrind", "--tool=callgrind",
                          "--callgrind-out-file=/dev/null"] + argv,
                         check=True, capture_output=True, text=True,
                         timeout=timeout).stderr
    return int(re.search(r"Collected\s*:\s*(\d+)", err).group(1))

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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "test"))

import harness  # noqa: E402

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


def command(s, which):
    """The server as one process in the foreground."""
    s.generate()
    if which == "nginx":
        with open(s.conf_path) as f:
            text = f.read().replace("master_process on;",
                                    "master_process off;")
        with open(s.conf_path, "w") as f:
            f.write(text)
        return s.command()
    return s.command() + ["-X"]


def wait_port(port):
    for _ in range(600):
        if harness.port_open(port):
            return
        time.sleep(0.1)
    raise RuntimeError("server did not start")


def hammer(session, url, n):
    for _ in range(n):
        r = session.get(url, timeout=60)
        assert r.status_code == 200, r.status_code


def total_ir(out_file):
    with open(out_file) as f:
        for line in f:
            if line.startswith("totals:") or line.startswith("summary:"):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in {out_file}")


def callgrind_run(which, policy, n):
    """Instructions of the whole run of a server that answers n requests:
    (the serving thread's, the other threads': Apache's watcher thread,
    whose work follows the events of the watched directories, not the
    requests)."""
    s = server(which, policy)
    cmd = command(s, which)
    # written at exit, by apache2 -X after it became www-data
    os.makedirs(os.path.join(s.dir, "cg"), mode=0o777)
    os.chmod(os.path.join(s.dir, "cg"), 0o777)
    out = os.path.join(s.dir, "cg", "cg.out")
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
         "--separate-threads=yes", "--dump-instr=no"] + cmd,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(s.port)
        hammer(requests.Session(), s.url("/"), n)
    finally:
        proc.terminate()
        proc.wait(120)
    cg = os.path.join(s.dir, "cg")
    files = sorted(f for f in os.listdir(cg) if f.startswith("cg.out-"))
    main = total_ir(os.path.join(cg, files[0]))
    others = sum(total_ir(os.path.join(cg, f)) for f in files[1:])
    s.remove()
    return main, others


def callgrind(which, policy):
    """Per request: (3,000 requests - 1,000 requests) / 2,000, two runs
    (callgrind_control's dumps hang on an apache2 -X that switched to
    www-data)."""
    high = callgrind_run(which, policy, 3000)
    low = callgrind_run(which, policy, 1000)
    return ((high[0] - low[0]) / 2000, (high[1] - low[1]) / 2000)


def syscalls(which, policy):
    s = server(which, policy)
    cmd = command(s, which)
    log = os.path.join(s.dir, "strace.out")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_port(s.port)
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

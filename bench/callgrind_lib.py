#!/usr/bin/env python3
"""Instructions per request of the `lib` section's nginx configurations
(bench/run.py: return 200, the Lua and mruby routers and JSON scripts),
with callgrind: figures that do not move with the machine's load.

    build/venv/bin/python bench/callgrind_lib.py              # all six
    build/venv/bin/python bench/callgrind_lib.py json-mruby   # one

nginx runs as a single process (master_process off) under valgrind; one
keep-alive connection sends WARMUP requests, the counters are zeroed
(callgrind_control -z), REQUESTS more are sent and dumped (-d).  Prints
name, instructions per request and the dump for callgrind_annotate
(--inclusive=yes, --tree=calling).
"""

import glob
import http.client
import os
import subprocess
import sys
import time

import run

import harness

WARMUP, REQUESTS = 300, 2000
OUT = os.path.join(harness.BUILD, "bench", "callgrind")


def instructions(cfg, out):
    """Ir per request of cfg's server, dump in out.1."""
    server = cfg.make()
    server.generate()
    with open(server.conf_path) as f:
        conf = f.read().replace("master_process on;", "master_process off;")
    with open(server.conf_path, "w") as f:
        f.write(conf)
    for old in glob.glob(out + "*"):
        os.remove(old)
    proc = subprocess.Popen(["valgrind", "--tool=callgrind",
                             f"--callgrind-out-file={out}"] + server.command(),
                            cwd=server.dir, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not harness.port_open(server.port, "127.0.0.1"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{cfg.label}: nginx did not start")
            time.sleep(0.2)
        conn = http.client.HTTPConnection("127.0.0.1", server.port,
                                          timeout=120)

        def send(n):
            for _ in range(n):
                conn.request("GET", cfg.path)
                r = conn.getresponse()
                body = r.read()
                if r.status != 200:
                    raise RuntimeError(f"{cfg.label}: {r.status} {body[:80]}")
        send(WARMUP)
        subprocess.run(["callgrind_control", "-z", str(proc.pid)],
                       check=True, capture_output=True)
        send(REQUESTS)
        subprocess.run(["callgrind_control", "-d", str(proc.pid)],
                       check=True, capture_output=True)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        server.remove()
    with open(out + ".1") as f:
        total = next(int(line.split()[1]) for line in f
                     if line.startswith(("summary:", "totals:")))
    return total // REQUESTS


def main():
    only = set(sys.argv[1:])
    os.makedirs(OUT, exist_ok=True)
    for key, _, configs in run.lib_workloads():
        for cfg in configs:
            name = f"{key}-{cfg.key}"
            if only and name not in only:
                continue
            out = os.path.join(OUT, f"{name}.out")
            print(f"{name}: {instructions(cfg, out):,} instructions per "
                  f"request ({out}.1)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

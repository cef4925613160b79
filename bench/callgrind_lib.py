#!/usr/bin/env python3
"""Instructions per request of the `lib` section's nginx configurations
(bench/run.py: return 200, the Lua and mruby routers and JSON scripts)
and of the `typical` section's (its reference, Lua and mruby on each
server), with callgrind: figures that do not move with the machine's load.

    build/venv/bin/python bench/callgrind_lib.py              # all twelve
    build/venv/bin/python bench/callgrind_lib.py json-mruby   # one
    build/venv/bin/python bench/callgrind_lib.py typical-nginx-mruby

The server runs as a single process (nginx with master_process off,
apache2 -X) under valgrind; one keep-alive connection sends WARMUP requests, the counters are zeroed
(callgrind_control -z), REQUESTS more are sent and dumped (-d).  Prints
name, instructions per request and the dump for callgrind_annotate
(--inclusive=yes, --tree=calling).
"""

import glob
import os
import sys

import run
import valgrind

import harness

WARMUP, REQUESTS = 300, 2000
OUT = os.path.join(harness.BUILD, "bench", "callgrind")


def instructions(cfg, out):
    """Ir per request of cfg's server, dump in out.1.  Apache runs on the
    prefork MPM, whose apache2 -X serves in its one thread as the event
    MPM's does not under valgrind."""
    run.APACHE_OVERRIDES.update(mpm="prefork", mpm_conf=run.ONE_CHILD)
    try:
        server = cfg.make()
    finally:
        run.APACHE_OVERRIDES.clear()
    for old in glob.glob(out + "*"):
        os.remove(old)
    try:
        return valgrind.counted(server, valgrind.one_process(server),
                                cfg.path, WARMUP, REQUESTS, out,
                                headers=cfg.headers)
    finally:
        server.remove()


def main():
    only = set(sys.argv[1:])
    os.makedirs(OUT, exist_ok=True)
    run.build_hello()  # the Apache reference
    workloads = run.lib_workloads() + [
        ("typical-" + key, title, configs)
        for key, title, configs in run.typical_workloads()]
    for key, _, configs in workloads:
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

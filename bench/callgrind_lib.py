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
import os
import sys

import run
import valgrind

import harness

WARMUP, REQUESTS = 300, 2000
OUT = os.path.join(harness.BUILD, "bench", "callgrind")


def instructions(cfg, out):
    """Ir per request of cfg's server, dump in out.1."""
    server = cfg.make()
    for old in glob.glob(out + "*"):
        os.remove(old)
    try:
        return valgrind.counted(server, valgrind.one_process(server),
                                cfg.path, WARMUP, REQUESTS, out)
    finally:
        server.remove()


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

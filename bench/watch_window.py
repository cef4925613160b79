#!/usr/bin/env python3
"""The edit window of `stat` scripts: after an edit returns, how long
until a request runs the new version, and how many requests ran the old
one meanwhile.

nginx reads its inotify queue in its own event loop, before any request
sent after the edit; an Apache child reads it in a watcher thread, which
the kernel must first wake and schedule (docs/apache.md).  For each
server: ROUNDS edits of one script (written in place and closed), each
followed at once by requests on one keep-alive connection until the new
version answers.  Figures are wall-clock on a shared machine: the stale
answers count is the figure that matters (0 means no window was seen).

    python3 bench/watch_window.py [apache|nginx ...]
"""

import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "test"))

import harness  # noqa: E402

ROUNDS = 200
CONF = {
    "apache": "<Location /e>\nmrubyHandlerMiddle {dir}/e.rb\n</Location>",
    "nginx": "location /e { mruby_content_handler {dir}/e.rb; }",
}
CLASS = {"apache": "Apache", "nginx": "Nginx"}


def run(which):
    cls = CLASS[which]
    if which == "apache":
        s = harness.Apache(CONF[which], mpm="event", access_log=False,
                           loglevel="warn")
    else:
        s = harness.Nginx(CONF[which], access_log=False, loglevel="warn")
    s.write("e.rb", f'{cls}.rputs "v0"')
    s.start()
    try:
        for _ in range(20):     # the script watched in the serving process
            s.get("/e")
        ms, stale = [], []
        for v in range(1, ROUNDS + 1):
            s.write("e.rb", f'{cls}.rputs "v{v}"')
            t0, old = time.perf_counter(), 0
            while s.get("/e").text != f"v{v}":
                old += 1
                if time.perf_counter() - t0 > 10:
                    raise RuntimeError(f"v{v} not seen in 10 s")
            ms.append((time.perf_counter() - t0) * 1000)
            stale.append(old)
    finally:
        s.stop()
        s.remove()
    ms.sort()
    return {"server": which, "rounds": ROUNDS,
            "edits_with_stale_answers": sum(1 for n in stale if n),
            "stale_answers_max": max(stale),
            "seen_after_ms_median": statistics.median(ms),
            "seen_after_ms_p99": ms[int(len(ms) * 0.99) - 1],
            "seen_after_ms_max": ms[-1]}


def main():
    for which in sys.argv[1:] or ["nginx", "apache"]:
        print(json.dumps(run(which)), flush=True)


if __name__ == "__main__":
    main()

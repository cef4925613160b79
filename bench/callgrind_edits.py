#!/usr/bin/env python3
"""What edits of other scripts cost the requests to an unchanged one,
counted in instructions (load-independent, unlike wrk on a shared
machine).

The server as one process under callgrind (nginx with master_process
off, apache2 -X with its watcher thread: all threads counted), 100 `stat`
scripts of which the client requests one; with edits, one of the other 99
is rewritten after every EVERY requests (100 edits/s at 20,000 requests/s
is one edit per 200 requests).  Per request: the instructions of a run of
3,000 requests minus those of a run of 1,000, divided by 2,000, with and
without the edits.  The system calls an edit causes (the re-watch: a
statfs, inotify_add_watch and lstat per directory on the path) are kernel
time and not counted here; the unit benchmark file_watch_bench_10000_paths
gives their CPU time with the rest (all calls / paths rewritten).

    python3 bench/callgrind_edits.py [nginx|apache ...]
"""

import os
import sys

import valgrind

import harness

SCRIPTS = 100
EVERY = 200
CONF = {"nginx": "location /s/ { mruby_add_handler on; }",
        "apache": ("mrubyHandlerEnable On\n<Directory {docroot}/s>\n"
                   "SetHandler mruby-script\n</Directory>")}
CLASS = {"nginx": "Nginx", "apache": "Apache"}


def server(which):
    if which == "nginx":
        s = harness.Nginx(CONF[which], access_log=False, loglevel="warn")
    else:
        s = harness.Apache(CONF[which], mpm="prefork", access_log=False,
                           loglevel="warn")
    d = os.path.join(s.docroot, "s")
    os.makedirs(d, mode=0o755, exist_ok=True)
    os.chmod(d, 0o755)
    for i in range(SCRIPTS):
        with open(os.path.join(d, f"{i}.rb"), "w") as f:
            f.write(f'{CLASS[which]}.rputs "{i}"\n')
    return s, d


def run(which, n, edits):
    """Instructions of a server life that served n requests (all threads),
    every script watched and compiled first."""
    s, d = server(which)

    def request(http, k):
        if k < SCRIPTS - 1:
            http.get(s.url(f"/s/{k + 1}.rb"), timeout=60)
            return
        k -= SCRIPTS - 1
        r = http.get(s.url("/s/0.rb"), timeout=60)
        assert r.text == "0", r.text
        if edits and k % EVERY == EVERY - 1:
            i = 1 + k // EVERY % (SCRIPTS - 1)
            with open(os.path.join(d, f"{i}.rb"), "w") as f:
                f.write(f'{CLASS[which]}.rputs "{i}, {k}"\n')

    counts = valgrind.life(s, valgrind.one_process(s), SCRIPTS - 1 + n,
                           request, threads=True)
    s.remove()
    return [sum(counts)]


def main():
    for which in sys.argv[1:] or ["nginx", "apache"]:
        per = {}
        for edits in (False, True):
            per[edits], = valgrind.per_request(
                lambda n: run(which, n, edits), 1000, 3000)
        print(f"{which}: {per[False]:,.0f} instructions per request to an "
              f"unchanged script, {per[True]:,.0f} with one edit of another "
              f"script every {EVERY} requests (ratio "
              f"{per[False] / per[True]:.4f})", flush=True)


if __name__ == "__main__":
    main()

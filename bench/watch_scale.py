#!/usr/bin/env python3
"""make bench-watch: the file watch of `stat` scripts at hosting scale.

N scripts (one per site) in one directory, each run by the URI that names
it (nginx `mruby_add_handler on`, Apache `SetHandler mruby-script` with
`mrubyHandlerEnable On`), one nginx worker / the Apache event MPM.  For
each server and N:

    startup        seconds from launch to the first answer
    rss/script     worker RSS growth after every script ran once, per script
                   (from after a warm-up that made the worker's interpreters)
    edit           the request to an edited script right after its edit, and
                   to an unchanged one, against the same request with no
                   edit (median and max of 20, ms)
    deploy stall   the longest wait of a client requesting an unchanged
                   script in a loop while all N scripts are rewritten, next
                   to its longest wait with no edits (ms)
    in the worker  nginx, where `perf` can trace it (bench/worker_loop.py):
                   the worker's own time for the request after an edit
                   (its loop iterations between the client's send and
                   receive) and its longest loop iteration while all N are
                   rewritten, in wall-clock and CPU time
    edits 100/s    wrk on an unchanged script while 100 other scripts are
                   rewritten per second, as a ratio of wrk with no edits
                   (pairs a few seconds apart, median of 3)

Latencies are measured by a Python client on the same loaded 2 cores, so
they include its own overhead; the comparison that matters is within one
run (with and without edits).  Results: bench/watch_results.json,
bench/watch_scale.md (inserted into docs/benchmarks.md by bench/render.py)
and docs/img/watch_scale.png.

    python3 bench/watch_scale.py                 # N = 1,000 and 10,000
    WATCH_SCALES=1000,10000,100000 python3 bench/watch_scale.py
    WATCH_SERVERS=nginx python3 bench/watch_scale.py
"""

import json
import multiprocessing
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time

import requests

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "test"))

import harness  # noqa: E402
from render import splice_block  # noqa: E402
from worker_loop import LoopTrace  # noqa: E402

RESULTS = os.path.join(HERE, "watch_results.json")
SECTION = os.path.join(HERE, "watch_scale.md")
PLOT = os.path.join(REPO, "docs", "img", "watch_scale.png")
DOC = os.path.join(REPO, "docs", "benchmarks.md")

SCALES = [int(n) for n in
          os.environ.get("WATCH_SCALES", "1000,10000").split(",")]
SERVERS = os.environ.get("WATCH_SERVERS", "nginx,apache").split(",")
WRK_SECONDS = 4
CLIENTS = 4

CONF = {
    "nginx": "location /s/ { mruby_add_handler on; }",
    "apache": ("mrubyHandlerEnable On\n<Directory {docroot}/s>\n"
               "SetHandler mruby-script\n</Directory>"),
}
CLASS = {"nginx": "Nginx", "apache": "Apache"}
# One Apache child, as nginx runs one worker: the memory per script is
# then what one process pays (two children would each pay for the scripts
# both ran).
APACHE_ONE_CHILD = """\
StartServers 1
ServerLimit 1
ThreadsPerChild 64
ThreadLimit 64
MinSpareThreads 1
MaxSpareThreads 64
MaxRequestWorkers 64
MaxConnectionsPerChild 0
"""


def script(cls, i, version=0):
    return f'{cls}.rputs "{i}.{version}"\n'


def make_server(which, n):
    if which == "nginx":
        s = harness.Nginx(CONF[which], access_log=False, loglevel="notice")
    else:
        s = harness.Apache(CONF[which], mpm="event", loglevel="notice",
                           access_log=False, mpm_conf=APACHE_ONE_CHILD)
    os.makedirs(os.path.join(s.docroot, "s"), mode=0o755, exist_ok=True)
    os.chmod(os.path.join(s.docroot, "s"), 0o755)
    for i in range(n):
        with open(os.path.join(s.docroot, "s", f"{i}.rb"), "w") as f:
            f.write(script(CLASS[which], i))
    return s


def worker_rss_kb(s):
    return sum(harness.rss_kb(p) for p in s.worker_pids())


def warm_up(s):
    """One script from CLIENTS clients at once, until the worker has made
    the interpreters that request_all will use: what an interpreter costs
    is not a cost per script."""
    def run():
        session = requests.Session()
        for _ in range(50):
            session.get(s.url("/s/0.rb"), timeout=30)

    threads = [threading.Thread(target=run) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def request_all(s, n):
    """Every script once, from CLIENTS keep-alive clients."""
    errors = []

    def run(k):
        session = requests.Session()
        for i in range(k, n, CLIENTS):
            r = session.get(s.url(f"/s/{i}.rb"), timeout=30)
            if r.status_code != 200:
                errors.append((i, r.status_code))

    in_clients(run)
    if errors:
        raise RuntimeError(f"requests failed: {errors[:5]}")


def in_clients(run):
    """run(k) for each client k, CLIENTS threads at once."""
    threads = [threading.Thread(target=run, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def timed_get(session, url):
    t0 = time.perf_counter()
    r = session.get(url, timeout=30)
    return (time.perf_counter() - t0) * 1000, r.text


def traced(s, which, during):
    """during() with the nginx worker's loop traced (or None)."""
    if which != "nginx" or not LoopTrace.available():
        return during(), None
    with LoopTrace(s.worker_pids()[0]) as trace:
        out = during()
    return out, trace


def worker_share(trace, windows):
    """Per client request window (monotonic start, end): the wall-clock and
    CPU ms of the worker's loop iterations that began within it."""
    shares = []
    for a, b in windows:
        its = [i for i in trace.iterations if a <= i.start <= b]
        shares.append((sum(i.wall_ms for i in its),
                       sum(i.cpu_ms for i in its)))
    return shares


def measure_edit(s, which, n, windows=None):
    """The request to an edited script right after the edit returned: on
    Apache, requests until the new version answers (the watcher thread's
    window), counted in stale answers; nginx must answer it at once.
    windows: gets the (start, end) of each edited script's requests."""
    cls = CLASS[which]
    session = requests.Session()
    base, edited, unchanged, stale = [], [], [], 0
    for k in range(20):
        j = random.randrange(1, n)
        base.append(timed_get(session, s.url("/s/0.rb"))[0])
        with open(os.path.join(s.docroot, "s", f"{j}.rb"), "w") as f:
            f.write(script(cls, j, k + 1))
        t0 = time.perf_counter()
        m0 = time.monotonic()
        while True:
            text = timed_get(session, s.url(f"/s/{j}.rb"))[1]
            if text == f"{j}.{k + 1}":
                break
            if not s.edit_window or time.perf_counter() - t0 > 10:
                raise RuntimeError(f"edit of {j} not seen: {text!r}")
            stale += 1
        edited.append((time.perf_counter() - t0) * 1000)
        if windows is not None:
            windows.append((m0, time.monotonic()))
        with open(os.path.join(s.docroot, "s", f"{(j + 1) % n or 1}.rb"),
                  "w") as f:
            f.write(script(cls, (j + 1) % n or 1, k + 100))
        unchanged.append(timed_get(session, s.url("/s/0.rb"))[0])
        time.sleep(0.02)
    med = statistics.median
    return {"base_ms": med(base), "edited_ms": med(edited),
            "edited_max_ms": max(edited), "unchanged_ms": med(unchanged),
            "unchanged_max_ms": max(unchanged), "stale_answers": stale}


def longest_wait(s, seconds=None, during=None):
    """A client requesting /s/0.rb in a loop: its longest wait, in ms,
    while during() runs (or for seconds), and when (monotonic)."""
    waits, stop, slowest = [], threading.Event(), [0, 0, 0]

    def client():
        session = requests.Session()
        while not stop.is_set():
            m0 = time.monotonic()
            waits.append(timed_get(session, s.url("/s/0.rb"))[0])
            if waits[-1] > slowest[0]:
                slowest[:] = [waits[-1], m0, time.monotonic()]

    t = threading.Thread(target=client)
    t.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    if during:
        during()
    else:
        time.sleep(seconds)
    elapsed = time.monotonic() - t0
    stop.set()
    t.join()
    waits.sort()
    return {"max_ms": waits[-1], "p99_ms": waits[int(len(waits) * 0.99)],
            "requests": len(waits), "seconds": elapsed,
            "max_window": slowest[1:]}


def worker_stall(trace, wait):
    """The worker's side of a rewrite: its longest loop iteration (wall
    ms, and the CPU ms within it), the most CPU one iteration took, and,
    for the client's longest wait, when the worker read that request and
    wrote its response (ms after the client began it), and how long the
    worker, woken for the request, waited for a CPU."""
    longest = max(trace.iterations, key=lambda i: i.wall_ms)
    busiest = max(trace.iterations, key=lambda i: i.cpu_ms)
    a, b = wait.pop("max_window")
    read = [(t - a) * 1000 for t in trace.reads if a <= t <= b]
    written = [(t - a) * 1000 for t in trace.writes if a <= t <= b]
    woken = [i.woken_wait_ms for i in trace.iterations if a <= i.start <= b]
    return {"iterations": len(trace.iterations),
            "longest_ms": longest.wall_ms, "longest_cpu_ms": longest.cpu_ms,
            "longest_preempted_ms": longest.preempted_ms,
            "most_cpu_ms": busiest.cpu_ms,
            "slowest_read_after_ms": read[0] if read else None,
            "slowest_written_after_ms": written[-1] if written else None,
            "slowest_cpu_wait_ms": max(woken) if woken else None}


def rewrite_files(d, cls, n, version):
    for i in range(1, n):
        with open(os.path.join(d, f"{i}.rb"), "w") as f:
            f.write(script(cls, i, version))


def rewrite_all(s, which, n, version):
    """In a process of its own: a writer thread in the client's process
    held the interpreter lock from the client, whose longest waits during
    the rewrite (76 ms at 10,000 scripts, with the worker's response
    written 0.8 ms after the request) were then its own."""
    p = multiprocessing.get_context("fork").Process(
        target=rewrite_files,
        args=(os.path.join(s.docroot, "s"), CLASS[which], n, version))
    p.start()
    p.join()
    if p.exitcode != 0:
        raise RuntimeError(f"rewriting the scripts failed: {p.exitcode}")


def wrk_rps(url):
    out = subprocess.run(["wrk", "-t1", "-c20", f"-d{WRK_SECONDS}s", url],
                         capture_output=True, text=True, check=True).stdout
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def edits_ratio(s, which, n):
    cls = CLASS[which]
    d = os.path.join(s.docroot, "s")
    ratios = []
    for _ in range(3):
        quiet = wrk_rps(s.url("/s/0.rb"))
        stop = threading.Event()

        def editor():
            k = 0
            while not stop.is_set():
                i = random.randrange(1, n)
                with open(os.path.join(d, f"{i}.rb"), "w") as f:
                    f.write(script(cls, i, 1000 + k))
                k += 1
                time.sleep(0.01)     # 100 per second

        t = threading.Thread(target=editor)
        t.start()
        busy = wrk_rps(s.url("/s/0.rb"))
        stop.set()
        t.join()
        ratios.append(busy / quiet)
    return statistics.median(ratios)


def run_one(which, n):
    print(f"{which} N={n}: writing scripts", flush=True)
    s = make_server(which, n)
    try:
        t0 = time.monotonic()
        s.start()
        startup = time.monotonic() - t0
        requests.get(s.url("/s/0.rb"), timeout=30)
        warm_up(s)
        rss0 = worker_rss_kb(s)
        print(f"{which} N={n}: requesting every script", flush=True)
        t0 = time.monotonic()
        request_all(s, n)
        first_all = time.monotonic() - t0
        rss1 = worker_rss_kb(s)
        print(f"{which} N={n}: edits", flush=True)
        windows = []
        edit, trace = traced(s, which,
                             lambda: measure_edit(s, which, n, windows))
        worker = {}
        if trace is not None:
            share = worker_share(trace, windows)
            worker["edit_ms"] = statistics.median(w for w, _ in share)
            worker["edit_max_ms"] = max(w for w, _ in share)
            worker["edit_cpu_ms"] = statistics.median(c for _, c in share)
            worker["edit_cpu_max_ms"] = max(c for _, c in share)
        quiet = longest_wait(s, seconds=3)
        quiet.pop("max_window")
        deploy, trace = traced(s, which, lambda: longest_wait(
            s, during=lambda: rewrite_all(s, which, n, 7)))
        if trace is not None:
            worker["rewrite"] = worker_stall(trace, deploy)
        else:
            deploy.pop("max_window")
        ratio = edits_ratio(s, which, n)
        log = s.error_log()
        limits = re.findall(r"inotify watches[^\n]*", log)
        return {"server": which, "n": n, "startup_s": startup,
                "first_run_all_s": first_all,
                "rss_per_script_bytes": (rss1 - rss0) * 1024 / n,
                "edit": edit, "quiet_wait": quiet, "deploy_wait": deploy,
                "edits_100_per_s_ratio": ratio, "worker": worker,
                "load": os.getloadavg()[0],
                "log_limits": limits[:1]}
    finally:
        s.stop()
        s.remove()


def render(results):
    rows = sorted(results, key=lambda r: (r["server"], r["n"]))
    out = ["## The file watch at hosting scale (`make bench-watch`)", "",
           "N `stat` scripts in one directory, each run by the URI that "
           "names it (nginx `mruby_add_handler`, one worker; Apache "
           "`mruby-script`, event MPM, one child with its watcher thread), "
           "from `bench/watch_scale.py`.  Latencies are a Python client's "
           "on the same 2 loaded cores (its own overhead included): compare "
           "within a row.  RSS per script: the worker's growth while every "
           "script runs once, after a warm-up that made its interpreters.  "
           "The edited script's request is repeated until the new version "
           "answers (Apache's window: the stale answers among 20 edits are "
           "counted; nginx must answer at once).", "",
           "| server | N | startup | RSS per script | request after an "
           "edit: edited / unchanged / no edit (median, max) | longest wait "
           "while all N are rewritten (no edits) | wrk on an unchanged "
           "script, 100 edits/s / none |",
           "|---|---:|---:|---:|---|---|---:|"]
    for r in rows:
        e, d, q = r["edit"], r["deploy_wait"], r["quiet_wait"]
        stale = e.get("stale_answers")
        stale = f", {stale} stale" if stale else ""
        out.append(
            f"| {r['server']} | {r['n']:,} | {r['startup_s']:.2f} s | "
            f"{r['rss_per_script_bytes']:,.0f} B | "
            f"{e['edited_ms']:.2f} ms ({e['edited_max_ms']:.1f}{stale}) / "
            f"{e['unchanged_ms']:.2f} ms ({e['unchanged_max_ms']:.1f}) / "
            f"{e['base_ms']:.2f} ms | "
            f"{d['max_ms']:.1f} ms over {d['seconds']:.1f} s "
            f"({q['max_ms']:.1f} ms) | "
            f"{r['edits_100_per_s_ratio']:.3f} |")
    traced_rows = [r for r in rows if r.get("worker")]
    if traced_rows:
        out += ["", "In the nginx worker (`bench/worker_loop.py`: `perf` "
                "traces its `epoll_wait` calls and scheduling; wall-clock "
                "and CPU ms of its loop iterations; the load average is "
                "the machine's when the row ended):", "",
                "| N | load | request after an edit: wall / CPU, median "
                "(max) | while all N are rewritten: longest loop iteration "
                "(its CPU), most CPU in one iteration | the client's "
                "longest wait: the worker read / answered it after (its "
                "wait for a CPU) |",
                "|---:|---:|---|---|---|"]
        for r in traced_rows:
            w, d = r["worker"], r["worker"].get("rewrite", {})
            ms = [d.get(k) for k in ("slowest_read_after_ms",
                                      "slowest_written_after_ms",
                                      "slowest_cpu_wait_ms")]
            ms = ["-" if v is None else f"{v:.1f}" for v in ms]
            after = f"{ms[0]} / {ms[1]} ms ({ms[2]})"
            out.append(
                f"| {r['n']:,} | {r.get('load', 0):.1f} | "
                f"{w['edit_ms']:.2f} / {w['edit_cpu_ms']:.2f} ms "
                f"({w['edit_max_ms']:.2f} / {w['edit_cpu_max_ms']:.2f}) | "
                f"{d['longest_ms']:.1f} ms ({d['longest_cpu_ms']:.1f}), "
                f"{d['most_cpu_ms']:.1f} ms | "
                f"{r['deploy_wait']['max_ms']:.1f} ms: {after} |")
    out += ["", "![cost against the number of scripts](img/"
            "watch_scale.png)", ""]
    with open(os.path.join(HERE, "watch_scale_notes.md")) as f:
        out.append(f.read().rstrip("\n"))
    out.append("")
    with open(SECTION, "w") as f:
        f.write("\n".join(out) + "\n")
    plot(rows)
    splice()


def plot(rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for which in SERVERS:
        rs = [r for r in rows if r["server"] == which]
        if not rs:
            continue
        ns = [r["n"] for r in rs]
        ax.plot(ns, [r["edit"]["edited_ms"] for r in rs], "o-",
                label=f"{which}: request after an edit (median)")
        ax.plot(ns, [r["deploy_wait"]["max_ms"] for r in rs], "s--",
                label=f"{which}: longest wait, all N rewritten")
        rs = [r for r in rs if r.get("worker")]
        if rs:
            ns = [r["n"] for r in rs]
            ax.plot(ns, [r["worker"]["edit_ms"] for r in rs], "o:",
                    label=f"{which} worker: request after an edit")
            ax.plot(ns, [r["worker"]["rewrite"]["longest_ms"] for r in rs],
                    "s:", label=f"{which} worker: longest loop iteration, "
                    "all N rewritten")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("scripts watched")
    ax.set_ylabel("ms")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(PLOT, dpi=100)


def splice():
    """Puts bench/watch_scale.md into docs/benchmarks.md between markers
    that bench/render.py keeps when it rewrites the page."""
    begin, end = "<!-- watch:begin -->", "<!-- watch:end -->"
    with open(SECTION) as f:
        splice_block(DOC, begin, end, f"{begin}\n{f.read()}{end}\n")


def main():
    results = []
    if os.path.exists(RESULTS):
        with open(RESULTS) as f:
            results = json.load(f)
    for which in SERVERS:
        for n in SCALES:
            r = run_one(which, n)
            print(json.dumps(r), flush=True)
            results = [x for x in results
                       if (x["server"], x["n"]) != (which, n)] + [r]
            with open(RESULTS, "w") as f:
                json.dump(results, f, indent=1)
    render(results)


if __name__ == "__main__":
    if sys.argv[1:] == ["--render"]:
        with open(RESULTS) as f:
            render(json.load(f))
    else:
        main()

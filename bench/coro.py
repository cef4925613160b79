#!/usr/bin/env python3
"""make bench, coroutines: the Fiber paper's four experiments for the runs that
wait (machine-stack coroutines) and for mruby's own Fiber, and 1,000
concurrent requests each sleeping 100 ms on one nginx worker, against
lua-nginx-module's ngx.sleep in the same run.

    python3 bench/coro.py              # measure, then render
    python3 bench/coro.py --render     # docs from bench/coro_results.json
    python3 bench/coro.py --counts     # only the callgrind counts and the
                                       # unit benches, into the results
    python3 bench/coro.py --nginx      # only the nginx sleep run, into them
    python3 bench/coro.py --nginx --rounds 5   # 5 interleaved rounds of
                                       # ours and ngx.sleep: median, range

build/coro_bench (bench/coro_bench.c) runs the experiments; every figure
of a pair comes from the same process.  Results go to
bench/coro_results.json, docs/benchmarks.md (between the coro markers) and
docs/img/coro.png.
"""

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "test"))

import valgrind  # noqa: E402
from render import splice_block  # noqa: E402

RESULTS = os.path.join(HERE, "coro_results.json")
DOC = os.path.join(REPO, "docs", "benchmarks.md")
IMG = os.path.join(REPO, "docs", "img", "coro.png")
BIN = os.path.join(REPO, "build", "coro_bench")
UNIT = os.path.join(REPO, "build", "test_core")
UNIT_BENCHES = ["bench_coro_switch", "bench_coro_create_first_switch_from_pool",
                "bench_wait_suspend_resume_from_ruby"]
BEGIN, END = "<!-- coro:begin -->", "<!-- coro:end -->"

LUA_MODULES = ["/usr/lib/nginx/modules/ndk_http_module.so",
               "/usr/lib/nginx/modules/ngx_http_lua_module.so"]


def run_bench(*args):
    out = subprocess.run([BIN] + [str(a) for a in args], check=True,
                         capture_output=True, text=True, timeout=600).stdout
    return json.loads(out.strip().splitlines()[-1])


def experiments():
    res = {"switch": [], "create": [], "max": [], "echo": []}
    for depth in range(0, 11):
        res["switch"].append(run_bench("switch", depth, 300000))
    for size in (1, 2, 5, 10, 20, 50, 64, 100):
        for pool in (1, 0):
            total = 100000 if pool else 10000
            res["create"].append(run_bench("create", size, pool, total))
    for kb in (64, 256):
        res["max"].append(run_bench("max", kb))
    res["echo"].append(run_bench("echo", 64, 64000))
    return res


def callgrind_count(kind, n):
    """Instructions of `coro_bench count KIND N` (valgrind's summary)."""
    return valgrind.program([BIN, "count", kind, str(n)])


def callgrind_counts():
    """Instructions per operation, independent of the machine's load: the
    difference of 120,000 and 20,000 operations, over 100,000."""
    return {kind: (callgrind_count(kind, 120000)
                   - callgrind_count(kind, 20000)) / 100000
            for kind in ("switch", "create", "wait", "call", "fiber")}


def unit_figures(rounds=3):
    """build/test_core's coroutine benches (each the fastest of its
    repetitions), the fastest of `rounds` runs: the least disturbed by the
    machine's other load."""
    best = {}
    for _ in range(rounds):
        out = subprocess.run([UNIT, "--bench"] + UNIT_BENCHES, check=True,
                             capture_output=True, text=True,
                             timeout=600).stdout
        for m in re.finditer(r"^  (\S.*?)\s+([\d.]+) ns$", out, re.M):
            v = float(m.group(2))
            best[m.group(1)] = min(v, best.get(m.group(1), v))
    return best


def counts_and_unit():
    return {"counts": callgrind_counts(), "unit": unit_figures(),
            "unit_load": load_note(),
            "counts_date": datetime.date.today().isoformat()}


def load_note():
    return "load average %.1f, %.1f, %.1f on %d cores" % (
        os.getloadavg() + (os.cpu_count(),))


def wrk(url, conns, seconds):
    out = subprocess.run(["wrk", "-t", "1", "-c", str(conns), "-d",
                          f"{seconds}s", "--latency", "--timeout", "10s",
                          url], check=True, capture_output=True,
                         text=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    m = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    p99 = float(m.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[m.group(2)]
    return rps, p99


def nginx_sleep(rounds=1):
    """1,000 connections, each request sleeping 100 ms, one worker: rounds
    of ours and ngx.sleep interleaved (the one that goes first alternates),
    so that a drift of the machine's load falls on both."""
    import harness
    lua = all(os.path.exists(m) for m in LUA_MODULES)
    n = harness.Nginx(
        "location /mruby { mruby_content_handler_code "
        "'Nginx::Async.sleep 100; Nginx.rputs \"ok\"'; }\n"
        + ("location /lua { content_by_lua_block "
           "{ ngx.sleep(0.1) ngx.print(\"ok\") } }\n" if lua else ""),
        main_conf="worker_rlimit_nofile 8192;",
        modules=LUA_MODULES if lua else (), access_log=False,
        loglevel="warn", worker_connections=4096)
    n.start()
    names = ["mruby", "lua"] if lua else ["mruby"]
    runs = {name: [] for name in names}
    try:
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                wrk(n.url("/" + name), 1000, 2)            # warm-up
                runs[name].append(wrk(n.url("/" + name), 1000, 6))
                print(f"round {r + 1} {name}: {runs[name][-1][0]:,.0f} "
                      f"req/s, p99 {runs[name][-1][1]:.1f} ms",
                      file=sys.stderr)
    finally:
        n.stop()
    res = {}
    for name, v in runs.items():
        rps = [x[0] for x in v]
        p99 = [x[1] for x in v]
        res[name] = {"rps": statistics.median(rps),
                     "p99_ms": statistics.median(p99),
                     "rps_rounds": rps, "p99_rounds": p99}
    return res


def plot(res):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 2, figsize=(10, 7))
    sw = res["switch"]
    a = ax[0][0]
    a.plot([r["depth"] for r in sw], [r["ours"] for r in sw], "o-",
           label="run on a coroutine (Async.sleep 0)")
    a.plot([r["depth"] for r in sw], [r["fiber"] for r in sw], "s-",
           label="mruby Fiber (resume/yield)")
    a.set_title("switch, one way (ns)")
    a.set_xlabel("nested blocks before the switch")
    a.set_ylim(bottom=0)
    a.legend(fontsize=7)

    a = ax[0][1]
    for pool, style in ((1, "o-"), (0, "^-")):
        rows = [r for r in res["create"] if r["pool"] == pool]
        a.plot([r["size"] for r in rows], [r["ours"] for r in rows], style,
               label="coroutine, " + ("pool of 64" if pool else "no pool"))
    rows = [r for r in res["create"] if r["pool"] == 1]
    a.plot([r["size"] for r in rows], [r["fiber"] for r in rows], "s-",
           label="mruby Fiber")
    a.set_xscale("log")
    a.set_yscale("log")
    a.set_title("create + run to the end (ns each)")
    a.set_xlabel("made at a time")
    a.legend(fontsize=7)

    a = ax[1][0]
    labels = [f"coroutine {r['stack_kb']} KB" for r in res["max"]]
    values = [r["ours"] for r in res["max"]]
    labels.append("mruby Fiber")
    values.append(res["max"][0]["fiber"])
    a.bar(labels, values)
    a.set_yscale("log")
    a.set_title("suspended at once in 1 GB of address space")

    a = ax[1][1]
    e = res["echo"][0]
    a.bar(["coroutines\n(C epoll loop)", "mruby Fiber\n(IO.select loop)"],
          [e["ours"], e["fiber"]])
    a.set_title(f"echo, {e['conns']} connections (round trips/s)")

    fig.tight_layout()
    os.makedirs(os.path.dirname(IMG), exist_ok=True)
    fig.savefig(IMG, dpi=80)


def render(res):
    sw = res["switch"]
    cr = res["create"]
    lines = [BEGIN, "",
             "## Coroutines: the Fiber paper's experiments",
             "",
             f"From `bench/coro.py` ({res.get('date', '?')}; "
             f"{res.get('note', '')}). Each pair comes from one process "
             "(`build/coro_bench`, the same interpreter build): a run of a "
             "script on a coroutine (`mrb_wait.c`, suspended by "
             "`Async.sleep 0` and resumed from C) against mruby 3.1's own "
             "`Fiber` (`resume` / `Fiber.yield` in a Ruby loop).",
             "",
             "![coroutines](img/coro.png)",
             "",
             "| nested blocks before the switch | 0 | 5 | 10 |",
             "|---|---:|---:|---:|",
             "| coroutine, ns per switch | "
             + " | ".join(f"{sw[d]['ours']:.0f}" for d in (0, 5, 10)) + " |",
             "| mruby Fiber, ns per switch | "
             + " | ".join(f"{sw[d]['fiber']:.0f}" for d in (0, 5, 10))
             + " |",
             "",
             "| made at a time | "
             + " | ".join(str(r["size"]) for r in cr if r["pool"]) + " |",
             "|---|" + "---:|" * len([r for r in cr if r["pool"]]),
             "| coroutine with the pool, ns each | "
             + " | ".join(f"{r['ours']:.0f}" for r in cr if r["pool"])
             + " |",
             "| coroutine, no pool (mmap, mprotect, munmap) | "
             + " | ".join(f"{r['ours']:.0f}" for r in cr if not r["pool"])
             + " |",
             "| mruby Fiber, ns each | "
             + " | ".join(f"{r['fiber']:.0f}" for r in cr if r["pool"])
             + " |",
             "",
             "| in 1 GB of address space | suspended at once |",
             "|---|---:|"]
    for r in res["max"]:
        lines.append(f"| coroutine, {r['stack_kb']} KB stack | "
                     f"{r['ours']:,} |")
    lines.append(f"| mruby Fiber | {res['max'][0]['fiber']:,} |")
    e = res["echo"][0]
    lines += ["",
              f"Echo over {e['conns']} connections (the Fiber paper's Fig. 11, a "
              "coroutine per connection): "
              f"{e['ours']:,.0f} round trips/s on coroutines woken by a C "
              f"epoll loop, {e['fiber']:,.0f} with mruby Fibers woken by "
              "a Ruby `IO.select` loop (the loops differ too: this is the "
              "whole cost of each way to write such a server, not of the "
              "switch alone)."]
    ns = res.get("nginx")
    if ns:
        nrounds = len(ns["mruby"].get("rps_rounds", [0]))
        lines += ["",
                  "### 1,000 requests at once, each sleeping 100 ms, one "
                  "nginx worker",
                  "",
                  f"| | requests/s, median of {nrounds} | range | "
                  "p99 (ms), median | range |",
                  "|---|---:|---:|---:|---:|"]

        def span(v, fmt):
            return (fmt.format(min(v)) + "-" + fmt.format(max(v))
                    if v else "-")
        for name, label in (("mruby", "`Nginx::Async.sleep 100`"),
                            ("lua", "lua-nginx-module `ngx.sleep(0.1)`")):
            if name in ns:
                x = ns[name]
                lines.append(
                    f"| {label} | {x['rps']:,.0f} | "
                    f"{span(x.get('rps_rounds', []), '{:,.0f}')} | "
                    f"{x['p99_ms']:.1f} | "
                    f"{span(x.get('p99_rounds', []), '{:.1f}')} |")
        ratios = [a / b for a, b in zip(
            ns["mruby"].get("rps_rounds", []),
            ns.get("lua", {}).get("rps_rounds", []))]
        lines.append("")
        lines.append("wrk, 1 thread, 1,000 connections, 6 s after a 2 s "
                     f"warm-up, {nrounds} rounds of each interleaved "
                     "(`python3 bench/coro.py --nginx --rounds "
                     f"{nrounds}`); the limit is 10,000 requests/s"
                     + (f" ({res['nginx_note']})" if res.get("nginx_note")
                        else "") + "."
                     + (" Ours over ngx.sleep's, round by round: "
                        + ", ".join(f"{r:.4f}" for r in ratios)
                        + f" (median {statistics.median(ratios):.4f})."
                        if ratios else ""))
    sw0 = sw[0]["ours"]
    unit = res.get("unit", {})
    counts = res.get("counts")

    def unit_ns(label, target):
        if label not in unit:
            return "not measured"
        v = unit[label]
        return f"{v:.1f} ns" + (": met" if v <= target else ": not met")

    lines += ["", "Against the coroutines' speed targets. The C figures come from "
              "`build/test_core --bench` (each the fastest of 10 repetitions, "
              f"{res.get('unit_load', 'load not recorded')}, "
              f"{res.get('counts_date', '?')}): timings on a shared, loaded "
              "machine, so a lower bound of what a quiet one does rather "
              "than a measurement of it; the instruction counts below do "
              "not depend on the load.", "",
              "| figure | target | here |", "|---|---|---|",
              "| switch, one way | <= 5 ns | "
              + unit_ns("switch, one way (fastest of 10)", 5) + " |",
              "| create + first switch from the pool (C) | <= 25 ns | "
              + unit_ns("create + first switch + finish, from the pool "
                      "(fastest of 10)", 25)
              + " |",
              "| suspend + resume of a request from Ruby | <= 150 ns | "
              + unit_ns("Async.sleep(0) from Ruby: suspend + resume "
                      "(fastest of 10)", 150)
              + f" (`coro_bench switch 0` in the run above: {2 * sw0:.0f} "
              "ns) |"]
    if ns and "mruby" in ns:
        lua_rps = ns.get("lua", {}).get("rps")
        met = ns["mruby"]["rps"] >= 9000 and (lua_rps is None
                                              or ns["mruby"]["rps"] >= lua_rps)
        lines.append(f"| 1,000 x sleep(100 ms), one worker | >= 9,000 req/s "
                     f"and >= ngx.sleep's | {ns['mruby']['rps']:,.0f}"
                     + (f" against {lua_rps:,.0f}" if lua_rps else "")
                     + (": met |" if met else ": not met on this run |"))
    lines += ["| hello world with the machinery built in / without | "
              ">= 0.98 | 0.9975 (about 25 instructions more per request, "
              "callgrind) |"]
    if counts:
        lines += ["", "Instructions per operation (callgrind, `coro_bench "
                  "count KIND N` for 120,000 and 20,000 operations, the "
                  "difference over 100,000; independent of the machine's "
                  "load):", "",
                  "| operation | instructions |", "|---|---:|",
                  f"| switch, one way (half a resume + suspend in C, loop "
                  f"included) | {counts['switch'] / 2:,.1f} |",
                  f"| create from the pool + first switch + run to the end "
                  f"+ stack back | {counts['create']:,.0f} |",
                  f"| `Async.sleep 0` from Ruby, suspend + resume, in a "
                  f"`times` loop | {counts['wait']:,.0f} |",
                  f"| the same loop calling a C method that does not wait "
                  f"(`Bench::Async.nil?`) | {counts['call']:,.0f} |",
                  f"| so the wait itself (method, checks, state switched, "
                  f"two switches) | {counts['wait'] - counts['call']:,.0f} |",
                  f"| mruby `Fiber#resume` + `Fiber.yield` in the same "
                  f"loop | {counts['fiber']:,.0f} |"]
    lines += ["", "Reading them: `coro_bench switch` times a whole "
              "`Async.sleep 0` (the method call, the check that the run may "
              "wait, the arena slice and `mrb->c`/`jmp` saved and "
              "restored, two register switches) and its loop, not the "
              "register switch alone (the first row above). Neither "
              "implementation copies stacks, so "
              "neither depends on the depth. Beyond the 64 stacks the pool "
              "keeps, finished stacks stay on a free list until a trim "
              "(about once a second) unmaps those no run took since the "
              "previous one, so a coroutine is as cheap there as from the "
              "pool; only a stack mapped anew (mmap and mprotect: more "
              "coroutines at once than since the last trim) costs more "
              "than a Fiber. A machine stack reserves "
              "address space: a Fiber needs only its VM stack, hence "
              "the counts (mruby also refuses more than 65,535 fibers "
              "from one block literal: its irep reference count is 16 "
              "bits).", "", END]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--render", action="store_true")
    ap.add_argument("--counts", action="store_true")
    ap.add_argument("--nginx", action="store_true")
    ap.add_argument("--no-nginx", action="store_true")
    ap.add_argument("--note", default="")
    ap.add_argument("--rounds", type=int, default=1,
                    help="nginx sleep rounds of ours and ngx.sleep, "
                         "interleaved")
    args = ap.parse_args()
    if args.render:
        res = json.load(open(RESULTS))
    elif args.counts or args.nginx:
        res = json.load(open(RESULTS))
        if args.counts:
            res.update(counts_and_unit())
        if args.nginx:
            before = load_note()
            res["nginx"] = nginx_sleep(args.rounds)
            res["nginx_note"] = (f"run alone {datetime.date.today()}: "
                                 f"{before} before it, "
                                 f"{os.getloadavg()[0]:.1f} after")
        json.dump(res, open(RESULTS, "w"), indent=1)
    else:
        res = experiments()
        res.update(counts_and_unit())
        if not args.no_nginx:
            res["nginx"] = nginx_sleep(args.rounds)
        res["date"] = datetime.date.today().isoformat()
        res["note"] = args.note or os.uname().nodename
        json.dump(res, open(RESULTS, "w"), indent=1)
    plot(res)
    splice_block(DOC, BEGIN, END, render(res))


if __name__ == "__main__":
    main()

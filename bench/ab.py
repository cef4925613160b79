#!/usr/bin/env python3
"""Two builds of the modules against each other, paired in the same rounds.

    python3 bench/ab.py BEFORE_BUILD AFTER_BUILD apache:forever nginx:cached

BEFORE_BUILD and AFTER_BUILD are build directories (`make all` of two
commits, e.g. a worktree's build/); each SERVER:KEYS names configurations
of bench/run.py's tables (the keys of apache_configs() and
nginx_configs()).  In every round each configuration is measured with one
build and right after with the other (the order alternating from round to
round), every server started afresh, as bench/run.py measures a
configuration next to its reference; the figure is the median over rounds
of after / before.  The environment of bench/run.py applies
(BENCH_ROUNDS, BENCH_SECONDS, BENCH_QUIET_WAIT, ...).  Prints a table and
writes it as JSON to build/ab_results.json.
"""

import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run  # noqa: E402

harness = run.harness


def modules_of(build):
    """The module paths the harness loads, for one build directory."""
    build = os.path.abspath(build)
    return {"MOD_MRUBY": os.path.join(build, "mod_mruby.so"),
            "NGX_HTTP_MRUBY": os.path.join(build, "ngx_http_mruby_module.so"),
            "NGX_STREAM_MRUBY": os.path.join(build,
                                             "ngx_stream_mruby_module.so")}


def missing_module(modules, configs):
    """The first module of a build that configs' servers load and that is
    not there, or None.  Only those: no configuration loads the stream
    module, which a build may lack."""
    needed = {"apache": "MOD_MRUBY", "nginx": "NGX_HTTP_MRUBY"}
    for family in sorted({c.family for c in configs}):
        if not os.path.exists(modules[needed[family]]):
            return modules[needed[family]]
    return None


def measure_with(cfg, modules):
    for name, path in modules.items():
        setattr(harness, name, path)
    return run.measure(cfg)


def configs_named(specs):
    tables = {"apache": run.apache_configs, "nginx": run.nginx_configs}
    chosen = []
    for spec in specs:
        server, _, keys = spec.partition(":")
        if server not in tables or not keys:
            sys.exit(f"ab.py: {spec!r}: expected apache:KEY,... or "
                     "nginx:KEY,...")
        by_key = {c.key: c for c in tables[server]()}
        for key in keys.split(","):
            if key not in by_key:
                sys.exit(f"ab.py: no {server} configuration {key!r} "
                         f"(known: {', '.join(sorted(by_key))})")
            chosen.append(by_key[key])
    return chosen


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    builds = {"before": modules_of(argv[0]), "after": modules_of(argv[1])}
    configs = configs_named(argv[2:])
    for which in builds.values():
        path = missing_module(which, configs)
        if path:
            sys.exit(f"ab.py: {path} is missing: run make all there")
    run.build_hello()
    rows = {c.key: {"label": c.label, "before": [], "after": [],
                    "ratios": [], "cpu_before": [], "cpu_after": [],
                    "cpu_ratios": [], "others_cores": 0.0}
            for c in configs}
    for rnd in range(run.ROUNDS):
        order = ("before", "after") if rnd % 2 == 0 else ("after", "before")
        for cfg in configs:
            got = {}
            for which in order:
                res = measure_with(cfg, builds[which])
                tag = f"  [{rnd + 1}/{run.ROUNDS}] {cfg.label}, {which}"
                if "error" in res:
                    run.log(f"{tag}: {res['error']}")
                    continue
                run.log(f"{tag}: {res['rps']:.0f} req/s")
                got[which] = res
            if len(got) == 2:
                row = rows[cfg.key]
                row["before"].append(got["before"]["rps"])
                row["after"].append(got["after"]["rps"])
                row["ratios"].append(got["after"]["rps"]
                                     / got["before"]["rps"])
                cpu = (got["before"]["server_cpu_us"],
                       got["after"]["server_cpu_us"])
                row["cpu_before"].append(cpu[0])
                row["cpu_after"].append(cpu[1])
                row["cpu_ratios"].append(cpu[1] / cpu[0])
                row["others_cores"] = max(
                    row["others_cores"], got["before"]["others_cores"],
                    got["after"]["others_cores"])
    print("| configuration | req/s before | req/s after | after / before "
          "| range | CPU us a request before | after | after / before "
          "| range | others' CPU |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---|---:|")
    for key, row in rows.items():
        if not row["ratios"]:
            print(f"| {row['label']} | failed | | | | |")
            continue
        row["ratio"] = statistics.median(row["ratios"])
        row["cpu_ratio"] = statistics.median(row["cpu_ratios"])
        med = statistics.median
        print(f"| {row['label']} | {med(row['before']):,.0f} "
              f"| {med(row['after']):,.0f} | {row['ratio']:.3f} "
              f"| {min(row['ratios']):.3f}-{max(row['ratios']):.3f} "
              f"| {med(row['cpu_before']):.1f} | {med(row['cpu_after']):.1f} "
              f"| {row['cpu_ratio']:.3f} | {min(row['cpu_ratios']):.3f}-"
              f"{max(row['cpu_ratios']):.3f} | {row['others_cores']:.2f} |")
    out = os.path.join(run.REPO, "build", "ab_results.json")
    with open(out, "w") as f:
        json.dump({"builds": argv[:2], "rounds": run.ROUNDS,
                   "rows": rows}, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

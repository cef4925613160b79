#!/usr/bin/env python3
"""The figures that compare Debian suites (mruby 3.1, 3.3 and 4.0 with each
suite's nginx and Apache), taken on this machine's packages:

- instructions per request, with callgrind (independent of the load):
  hello world `cache`, inline and `never` on each server
  (bench/callgrind.py),
  hello world `stat` (bench/callgrind_stat.py), a request that sleeps 1 ms
  (bench/callgrind_sleep.py), and the JSON and router scripts of make
  bench's lib section (bench/callgrind_lib.py), with their Lua
  counterparts on the same nginx; and where nginx hello world `cache`'s
  and `never`'s instructions go, object by object and function by
  function
  (callgrind_annotate's top lines), for telling versions apart;
- (wall) make bench's apache and nginx sections: the ratios to the C
  module and to `return 200`, each measured in the same rounds as its
  reference; on a machine that does nothing else.

    make bench-releases bench-releases-wall   # on this machine
    make test-dist DIST=trixie TARGET="deps bench-releases"

Each figure is printed as it is taken; the last line is "releases: " and
the record as JSON.  The tables of several suites side by side:

    build/venv/bin/python bench/releases.py --table LOG...

reads those lines from the logs given (the host's own, and test-dist's
build/test-dist-DIST-deps-bench-releases.log) and writes the tables into
docs/benchmarks.md between its markers.
"""

import argparse
import json
import os
import re
import subprocess
import sys

import callgrind
import callgrind_lib
import callgrind_sleep
import callgrind_stat
import render
import run
import valgrind

import harness

BEGIN, END = "<!-- releases:begin -->", "<!-- releases:end -->"
LIB = ("json-mruby", "json-lua", "router-mruby", "router-lua")
# (key, label) in the order of the table
ROWS = [("nginx cache", "nginx hello world `cache`"),
        ("nginx inline", "nginx hello world inline"),
        ("nginx stat", "nginx hello world `stat`"),
        ("nginx never", "nginx hello world `never` (compiled per request)"),
        ("apache cache", "Apache hello world `cache`"),
        ("apache inline", "Apache hello world inline"),
        ("apache stat", "Apache hello world `stat`"),
        ("apache never", "Apache hello world `never` (compiled per request)"),
        ("sleep-mruby", "nginx, sleep 1 ms (`Nginx::Async.sleep`)"),
        ("sleep-lua", "nginx, sleep 1 ms (`ngx.sleep`, reference)"),
        ("json-mruby", "nginx, JSON parse + generate"),
        ("json-lua", "nginx, JSON with cjson (reference)"),
        ("router-mruby", "nginx, router (10 Regexp tests)"),
        ("router-lua", "nginx, router with ngx.re (reference)")]
OBJECT_ROWS = [
    (f"object {case} {obj}", f"nginx hello world `{case}`: in {where}")
    for case in ("cache", "never")
    for obj, where in (("ngx_http_mruby_module.so", "the module (mruby and "
                        "ours)"), ("nginx", "nginx"), ("libc.so.6", "libc"))]


def package_version(name):
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", name],
                         capture_output=True, text=True)
    return out.stdout.strip() or "?"


def platform():
    codename = "?"
    with open("/etc/os-release") as f:
        for line in f:
            if line.startswith("VERSION_CODENAME="):
                codename = line.split("=", 1)[1].strip().strip('"')
    return {"suite": codename, "mruby": package_version("libmruby-dev"),
            "nginx": package_version("nginx"),
            "apache": package_version("apache2-bin"),
            "oniguruma": package_version("libonig-dev")}


def hello_world(kind, case):
    s, cmd = callgrind.server(kind, case)
    try:
        return valgrind.per_request(
            lambda n: [callgrind.instructions(s, cmd, n, case)], 1000,
            3000)[0]
    finally:
        s.remove()


def profile(kind, case, lines=25):
    """Where 2,000 hello world requests of case (after 300 of warm-up)
    spend their instructions: prints the top functions, and returns the
    instructions per request of each object (the module, the server,
    libc, ...)."""
    s, cmd = callgrind.server(kind, case)
    out = os.path.join(callgrind_lib.OUT, f"hello-{kind}-{case}.out")
    try:
        valgrind.counted(s, cmd, "/hello", 300, 2000, out)
    finally:
        s.remove()
    table = subprocess.run(["callgrind_annotate", "--inclusive=no",
                            "--threshold=100", "--auto=no", out + ".1"],
                           capture_output=True, text=True,
                           check=True).stdout
    rows, objects = [], {}
    for line in table.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*([\d.]+)%\)\s+(.*) \[(.*)\]$",
                     line)
        # The frames on the stack when the counters were zeroed (main,
        # the event loop) show their callees' cost as their own.
        if not m or float(m.group(2)) >= 50:
            continue
        rows.append(line.strip())
        obj = os.path.basename(m.group(4))
        objects[obj] = objects.get(obj, 0) + int(m.group(1).replace(",", ""))
    if not rows:
        print(f"profile {kind} {case}: no function in callgrind_annotate's "
              "output (its format changed?)", flush=True)
    for line in rows[:lines]:
        print(f"profile {kind} {case}: {line}", flush=True)
    per = {obj: round(ir / 2000) for obj, ir in objects.items()
           if ir >= 2000}
    print(f"objects {kind} {case}: {json.dumps(per)}", flush=True)
    return per


def lib_configs():
    for key, _, configs in run.lib_workloads():
        for cfg in configs:
            if f"{key}-{cfg.key}" in LIB:
                yield f"{key}-{cfg.key}", cfg


def instruction_figures():
    """{row key: instructions per request}, printing each as it comes."""
    figures = {}

    def took(key, value):
        figures[key] = round(value)
        print(f"{key}: {value:,.0f} instructions per request", flush=True)

    for kind in ("nginx", "apache"):
        for case in ("cache", "inline", "never"):
            took(f"{kind} {case}", hello_world(kind, case))
        took(f"{kind} stat", callgrind_stat.callgrind(kind, "stat")[0])
    for name in ("mruby", "lua"):
        took(f"sleep-{name}", valgrind.per_request(
            lambda n: callgrind_sleep.callgrind_run("/" + name, n),
            300, 900)[0])
    os.makedirs(callgrind_lib.OUT, exist_ok=True)
    for name, cfg in lib_configs():
        took(name, callgrind_lib.instructions(
            cfg, os.path.join(callgrind_lib.OUT, f"{name}.out")))
    return figures


def wall_row(c):
    """A row of make bench's table as (label, median ratio, lowest and
    highest round), or with the error of a config that was never
    measured."""
    if "ratio" not in c or not c.get("ratio_runs"):
        return {"key": c["key"], "label": c["label"],
                "error": c.get("error", "not measured")}
    return {"key": c["key"], "label": c["label"],
            "ratio": round(c["ratio"], 3),
            "low": round(min(c["ratio_runs"]), 3),
            "high": round(max(c["ratio_runs"]), 3)}


def wall_cell(c):
    if c is None:
        return ""
    if "error" in c:
        return "failed"
    return f"{c['ratio']:.3f} ({c['low']:.2f}-{c['high']:.2f})"


def wall_figures():
    """make bench's apache and nginx sections, a wall_row per config."""
    run.build_hello()
    out = {}
    for sec in ("apache", "nginx"):
        out[sec] = [wall_row(c) for c in run.run_section(sec)]
        for c in out[sec]:
            print(f"{sec} {c['label']}: {wall_cell(c)}", flush=True)
    return out


def measure(what):
    record = platform()
    print("platform: " + json.dumps(record), flush=True)
    if what == "instructions":
        record["instructions"] = instruction_figures()
        # nginx only: callgrind_control's dump hangs on an apache2 -X
        # that switched to www-data (bench/callgrind_stat.py)
        record["objects"] = {"nginx": profile("nginx", "cache"),
                             "nginx never": profile("nginx", "never")}
    else:
        record["rounds"], record["seconds"] = run.ROUNDS, run.SECONDS
        record["wall"] = wall_figures()
    print("releases: " + json.dumps(record, sort_keys=True), flush=True)


def records(logs):
    """One record per suite, oldest mruby first: the "releases: " records
    of the logs, a later one's parts replacing an earlier one's."""
    suites = {}
    for path in logs:
        n = 0
        with open(path, errors="replace") as f:
            for line in f:
                at = line.find("releases: {")
                if at >= 0:
                    r = json.loads(line[at + len("releases: "):])
                    suites.setdefault(r["suite"], {}).update(r)
                    n += 1
        if n == 0:
            sys.exit(f"releases: no record in {path}")
    return sorted(suites.values(), key=lambda r: [
        int(n) for n in re.findall(r"\d+", r["mruby"].split("-")[0])])


def column(r):
    return f"mruby {r['mruby'].split('-')[0]} ({r['suite']})"


def figure(record, key):
    """A row's figure in a record: instructions of a case, or of an object
    in nginx hello world of a case (key "object CASE NAME")."""
    if key.startswith("object "):
        _, case, obj = key.split(" ", 2)
        return record.get("objects", {}).get(
            "nginx" if case == "cache" else "nginx " + case, {}).get(obj)
    return record["instructions"].get(key)


def instruction_table(recs):
    recs = [r for r in recs if "instructions" in r]
    if not recs:
        return []
    base = {key: figure(recs[0], key) for key, _ in ROWS + OBJECT_ROWS}
    lines = ["| instructions per request | "
             + " | ".join(column(r) for r in recs) + " |",
             "|---|" + "---:|" * len(recs)]
    for key, label in ROWS + OBJECT_ROWS:
        cells = []
        for i, r in enumerate(recs):
            v = figure(r, key)
            if v is None:
                cells.append("")
            elif i == 0 or not base.get(key):
                cells.append(f"{v:,}")
            else:
                cells.append(f"{v:,} ({(v / base[key] - 1) * 100:+.1f}%)")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def wall_table(recs, sec, ref):
    with_wall = [r for r in recs if "wall" in r]
    if not with_wall:
        return []
    labels = []
    for r in with_wall:
        for c in r["wall"][sec]:
            if c["label"] not in labels:
                labels.append(c["label"])
    lines = [f"| {sec}: ratio to {ref} (lowest-highest round) | "
             + " | ".join(column(r) for r in with_wall) + " |",
             "|---|" + "---:|" * len(with_wall)]
    for label in labels:
        cells = []
        for r in with_wall:
            cells.append(wall_cell(next(
                (c for c in r["wall"][sec] if c["label"] == label), None)))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines + [""]


def table(logs, commit):
    recs = records(logs)
    versions = "; ".join(
        f"{r['suite']}: mruby {r['mruby']}, nginx {r['nginx']}, Apache "
        f"{r['apache']}, Oniguruma {r['oniguruma']}" for r in recs)
    text = [BEGIN, "", "### Per Debian suite (bench/releases.py)", "",
            "Each suite's own packages, measured in its root by `make "
            "test-dist DIST=... TARGET=\"deps bench-releases\"` (this host "
            f"for bookworm), the tree at {commit}: " + versions + ".  "
            "Instructions with callgrind "
            "(one server process, one keep-alive connection); a "
            "percentage is against the first column.  A difference is "
            "mruby's and the server's together.", ""]
    counts = instruction_table(recs)
    if counts:
        text += counts + [""]
    text += wall_table(recs, "apache", "the C module")
    text += wall_table(recs, "nginx", "`return 200`")
    walls = sorted({(r["rounds"], r["seconds"]) for r in recs
                    if "rounds" in r})
    if walls:
        text += ["The ratios: make bench's sections ("
                 + ", ".join(f"{n} rounds of {t} s" for n, t in walls)
                 + "), each suite's run alone on the machine.", ""]
    text.append(END)
    render.splice_block(run.DOC, BEGIN, END, "\n".join(text) + "\n")
    print("\n".join(text))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", nargs="?", default="instructions",
                    choices=("instructions", "wall"))
    ap.add_argument("--table", nargs="+", metavar="LOG",
                    help="write the tables of these logs' records")
    ap.add_argument("--commit",
                    help="the commit the logs measured (default: HEAD)")
    args = ap.parse_args()
    if args.table:
        table(args.table, args.commit or run.run_params()["commit"])
    else:
        print(f"build: {harness.BUILD}", flush=True)
        measure(args.what)
    return 0


if __name__ == "__main__":
    sys.exit(main())

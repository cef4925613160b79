#!/usr/bin/env python3
"""make bench: throughput, memory and limiter figures of mod_mruby/ngx_mruby.

Every throughput figure is a ratio to a reference measured in the same run:
the C module bench/mod_hello.c for Apache, `return 200` for nginx.  Servers
are started by test/harness.py on 127.0.0.1; the load is wrk on loopback,
keep-alive, 100 connections.  Results are merged into bench/results.json
and rendered to docs/benchmarks.md with plots in docs/img/.

    python3 bench/run.py                       # everything (~40 min)
    python3 bench/run.py --sections apache,nginx
    python3 bench/run.py --render              # docs from results.json only
    BENCH_QUICK=1 python3 bench/run.py         # a smoke run (~3 min)

Sections: apache, nginx (Table 2 and its nginx twin), fig8 (the mod_mruby paper's Fig. 8:
worker RSS over 60,000 requests), rss (RSS over 1,000,000 requests per
mode), memory (what one interpreter adds to an Apache child), limiter
(the access-limiter post's table), incr (SharedDict#incr under 2-process contention),
lib (a 10-regexp router and JSON parse + generate of a 1 KB
document on nginx, ngx_mruby against lua-nginx-module doing the same,
bench/lib_*.rb and bench/lib_*.lua), typical (bench/typical.rb: five
header reads, a SharedDict#incr, two response headers and an interpolated
body, against lua-nginx-module on nginx and mod_lua on Apache doing the
same).

Environment: BENCH_SECONDS (per measurement, default 6), BENCH_ROUNDS
(rounds, each config measured next to a reference run of its own, median
of the ratios taken, default 5), BENCH_WARMUP (seconds,
default 2), BENCH_THREADS (wrk threads, default 1: wrk and the server share
the machine's 2 cores; 1 measured slightly faster than 2 for both servers),
BENCH_CONNECTIONS (default 100), BENCH_RSS_REQUESTS (default 1,000,000),
BENCH_QUIET_WAIT (seconds to wait before a measurement for the machine to
become idle, default 90), BENCH_RETRIES (measurements taken again when
other processes used the CPU meanwhile, default 2; on a machine that is
never idle, 0 and a short wait keep a run's length bounded),
BENCH_QUICK=1 (2 s, 1 round, 100,000 requests for RSS).
"""

import argparse
import datetime
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "test"))

import harness  # noqa: E402
import render  # noqa: E402
from requests import RequestException  # noqa: E402

QUICK = os.environ.get("BENCH_QUICK") == "1"


def env_num(name, default, kind=int):
    v = os.environ.get(name)
    return kind(v) if v else default


SECONDS = env_num("BENCH_SECONDS", 2 if QUICK else 6)
ROUNDS = env_num("BENCH_ROUNDS", 1 if QUICK else 5)
WARMUP = env_num("BENCH_WARMUP", 1 if QUICK else 2)
THREADS = env_num("BENCH_THREADS", 1)
CONNECTIONS = env_num("BENCH_CONNECTIONS", 100)
RSS_REQUESTS = env_num("BENCH_RSS_REQUESTS", 100_000 if QUICK else 1_000_000)
FIG8_REQUESTS = env_num("BENCH_FIG8_REQUESTS", 60_000)

BUILD_BENCH = os.path.join(harness.BUILD, "bench")
HELLO_SO = os.path.join(BUILD_BENCH, "mod_hello.so")
RESULTS = os.path.join(HERE, "results.json")
DOC = os.path.join(REPO, "docs", "benchmarks.md")
IMG = os.path.join(REPO, "docs", "img")

NGX_MODULES = "/usr/lib/nginx/modules"
NGX_LUA = (os.path.join(NGX_MODULES, "ndk_http_module.so"),
           os.path.join(NGX_MODULES, "ngx_http_lua_module.so"))

BODY = "hello world\n"


def log(msg):
    print(msg, flush=True)


# ---------------------------------------------------------------------------
# The C reference module

def build_hello():
    """Builds bench/mod_hello.c with apxs's flags into build/bench/."""
    src = os.path.join(HERE, "mod_hello.c")
    if (os.path.exists(HELLO_SO)
            and os.path.getmtime(HELLO_SO) >= os.path.getmtime(src)):
        return
    os.makedirs(BUILD_BENCH, exist_ok=True)

    def q(var):
        return subprocess.run(["apxs", "-q", var], capture_output=True,
                              text=True, check=True).stdout.split()
    apr = subprocess.run(["pkg-config", "--cflags", "apr-1", "apr-util-1"],
                         capture_output=True, text=True).stdout.split()
    cmd = (["gcc", "-O2", "-fPIC", "-shared", "-Wall", "-Wextra",
            "-Wno-unused-parameter", "-Wno-missing-field-initializers"]
           + q("CFLAGS") + q("EXTRA_CPPFLAGS") + ["-I" + q("INCLUDEDIR")[0]]
           + apr + ["-o", HELLO_SO, src])
    log("building " + HELLO_SO)
    subprocess.run(cmd, check=True)


# ---------------------------------------------------------------------------
# Configurations

class Config:
    """One server setup to measure: make() returns a harness server that is
    not started yet; path is the URL wrk loads."""

    def __init__(self, key, label, family, make, path="/hello",
                 expect=BODY, note="", check=None, headers=None):
        self.key, self.label, self.family = key, label, family
        self.make, self.path, self.expect, self.note = make, path, expect, note
        self.check = check  # body (bytes) -> True if right
        self.headers = headers or {}  # sent with every request


# Each child can hold every wrk connection: with fewer threads than
# connections, an event child that gets more than its share closes idle
# keep-alive connections, which wrk counts as read errors.
EVENT_BENCH = """\
StartServers 2
ServerLimit 2
ThreadsPerChild 128
ThreadLimit 128
MinSpareThreads 128
MaxSpareThreads 256
MaxRequestWorkers 256
MaxConnectionsPerChild 0
"""


# Set by a section to run the same configurations on another MPM.
APACHE_OVERRIDES = {}


def apache_server(conf, files=None, docs=None, mruby=False, modules=(),
                  mpm="event", **kw):
    kw.setdefault("loglevel", "warn")
    if "mpm" in APACHE_OVERRIDES:
        mpm = APACHE_OVERRIDES["mpm"]
        kw["mpm_conf"] = APACHE_OVERRIDES["mpm_conf"]
    if mpm == "event":
        kw.setdefault("mpm_conf", EVENT_BENCH)
    a = harness.Apache(conf, mpm=mpm, modules=modules, mruby=mruby,
                       access_log=False, name="bench", **kw)
    for rel, content in (files or {}).items():
        a.write(rel, content)
    for rel, content in (docs or {}).items():
        a.write_doc(rel, content)
    return a


def nginx_server(conf, files=None, docs=None, mruby=False, modules=(),
                 workers=2, **kw):
    kw.setdefault("loglevel", "warn")
    n = harness.Nginx(conf, workers=workers, mruby=mruby, modules=modules,
                      access_log=False, name="bench", **kw)
    for rel, content in (files or {}).items():
        n.write(rel, content)
    for rel, content in (docs or {}).items():
        n.write_doc(rel, content)
    return n


APACHE_RB = 'Apache.rputs "hello world\\n"\n'
NGINX_RB = 'Nginx.rputs "hello world\\n"\n'
LUA_APACHE = """\
function handle(r)
    r.content_type = "text/plain"
    r:puts("hello world\\n")
    return apache2.OK
end
"""
PERL_HELLO = """\
package Hello;
use strict;
use warnings;
use Apache2::RequestRec ();
use Apache2::RequestIO ();
use Apache2::Const -compile => qw(OK);

sub handler {
    my $r = shift;
    $r->content_type('text/plain');
    $r->print("hello world\\n");
    return Apache2::Const::OK;
}
1;
"""

C_HELLO_CONF = "<Location /hello>\n    SetHandler hello\n</Location>\n"


def apache_configs():
    hello_mod = [("hello", HELLO_SO)]

    def mruby_file(extra, flag=""):
        return lambda: apache_server(
            f"<Location /hello>\n{extra}"
            f"    mrubyHandlerMiddle {{dir}}/hello.rb{flag}\n</Location>\n",
            files={"hello.rb": APACHE_RB}, mruby=True)

    return [
        Config("c", "C module (mod_hello)", "apache",
               lambda: apache_server(C_HELLO_CONF, modules=hello_mod)),
        Config("static", "static file (Apache's defaults)", "apache",
               lambda: apache_server("", docs={"hello.txt": BODY}),
               path="/hello.txt",
               note="EnableMMAP On: an mmap/munmap per request, costly "
                    "with many threads"),
        Config("static_nommap", "static file, EnableMMAP Off", "apache",
               lambda: apache_server("EnableMMAP Off\n",
                                     docs={"hello.txt": BODY}),
               path="/hello.txt"),
        Config("forever", "mod_mruby `cache` (forever)", "apache",
               mruby_file("", " cache")),
        Config("inline", "mod_mruby inline mrubyHandlerCode", "apache",
               lambda: apache_server(
                   "<Location /hello>\n    SetHandler mruby-native-script\n"
                   "    mrubyHandlerCode 'Apache.rputs \"hello world\\n\"'\n"
                   "</Location>\n", mruby=True)),
        Config("stat", "mod_mruby `stat` (default)", "apache",
               mruby_file("")),
        Config("never", "mod_mruby `never` (compile per request)", "apache",
               mruby_file("    mrubyCodeCache never\n")),
        Config("lua_once", "mod_lua, LuaScope once", "apache",
               lambda: apache_server(
                   "LuaScope once\n"
                   "LuaMapHandler ^/hello$ {dir}/hello.lua\n",
                   files={"hello.lua": LUA_APACHE}, modules=["lua"])),
        Config("lua_server", "mod_lua, LuaScope server + LuaCodeCache forever",
               "apache",
               lambda: apache_server(
                   "LuaScope server 1 64\nLuaCodeCache forever\n"
                   "LuaMapHandler ^/hello$ {dir}/hello.lua\n",
                   files={"hello.lua": LUA_APACHE}, modules=["lua"])),
        Config("perl", "mod_perl, PerlResponseHandler", "apache",
               lambda: apache_server(
                   "PerlSwitches -I{dir}/perl\n"
                   "<Location /hello>\n    SetHandler modperl\n"
                   "    PerlResponseHandler Hello\n</Location>\n",
                   files={"perl/Hello.pm": PERL_HELLO}, modules=["perl"]),
               note="Debian's default interpreter pool"),
    ]


def nginx_configs():
    def mruby_loc(directive):
        return lambda: nginx_server(
            f"location = /hello {{\n    {directive}\n}}\n",
            files={"hello.rb": NGINX_RB}, mruby=True)

    return [
        Config("return", "return 200", "nginx",
               lambda: nginx_server(
                   'location = /hello { return 200 "hello world\\n"; }\n')),
        Config("static", "static file", "nginx",
               lambda: nginx_server("location / { }\n",
                                    docs={"hello.txt": BODY}),
               path="/hello.txt"),
        Config("cached", "ngx_mruby content handler `cache`", "nginx",
               mruby_loc("mruby_content_handler {dir}/hello.rb cache;")),
        Config("inline", "ngx_mruby mruby_content_handler_code", "nginx",
               mruby_loc("mruby_content_handler_code "
                         "'Nginx.rputs \"hello world\\n\"';")),
        Config("stat", "ngx_mruby content handler `stat` (default)", "nginx",
               mruby_loc("mruby_content_handler {dir}/hello.rb;")),
        Config("never", "ngx_mruby content handler `never`", "nginx",
               mruby_loc("mruby_cache never;\n"
                         "    mruby_content_handler {dir}/hello.rb;")),
        Config("lua", "lua-nginx-module content_by_lua_block", "nginx",
               lambda: nginx_server(
                   "location = /hello {\n    default_type text/plain;\n"
                   "    content_by_lua_block { ngx.print(\"hello world\\n\") }"
                   "\n}\n", modules=NGX_LUA)),
    ]


# ---------------------------------------------------------------------------
# wrk

# Set by a section: more wrk arguments for every run in it.
WRK_EXTRA = []


def wrk(url, seconds, threads=None, connections=None, script=None,
        headers=None):
    """Runs wrk (with headers, a dict, sent in every request); returns {'rps', 'requests', 'non2xx', 'errors', 'p50_ms',
    'p99_ms'} or raises RuntimeError with its output."""
    threads = threads or THREADS
    connections = connections or CONNECTIONS
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s",
           "--latency", "--timeout", "10s"] + WRK_EXTRA
    for name, value in (headers or {}).items():
        cmd += ["-H", f"{name}: {value}"]
    if script:
        cmd += ["-s", script]
    p = subprocess.run(cmd + [url], capture_output=True, text=True,
                       timeout=seconds + 60)
    out = p.stdout + p.stderr
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if p.returncode != 0 or not m:
        raise RuntimeError(f"wrk failed ({p.returncode}): {out[-500:]}")
    res = {"rps": float(m.group(1))}
    m = re.search(r"(\d+) requests in", out)
    res["requests"] = int(m.group(1)) if m else 0
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    res["non2xx"] = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), "
                  r"timeout (\d+)", out)
    res["errors"] = sum(int(x) for x in m.groups()) if m else 0
    for pct, key in (("50%", "p50_ms"), ("99%", "p99_ms")):
        m = re.search(rf"\s{pct}\s+([\d.]+)(us|ms|s)\b", out)
        if m:
            scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]
            res[key] = float(m.group(1)) * scale
    return res


def first_line(text, limit=160):
    for line in str(text).splitlines():
        line = line.strip()
        if line:
            return line[:limit]
    return ""


def start_checked(cfg):
    """Starts cfg's server and checks one response; returns (server, None)
    or (None, why)."""
    try:
        server = cfg.make()
    except harness.HarnessError as e:
        return None, f"not available: {first_line(e)}"
    try:
        server.start()
    except harness.HarnessError as e:
        msg = str(e)
        # The useful line is the config/error-log line, not our banner.
        why = [ln for ln in msg.splitlines()
               if re.search(r"error|emerg|Syntax|Invalid|unknown", ln, re.I)]
        server.remove()
        return None, "did not start: " + first_line(why[0] if why else msg)
    try:
        r = server.get(cfg.path, headers=cfg.headers)
        ok = (r.status_code == 200
              and (cfg.expect is None or r.text == cfg.expect)
              and (cfg.check is None or cfg.check(r.content)))
        if not ok:
            why = f"wrong response: {r.status_code} {r.text[:60]!r}"
            stop(server)
            return None, why
    except Exception as e:  # connection reset, timeout: report it
        stop(server)
        return None, f"no response: {first_line(e)}"
    return server, None


def stop(server):
    try:
        server.stop()
    except harness.HarnessError as e:
        log(f"  stop: {first_line(e)}")
    server.remove()


def cpu_ticks():
    """(busy, total) clock ticks of the whole machine since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)  # idle and iowait are not busy


def proc_ticks(pids):
    """utime + stime clock ticks of the given processes."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(")") + 2:].split()
        total += int(fields[11]) + int(fields[12])
    return total


def cpu_busy(seconds=0.5):
    """Fraction of the machine's CPU time that was busy over `seconds`."""
    b0, t0 = cpu_ticks()
    time.sleep(seconds)
    b1, t1 = cpu_ticks()
    return (b1 - b0) / max(t1 - t0, 1)


QUIET = 0.15       # busier than this before a measurement: someone else runs
NOISY = 0.10       # cores used by others during a measurement: measure again
RETRIES = env_num("BENCH_RETRIES", 2)
QUIET_WAIT = env_num("BENCH_QUIET_WAIT", 10 if QUICK else 90)


def wait_quiet(limit=QUIET_WAIT):
    """Waits (up to limit s) until nothing else keeps the CPU busy, so a
    build or test run on the same machine does not land in one config's
    measurement; returns the load seen last."""
    deadline = time.monotonic() + limit
    busy = cpu_busy()
    while busy > QUIET and time.monotonic() < deadline:
        busy = cpu_busy(2)
    return busy


def measured_wrk(server, url, headers):
    """wrk for SECONDS, plus the CPU (in cores) that processes other than
    the server and wrk used meanwhile: what a busy machine took away."""
    pids = [server.master_pid()] + server.worker_pids()
    usage0 = os.times()
    ours0, (busy0, _) = proc_ticks(pids), cpu_ticks()
    t0 = time.monotonic()
    res = wrk(url, SECONDS, headers=headers)
    elapsed = time.monotonic() - t0
    ours1, (busy1, _) = proc_ticks(pids), cpu_ticks()
    usage1 = os.times()
    hz = os.sysconf("SC_CLK_TCK")
    wrk_cpu = ((usage1.children_user - usage0.children_user)
               + (usage1.children_system - usage0.children_system))
    others = ((busy1 - busy0) - (ours1 - ours0)) / hz - wrk_cpu
    res["others_cores"] = round(max(others, 0) / elapsed, 3)
    # The server's own CPU per request depends less on what else runs than
    # its req/s does: a build next to it takes cores, not instructions.
    if res.get("requests"):
        res["server_cpu_us"] = round((ours1 - ours0) / hz * 1e6
                                     / res["requests"], 2)
    return res


def measure(cfg):
    for attempt in range(RETRIES + 1):
        res = measure_once(cfg)
        if ("error" in res or res["others_cores"] <= NOISY
                or attempt == RETRIES):
            break
        log(f"    others used {res['others_cores']:.2f} cores meanwhile: "
            "measuring again")
    res["attempts"] = attempt + 1
    return res


def measure_once(cfg):
    background = wait_quiet()
    server, why = start_checked(cfg)
    if server is None:
        return {"error": why}
    try:
        url = server.url(cfg.path)
        wrk(url, WARMUP, headers=cfg.headers)
        res = measured_wrk(server, url, cfg.headers)
        res["rss_kb"] = [harness.rss_kb(p) for p in server.worker_pids()]
        res["background"] = round(background, 3)
        if res["non2xx"] or res["errors"]:
            bad = res["non2xx"] + res["errors"]
            if bad > 0.001 * max(res["requests"], 1):
                res["error"] = (f"{res['non2xx']} non-2xx responses, "
                                f"{res['errors']} socket errors")
        return res
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        return {"error": first_line(e)}
    finally:
        stop(server)


def throughput(configs, ref_key):
    """ROUNDS rounds over configs.  Each config is measured right next to a
    measurement of the reference of its own (the reference first in even
    rounds, second in odd ones), and its ratio is the median over rounds of
    its req/s divided by that neighbour's: a pair is seconds apart, while
    the machine (a shared 2-core VM) drifts by several percent over the
    minutes a round takes.  A config that fails to start is not tried
    again; one that fails a run is, and its failures are reported."""
    ref = next(c for c in configs if c.key == ref_key)
    others = [c for c in configs if c.key != ref_key]
    runs = {c.key: {} for c in others}       # key -> {round: result}
    pair_ref = {c.key: {} for c in others}   # key -> {round: ref's result}
    ref_runs = []
    errors = {c.key: [] for c in configs}
    dead = set()
    for rnd in range(ROUNDS):
        # Rotate the order so no config always runs first or last.
        order = others[rnd % len(others):] + others[:rnd % len(others)]
        for cfg in order:
            if cfg.key in dead or ref_key in dead:
                continue
            pair = (ref, cfg) if rnd % 2 == 0 else (cfg, ref)
            got = {}
            for c in pair:
                res = measure(c)
                tag = f"  [{rnd + 1}/{ROUNDS}] {c.label}"
                if "error" in res:
                    errors[c.key].append(res["error"])
                    if not res.get("requests"):  # never served: stop trying
                        dead.add(c.key)
                    log(f"{tag}: {res['error']}")
                    continue
                got[c.key] = res
                log(f"{tag}: {res['rps']:.0f} req/s")
            if ref_key in got:
                ref_runs.append(got[ref_key])
            if cfg.key in got:
                runs[cfg.key][rnd] = got[cfg.key]
                if ref_key in got:
                    pair_ref[cfg.key][rnd] = got[ref_key]
    rows = [throughput_row(ref, ref_runs, errors[ref_key])]
    if ref_runs:
        rows[0]["ratio_runs"] = [1.0] * len(ref_runs)
        rows[0]["ratio"] = 1.0
    for cfg in others:
        row = throughput_row(cfg, list(runs[cfg.key].values()),
                             errors[cfg.key])
        rs, refs = runs[cfg.key], pair_ref[cfg.key]
        pairs = [rs[n]["rps"] / refs[n]["rps"] for n in rs if n in refs]
        if pairs:
            row["ratio_runs"] = pairs
            row["ratio"] = statistics.median(pairs)
        rows.append(row)
    return rows


def throughput_row(cfg, vals, errors):
    """A table row: cfg's measurements summed up (ratios added by the
    caller)."""
    row = {"key": cfg.key, "label": cfg.label, "note": cfg.note,
           "path": cfg.path}
    if errors:
        row["error"] = errors[0]
        row["failed_runs"] = len(errors)
    if vals:
        row["rps_runs"] = [r["rps"] for r in vals]
        row["rps"] = statistics.median(row["rps_runs"])
        row["p99_ms"] = statistics.median(r.get("p99_ms", 0) for r in vals)
        row["background"] = max(r.get("background", 0) for r in vals)
        row["others_cores"] = max(r.get("others_cores", 0) for r in vals)
        row["attempts"] = sum(r.get("attempts", 1) for r in vals)
    return row


# ---------------------------------------------------------------------------
# RSS over many requests

STATUS_APACHE = ("ExtendedStatus On\n<Location /server-status>\n"
                 "    SetHandler server-status\n</Location>\n")
STATUS_NGINX = "location = /nginx_status { stub_status; }\n"


def served(server):
    """Requests the server has answered so far (mod_status/stub_status)."""
    if isinstance(server, harness.Apache):
        t = server.get("/server-status?auto").text
        m = re.search(r"Total Accesses: (\d+)", t)
    else:
        t = server.get("/nginx_status").text
        m = re.search(r"^\s*\d+\s+\d+\s+(\d+)", t, re.M)
    if not m:
        raise RuntimeError(f"no request count in status page: {t[:200]!r}")
    return int(m.group(1))


def rss_run(cfg, requests, connections=None, interval=0.5):
    """Loads cfg until `requests` are served, sampling every worker's RSS.
    Returns {'samples': [[served, {pid: kB}], ...]} or {'error': why}."""
    server, why = start_checked(cfg)
    if server is None:
        return {"error": why}
    samples = []
    stalls = 0
    budget = requests / 2000 + 120  # even at 2k req/s; never unbounded
    p = subprocess.Popen(
        ["wrk", f"-t{THREADS}", f"-c{connections or CONNECTIONS}",
         f"-d{int(budget)}s", "--timeout", "10s", server.url(cfg.path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + budget
        while time.monotonic() < deadline:
            try:
                n = served(server)
            except RequestException:
                # A status request that waits 10 s is itself a finding
                # (recorded); the third ends the run.
                stalls += 1
                if stalls >= 3:
                    raise
                continue
            samples.append([n, {str(pid): harness.rss_kb(pid)
                                for pid in server.worker_pids()}])
            if n >= requests or p.poll() is not None:
                break
            time.sleep(interval)
        ok = bool(samples) and samples[-1][0] >= requests
        errors = None
    except Exception as e:  # the server died under load: report it
        ok, errors = False, first_line(e)
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
        out = p.communicate(timeout=30)[0]
        stop(server)
    res = {"samples": samples}
    if stalls:
        res["stalls"] = stalls
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m and int(m.group(1)):
        res["non2xx"] = int(m.group(1))
    if not ok:
        res["error"] = errors or (
            f"only {samples[-1][0] if samples else 0} of {requests} "
            f"requests served")
    return res


RSS_EVENT_REQUESTS = env_num("BENCH_RSS_EVENT_REQUESTS",
                             50_000 if QUICK else 300_000)


def rss_section():
    """Apache on prefork (4 children, one interpreter each, 4 connections):
    what requests do to an interpreter's process, the figure the target is
    about.  Apache on the event MPM (as in the throughput table) for a
    shorter run: there RSS mostly shows threads creating interpreters.
    nginx: 2 workers, 100 connections."""
    out = {}
    runs = [("apache", RSS_REQUESTS, FIG8_CHILDREN,
             {"mpm": "prefork", "mpm_conf": PREFORK_FIXED}),
            ("apache-event", RSS_EVENT_REQUESTS, None, {}),
            ("nginx", RSS_REQUESTS, None, {})]
    for fam, n, conns, overrides in runs:
        for c in rss_configs():
            if c.family != fam.split("-")[0]:
                continue
            log(f"  {fam} {c.label}")
            APACHE_OVERRIDES.clear()
            APACHE_OVERRIDES.update(overrides)
            try:
                r = rss_run(c, n, connections=conns)
            finally:
                APACHE_OVERRIDES.clear()
            r["growth_kb"] = render.rss_growth(r.get("samples", []))
            r["label"] = c.label
            r["requests_target"] = n
            out[f"{fam}/{c.key}"] = r
            log(f"    growth {r['growth_kb']} kB"
                + (f" ({r['error']})" if "error" in r else ""))
    return out


FIG8_SCRIPT = """\
r = Apache::Request.new
r.filename = "{docroot}/redirect.html"
Apache::return Apache::OK
"""


FIG8_CHILDREN = 4
PREFORK_FIXED = "".join(f"{d} {FIG8_CHILDREN}\n" for d in (
    "StartServers", "MinSpareServers", "MaxSpareServers", "ServerLimit",
    "MaxRequestWorkers")) + "MaxConnectionsPerChild 0\n"


def fig8_configs():
    """Prefork children, as the paper's Apache 2.2: each child has one
    interpreter, so its RSS curve shows what requests do to it (under the
    event MPM the curve would mostly show threads creating theirs)."""

    def make(extra, flag=""):
        def f():
            a = apache_server(
                STATUS_APACHE + extra +
                f"mrubyTranslateNameMiddle {{dir}}/sample.rb{flag}\n",
                mruby=True, docs={"redirect.html": BODY}, mpm="prefork",
                mpm_conf=PREFORK_FIXED)
            a.write("sample.rb", FIG8_SCRIPT.replace("{docroot}", a.docroot))
            return a
        return f
    return [
        Config("forever", "bytecode kept (`cache`)", "apache",
               make("", " cache"), path="/anything"),
        Config("stat", "`stat`", "apache", make(""), path="/anything"),
        Config("never", "compiled and released per request (`never`)",
               "apache", make("mrubyCodeCache never\n"), path="/anything"),
    ]


def rss_configs():
    """The throughput configs with a status page added, per server."""
    out = []
    for cfg in apache_configs():
        if cfg.key in ("c", "forever", "inline", "stat", "never"):
            out.append(with_status(cfg, STATUS_APACHE))
    for cfg in nginx_configs():
        if cfg.key in ("return", "cached", "inline", "stat", "never"):
            out.append(with_status(cfg, STATUS_NGINX))
    return out


def with_status(cfg, status_conf):
    def make():
        s = cfg.make()
        s.conf = status_conf + s.conf
        return s
    return Config(cfg.key, cfg.label, cfg.family, make, cfg.path, cfg.expect)


# ---------------------------------------------------------------------------
# What one interpreter adds to a process

ONE_CHILD = """\
StartServers 1
MinSpareServers 1
MaxSpareServers 1
ServerLimit 1
MaxRequestWorkers 1
MaxConnectionsPerChild 0
"""


# Requests before a child's memory is read: an interpreter's object heap
# gets its second page (1,024 objects, 48 kB) after about 180 hello runs
# and keeps it, so a child that served 10 requests would look smaller than
# one that has been serving for a while.
MEMORY_REQUESTS = 1000


def child_memory(mruby, hit_mruby):
    """Memory of the single prefork child after MEMORY_REQUESTS requests to
    a static file (and as many to a mruby handler if hit_mruby): VmRSS and
    its parts from smaps (see smaps_kb)."""
    conf = ("<Location /hello>\n    mrubyHandlerMiddle {dir}/hello.rb cache\n"
            "</Location>\n") if mruby else ""
    s = apache_server(conf, files={"hello.rb": APACHE_RB}, mruby=mruby,
                      mpm="prefork", mpm_conf=ONE_CHILD,
                      docs={"hello.txt": BODY})
    try:
        s.start()
        for _ in range(MEMORY_REQUESTS):
            s.get("/hello.txt")
            if hit_mruby:
                r = s.get("/hello")
                if r.text != BODY:
                    raise RuntimeError(f"mruby handler answered "
                                       f"{r.status_code} {r.text[:60]!r}")
        time.sleep(0.2)
        pids = s.worker_pids()
        if len(pids) != 1:
            raise RuntimeError(f"expected one child, found {pids}")
        try:
            mem = smaps_kb(pids[0])
        except OSError as e:
            raise RuntimeError(f"cannot read the child's smaps: {e}")
        mem["rss"] = harness.rss_kb(pids[0])
        return mem
    finally:
        stop(s)


# The files mod_mruby brings into a process: itself (mruby is linked in
# statically) and the hiredis library it links.
MODULE_FILES = ("mod_mruby.so", "libhiredis.so")
ANON_NAMES = ("", "[heap]", "[stack]")


def smaps_kb(pid):
    """kB of pid's memory, from /proc/pid/smaps:
    module: resident pages of MODULE_FILES (code, read-only data, data);
    anon: resident anonymous memory (heap, anonymous mmaps, stack);
    private_dirty: pages no other process has: what the child itself
    allocated or wrote, the memory each further child really costs.
    Pages shared with the parent or read from files are not in it."""
    mem = {"module": 0, "anon": 0, "private_dirty": 0}
    name = ""
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            field = line.split()
            if not field[0].endswith(":"):    # a mapping's header line
                name = field[5] if len(field) > 5 else ""
                continue
            if field[0] == "Private_Dirty:":
                mem["private_dirty"] += int(field[1])
            elif field[0] == "Rss:":
                if os.path.basename(name).startswith(MODULE_FILES):
                    mem["module"] += int(field[1])
                elif name in ANON_NAMES or name.startswith("[anon"):
                    mem["anon"] += int(field[1])
    return mem


MEMORY_FIELDS = ("rss", "module", "anon", "private_dirty")


def memory_section(starts=5):
    # A just-built module's pages are dirty in the page cache until written
    # back; they would count as dirty in every process that maps them.
    os.sync()
    res = {}
    for key, mruby, hit in (("plain", False, False),
                            ("module", True, False),
                            ("interp", True, True)):
        vals = []
        for _ in range(starts):
            try:
                vals.append(child_memory(mruby, hit))
            except (harness.HarnessError, RuntimeError) as e:
                res[key] = {"error": first_line(e)}
                break
        else:
            res[key] = {k: statistics.median(v[k] for v in vals)
                        for k in MEMORY_FIELDS}
            res[key].update(starts=starts, requests=MEMORY_REQUESTS)
        log(f"  {key}: {res[key]}")
    return res


# ---------------------------------------------------------------------------
# Access limiter (the access-limiter post)

LIMITER_DIR = os.path.join(REPO, "examples", "access_limiter")


def limiter_section():
    """The access-limiter post's table: the same page with the limiter off and on."""
    conf_path = os.path.join(LIMITER_DIR, "apache.conf")
    if not os.path.exists(conf_path):
        return {"error": "examples/access_limiter does not exist yet"}
    configs = limiter_configs()
    if isinstance(configs, str):
        return {"error": configs}
    out = {}
    for page, path in (("fast", "/limited/hello.txt"),
                       ("slow", "/limited/slow?sleep=20")):
        cfgs = [Config(k, label, "apache", make, path=path)
                for k, label, make in configs]
        log(f"  limiter, {page} page")
        out[page] = throughput(cfgs, "off")
    return out


def limiter_configs():
    """(key, label, make) for limiter off / on cache / stat / never, built
    from the example's own scripts with a threshold no run reaches."""
    scripts = {f: os.path.join(LIMITER_DIR, f) for f in os.listdir(LIMITER_DIR)
               if f.endswith(".rb")}
    need = ("access_limiter_init.rb", "access_limiter_worker_init.rb",
            "access_limiter.rb", "access_limiter_end.rb")
    missing = [f for f in need if f not in scripts]
    if missing:
        return f"examples/access_limiter lacks {', '.join(missing)}"
    # The fast page is a static file served without mmap (see the static
    # rows of the Apache table): with Apache's default the page's own cost
    # and its noise would hide the limiter's.
    page = ("EnableMMAP Off\n"
            "<Location /limited/slow>\n    SetHandler hello\n</Location>\n")

    # The example's scripts, with a threshold no run reaches.
    files = {}
    for f in need:
        with open(scripts[f]) as fh:
            files[f] = fh.read().replace("threshold = 2",
                                         "threshold = 1_000_000")
    if "threshold = 1_000_000" not in files["access_limiter.rb"]:
        return "access_limiter.rb no longer sets `threshold = 2`"

    def make(flag, policy):
        def f():
            conf = (page +
                    "mrubySharedDict access_limiter 1m\n"
                    f"mrubyPostConfigMiddle {{dir}}/{need[0]} cache\n"
                    f"mrubyChildInitMiddle {{dir}}/{need[1]} cache\n"
                    f"{policy}"
                    "<Location /limited>\n"
                    f"    mrubyAccessCheckerMiddle {{dir}}/{need[2]}{flag}\n"
                    f"    mrubyLogTransactionMiddle {{dir}}/{need[3]}{flag}\n"
                    "</Location>\n")
            return apache_server(conf, files=files, mruby=True,
                                 modules=[("hello", HELLO_SO)],
                                 docs={"limited/hello.txt": BODY})
        return f

    def off():
        return apache_server(page, modules=[("hello", HELLO_SO)],
                             docs={"limited/hello.txt": BODY})
    return [("off", "limiter off", off),
            ("cache", "limiter on, `cache`", make(" cache", "")),
            ("stat", "limiter on, `stat`", make("", "")),
            ("never", "limiter on, `never`",
             make("", "mrubyCodeCache never\n"))]


# ---------------------------------------------------------------------------
# SharedDict#incr under contention

INCR_RB = """\
d = Apache::SharedDict.new("bench")
n = Apache::Request.new.args.to_s.split("=")[1].to_i
t0 = Time.now
i = 0
while i < n
  d.incr("k", 1, init: 0)
  i += 1
end
t1 = Time.now
j = 0
while j < n
  j += 1
end
t2 = Time.now
Apache.rputs "#{((t1 - t0) - (t2 - t1)) * 1.0e9 / n} #{d.get("k")}"
"""

TWO_CHILDREN = ONE_CHILD.replace(" 1\n", " 2\n")


def incr_section(n=None):
    n = n or (200_000 if QUICK else 1_000_000)
    conf = ("mrubySharedDict bench 1m\n<Location /incr>\n"
            "    mrubyHandlerMiddle {dir}/incr.rb cache\n</Location>\n")
    s = apache_server(conf, files={"incr.rb": INCR_RB}, mruby=True,
                      mpm="prefork", mpm_conf=TWO_CHILDREN)
    try:
        s.start()
    except harness.HarnessError as e:
        s.remove()
        return {"error": "did not start: " + first_line(
            [ln for ln in str(e).splitlines() if "rror" in ln] or [str(e)])}
    try:
        def one(out, i):
            try:
                out[i] = s.get(f"/incr?n={n}", timeout=300).text.split()
            except Exception as e:  # reported below
                out[i] = ["error", first_line(e)]

        res = {"n": n}
        single = [None]
        one(single, 0)
        if len(single[0]) != 2 or single[0][0] == "error":
            return {"error": f"incr script answered {single[0]}"}
        res["ns_1proc"] = float(single[0][0])
        pair = [None, None]
        ts = [threading.Thread(target=one, args=(pair, i)) for i in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if any(len(p) != 2 or p[0] == "error" for p in pair):
            return {"error": f"incr script answered {pair}"}
        res["ns_2proc"] = [float(p[0]) for p in pair]
        final = int(s.get("/incr?n=0").text.split()[1])
        res["final"] = final
        res["lost"] = 3 * n - final
        return res
    finally:
        stop(s)


# ---------------------------------------------------------------------------
# The standard library on nginx against lua-nginx-module

LIB_ROUTER_URI = "/api/v2/users/12345/posts/678.json"


def bench_file(name):
    with open(os.path.join(HERE, name)) as f:
        return f.read()


def lib_router_expected():
    """What bench/lib_router.rb and .lua must answer, from Python's re on
    the patterns of the Lua script (Python spells a named group (?P<)."""
    patterns = re.findall(r"^\s+\[\[(.*)\]\],$", bench_file("lib_router.lua"),
                          re.M)
    if len(patterns) != 10:
        raise RuntimeError(f"lib_router.lua has {len(patterns)} patterns")
    out = []
    for i, pat in enumerate(patterns, 1):
        m = re.search(pat.replace("(?<", "(?P<"), LIB_ROUTER_URI)
        out.append(f"{i}:" + (",".join(m.groups()) if m else "-"))
    return " ".join(out) + "\n"


def lib_json_document():
    """The 1 KB document both JSON scripts hold, checked to be the same."""
    rb = re.search(r"^doc = '(.*)'$", bench_file("lib_json.rb"), re.M)
    lua = re.search(r"^local doc = \[\[(.*)\]\]$", bench_file("lib_json.lua"),
                    re.M)
    if not rb or not lua or rb.group(1) != lua.group(1):
        raise RuntimeError("lib_json.rb and lib_json.lua hold different "
                           "documents")
    return json.loads(rb.group(1))


def lib_server(location, script, lua=False, http=""):
    """nginx with one script (a file of bench/) on location, ngx_mruby
    `cache` or content_by_lua_file (lua_code_cache is on by default;
    Debian's LuaJIT finds lua-cjson in /usr/lib/x86_64-linux-gnu/lua/5.1
    on its default cpath); http: directives of the http block."""
    handler = (f"content_by_lua_file {{dir}}/{script};" if lua
               else f"mruby_content_handler {{dir}}/{script} cache;")
    conf = (
        http +
        "server {\n    listen 127.0.0.1:{port};\n    server_name localhost;\n"
        f"    location {location} {{\n        default_type text/plain;\n"
        f"        {handler}\n    }}\n}}\n")
    return nginx_server(conf, files={script: bench_file(script)},
                        mruby=not lua, modules=NGX_LUA if lua else ())


def lib_workloads():
    """(key, title, [return 200, lua, mruby]) per library figure."""
    ref = Config("return", "return 200", "nginx",
                 lambda: nginx_server(
                     'location = /hello { return 200 "hello world\\n"; }\n'))
    expected = lib_router_expected()
    doc = lib_json_document()

    def same_doc(body):
        return json.loads(body) == doc
    return [
        ("router", "routing, 10 regexp matches per request", [
            ref,
            Config("lua", "lua-nginx-module, ngx.re.match(..., \"jo\")",
                   "nginx", lambda: lib_server("/api/", "lib_router.lua",
                                               lua=True),
                   path=LIB_ROUTER_URI, expect=expected),
            Config("mruby", "ngx_mruby `cache`, Regexp (Oniguruma)", "nginx",
                   lambda: lib_server("/api/", "lib_router.rb"),
                   path=LIB_ROUTER_URI, expect=expected)]),
        ("json", "JSON.parse + JSON.generate of a 1 KB document", [
            ref,
            Config("lua", "lua-nginx-module, cjson.decode + cjson.encode",
                   "nginx", lambda: lib_server("= /order", "lib_json.lua",
                                               lua=True),
                   path="/order", expect=None, check=same_doc),
            Config("mruby", "ngx_mruby `cache`, JSON (src/lib)", "nginx",
                   lambda: lib_server("= /order", "lib_json.rb"),
                   path="/order", expect=None, check=same_doc)]),
    ]


def group_throughput(configs, ref_key, figure):
    """ROUNDS rounds; in each, every config of the group is measured once,
    in an order rotated every round, so a round's runs are seconds apart.
    Rows as throughput()'s with the ratio to ref_key of the same round;
    figure (num, den): the median over rounds of num's req/s / den's."""
    runs = {c.key: {} for c in configs}      # key -> {round: result}
    errors = {c.key: [] for c in configs}
    dead = set()
    for rnd in range(ROUNDS):
        order = configs[rnd % len(configs):] + configs[:rnd % len(configs)]
        for cfg in order:
            if cfg.key in dead:
                continue
            res = measure(cfg)
            tag = f"  [{rnd + 1}/{ROUNDS}] {cfg.label}"
            if "error" in res:
                errors[cfg.key].append(res["error"])
                if not res.get("requests"):  # never served: stop trying
                    dead.add(cfg.key)
                log(f"{tag}: {res['error']}")
                continue
            runs[cfg.key][rnd] = res
            log(f"{tag}: {res['rps']:.0f} req/s")

    def ratios(num, den):
        a, b = runs[num], runs[den]
        return [a[n]["rps"] / b[n]["rps"] for n in sorted(a) if n in b]
    rows = []
    for cfg in configs:
        row = throughput_row(cfg, list(runs[cfg.key].values()),
                             errors[cfg.key])
        rr = ratios(cfg.key, ref_key)
        if rr:
            row["ratio_runs"], row["ratio"] = rr, statistics.median(rr)
        rows.append(row)
    out = {"rows": rows}
    rr = ratios(*figure)
    if rr:
        out["figure"] = {"ratio_runs": rr, "ratio": statistics.median(rr)}
    return out


def lib_section():
    """The two library figures: ngx_mruby against lua-nginx-module
    doing the same work, measured in the same rounds, each also against
    `return 200`."""
    out = {}
    for key, title, configs in lib_workloads():
        # Both sides answer the same before anything is measured.
        bodies = []
        for cfg in configs[1:]:
            server, why = start_checked(cfg)
            if server is None:
                raise RuntimeError(f"{key}, {cfg.label}: {why}")
            bodies.append(server.get(cfg.path).content)
            stop(server)
        if key == "json" and json.loads(bodies[0]) != json.loads(bodies[1]):
            raise RuntimeError("the JSON scripts answer different documents")
        log(f"  {title}")
        out[key] = dict(title=title, figure_of=["mruby", "lua"],
                        **group_throughput(configs, "return",
                                           ("mruby", "lua")))
    return out


# ---------------------------------------------------------------------------
# A typical script on both servers against Lua doing the same

# What the client sends, so that the five headers the scripts read are
# there (wrk sends only Host by itself).
TYPICAL_HEADERS = {"User-Agent": "bench", "Accept": "text/html",
                   "Accept-Language": "en",
                   "Cookie": "session=0123456789abcdef"}
TYPICAL_BODY = re.compile(
    r"host=127\.0\.0\.1:\d+ agent=bench accept=text/html lang=en "
    r"cookie=session=0123456789abcdef hits=\d+\n\Z")


def typical_check(body):
    return TYPICAL_BODY.match(body.decode("latin-1")) is not None


def typical_apache(lua=False):
    """Apache, event MPM: bench/typical.rb (`cache`) or
    bench/typical_mod_lua.lua (mod_lua's fastest setup, as in the apache
    section) on /typical."""
    if lua:
        return apache_server(
            "LuaScope server 1 64\nLuaCodeCache forever\n"
            "LuaMapHandler ^/typical$ {dir}/typical.lua\n",
            files={"typical.lua": bench_file("typical_mod_lua.lua")},
            modules=["lua"])
    return apache_server(
        "mrubySharedDict typical 1m\n<Location /typical>\n"
        "    mrubyHandlerMiddle {dir}/typical.rb cache\n</Location>\n",
        files={"typical.rb": typical_rb("apache")}, mruby=True)


def typical_rb(family):
    """bench/typical.rb in the spelling of family's server class."""
    rb = bench_file("typical.rb")
    return rb.replace("Nginx", "Apache") if family == "apache" else rb


def typical_workloads():
    """(key, title, [reference, Lua, mruby]) per server."""
    def typical(key, label, family, make):
        return Config(key, label, family, make, path="/typical",
                      expect=None, check=typical_check,
                      headers=TYPICAL_HEADERS)
    return [
        ("nginx", "nginx: 5 header reads, SharedDict#incr, 2 response "
                  "headers, an interpolated body", [
            Config("return", "return 200", "nginx",
                   lambda: nginx_server(
                       'location = /hello { return 200 "hello world\\n"; }'
                       '\n')),
            typical("lua", "lua-nginx-module, bench/typical.lua", "nginx",
                    lambda: lib_server("= /typical", "typical.lua", lua=True,
                                       http="lua_shared_dict typical 1m;\n")),
            typical("mruby", "ngx_mruby `cache`, bench/typical.rb", "nginx",
                    lambda: lib_server(
                        "= /typical", "typical.rb",
                        http="mruby_shared_dict typical 1m;\n"))]),
        ("apache", "Apache: the same script", [
            Config("c", "C module (mod_hello)", "apache",
                   lambda: apache_server(C_HELLO_CONF,
                                         modules=[("hello", HELLO_SO)])),
            typical("lua", "mod_lua, LuaScope server + LuaCodeCache forever, "
                    "bench/typical_mod_lua.lua", "apache",
                    lambda: typical_apache(lua=True)),
            typical("mruby", "mod_mruby `cache`, bench/typical.rb", "apache",
                    typical_apache)]),
    ]


def typical_section():
    """The typical script against Lua on each server, in the same rounds
    as each other and as the server's reference (`return 200`, the C
    module), the scripts' five headers sent with every request."""
    out = {}
    for key, title, configs in typical_workloads():
        log(f"  {title}")
        out[key] = dict(title=title, figure_of=["mruby", "lua"],
                        **group_throughput(configs, configs[0].key,
                                           ("mruby", "lua")))
    return out


# ---------------------------------------------------------------------------
# Rendering

def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f
                        if ln.startswith("model name")), "")
    except OSError:
        pass

    def ver(cmd, pat=None):
        try:
            p = subprocess.run(cmd, capture_output=True, text=True)
            out = (p.stdout + p.stderr).strip()
            return first_line(out) if not pat else (
                re.search(pat, out).group(0) if re.search(pat, out) else "")
        except OSError:
            return ""
    return {
        "cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
        "apache": ver(["apache2", "-v"], r"Apache/[\d.]+"),
        "nginx": ver(["nginx", "-v"], r"nginx/[\d.]+"),
        "mruby": ver(["mruby", "--version"]),
        "wrk": ver(["wrk", "-v"], r"wrk \S+"),
    }


def run_params():
    return {"seconds": SECONDS, "rounds": ROUNDS, "warmup": WARMUP,
            "threads": THREADS, "connections": CONNECTIONS,
            "rss_requests": RSS_REQUESTS, "fig8_requests": FIG8_REQUESTS,
            "quick": QUICK,
            "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "commit": subprocess.run(["git", "-C", REPO, "rev-parse",
                                      "--short", "HEAD"], capture_output=True,
                                     text=True).stdout.strip()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sections", default="all",
                    help="comma-separated: apache,apache_close,nginx,fig8,"
                         "rss,memory,limiter,incr,lib,typical (default "
                         "all)")
    ap.add_argument("--render", action="store_true",
                    help="only render docs/benchmarks.md from results.json")
    args = ap.parse_args()

    results = {}
    if os.path.exists(RESULTS):
        with open(RESULTS) as f:
            results = json.load(f)
    if not args.render:
        all_sections = ["apache", "apache_close", "nginx", "fig8", "rss",
                        "memory", "limiter", "incr", "lib", "typical"]
        sections = (all_sections if args.sections == "all"
                    else [s for s in args.sections.split(",") if s])
        unknown = set(sections) - set(all_sections)
        if unknown:
            ap.error(f"unknown sections {sorted(unknown)}")
        build_hello()
        # The Method paragraph describes the machine of a whole run; a run
        # of some sections keeps its machine in their params.
        here = machine()
        if args.sections == "all" or "machine" not in results:
            results["machine"] = here
        for sec in sections:
            t0 = time.monotonic()
            log(f"== {sec}")
            try:
                results[sec] = run_section(sec)
            except Exception as e:  # one broken section must not stop all
                traceback.print_exc()
                results[sec] = {"error": f"{type(e).__name__}: "
                                         f"{first_line(e)}"}
            results[sec + "_params"] = dict(run_params(), machine=here)
            log(f"== {sec} done in {time.monotonic() - t0:.0f} s")
            with open(RESULTS, "w") as f:  # keep what is done so far
                json.dump(results, f, indent=1, sort_keys=True)
    render.render(results, DOC, IMG)
    log(f"wrote {DOC}")
    return 0


def close_section():
    """The mod_mruby paper's own load: ab opened a new connection for every request
    (no keep-alive), so each request also paid a TCP handshake and close.
    The targets are judged on keep-alive (the apache section); this shows
    what the paper's figures correspond to."""
    keys = ("c", "forever", "stat", "never", "lua_server")
    WRK_EXTRA[:] = ["-H", "Connection: close"]
    try:
        return throughput([c for c in apache_configs() if c.key in keys],
                          "c")
    finally:
        WRK_EXTRA.clear()


def run_section(sec):
    if sec == "apache":
        return throughput(apache_configs(), "c")
    if sec == "apache_close":
        return close_section()
    if sec == "nginx":
        return throughput(nginx_configs(), "return")
    if sec == "fig8":
        # One connection per child: a prefork child holds a keep-alive
        # connection, so more connections than children would wait.
        return {c.key: dict(label=c.label, **rss_run(
                    c, FIG8_REQUESTS, connections=FIG8_CHILDREN,
                    interval=0.1))
                for c in fig8_configs()}
    if sec == "rss":
        return rss_section()
    if sec == "memory":
        return memory_section()
    if sec == "limiter":
        return limiter_section()
    if sec == "incr":
        return incr_section()
    if sec == "lib":
        return lib_section()
    if sec == "typical":
        return typical_section()
    raise ValueError(sec)


if __name__ == "__main__":
    sys.exit(main())

"""Renders bench/results.json into docs/benchmarks.md and docs/img/*.png.

The commentary that a measurement cannot write itself (what a number means,
why a target was missed) lives in bench/notes.md and is inserted as is.
"""

import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
NOTES = os.path.join(HERE, "notes.md")

# (section, key, label, target ratio) -- the targets.
APACHE_TARGETS = [("forever", 0.98), ("inline", 0.98), ("stat", 0.97),
                  ("never", 0.90)]
NGINX_TARGETS = [("cached", 0.95), ("inline", 0.95), ("stat", 0.93)]
RSS_LIMIT_KB = 1024
INTERP_LIMIT_KB = 600
LIMITER_TARGETS = [("cache", 0.95), ("stat", 0.94)]
INCR_LIMIT_NS = 1000
LIB_TARGET = 1.0   # ngx_mruby / lua-nginx-module doing the same work
# bench/typical.rb against the same script in Lua, per server
TYPICAL_TARGETS = {"nginx": ("lua-nginx-module", 1.1),
                   "apache": ("mod_lua", 1.2)}


def rss_growth(samples, skip_fraction=0.05):
    """Largest RSS growth of one worker from the first sample after warm-up
    (5% of the run: thread interpreters are created lazily) to the end."""
    if len(samples) < 2:
        return None
    total = samples[-1][0]
    base = next((s for s in samples if s[0] >= skip_fraction * total),
                samples[0])
    end = samples[-1][1]
    growth = [end[pid] - base[1][pid] for pid in end
              if pid in base[1] and end[pid] is not None
              and base[1][pid] is not None]
    return max(growth) if growth else None


def fmt_rps(v):
    return f"{v:,.0f}" if v is not None else "-"


def fmt_ratio(v):
    return f"{v:.3f}" if v is not None else "-"


def verdict(ok):
    if ok is None:
        return "not measured"
    return "met" if ok else "**missed**"


def rows_by_key(rows):
    return {r["key"]: r for r in rows or [] if isinstance(r, dict)}


def throughput_table(rows, ref_label):
    out = ["| configuration | req/s (median) | req/s of each run | ratio to "
           f"{ref_label} | ratio range | p99 latency | others' CPU |",
           "|---|---:|---|---:|---|---:|---:|"]
    for r in rows:
        if "rps" in r:
            vals = r.get("rps_runs", [])
            runs = (", ".join(f"{x:,.0f}" for x in vals) if len(vals) <= 8
                    else f"{len(vals)} runs, {min(vals):,.0f}-"
                         f"{max(vals):,.0f}")
            if r.get("failed_runs"):
                runs += f" ({r['failed_runs']} failed: {r['error']})"
            rr = r.get("ratio_runs") or []
            rng = f"{min(rr):.3f}-{max(rr):.3f}" if len(rr) > 1 else "-"
            out.append(f"| {r['label']} | {fmt_rps(r['rps'])} | {runs} | "
                       f"{fmt_ratio(r.get('ratio'))} | {rng} | "
                       f"{r.get('p99_ms', 0):.1f} ms | "
                       f"{r.get('others_cores', 0):.2f} |")
        else:
            out.append(f"| {r['label']} | - | {r.get('error', '')} | - | - "
                       "| - | - |")
    notes = [f"- {r['label']}: {r['note']}" for r in rows if r.get("note")]
    if notes:
        out += [""] + notes
    return "\n".join(out)


def plot_ratios(rows, title, path, targets=()):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in rows if "ratio" in r]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.2))
    labels = [r["label"] for r in rows][::-1]
    vals = [r["ratio"] for r in rows][::-1]
    bars = ax.barh(labels, vals, color="#4a7ab5")
    for b, v in zip(bars, vals):
        ax.text(b.get_width() + 0.01, b.get_y() + b.get_height() / 2,
                f"{v:.3f}", va="center", fontsize=8)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlim(0, max(vals + [1.0]) * 1.15)
    ax.set_xlabel("throughput ratio to the reference (same run)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def plot_rss(series, title, path, xmax=None):
    """series: {label: samples}; plots every worker's RSS (MB) over the
    requests served."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5))
    drawn = False
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, samples) in enumerate(series.items()):
        if not samples:
            continue
        pids = sorted({p for _, m in samples for p in m})
        for j, pid in enumerate(pids):
            pts = [(n, m[pid] / 1024) for n, m in samples
                   if m.get(pid) is not None]
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts],
                    color=colors[i % len(colors)], linewidth=1.2,
                    label=label if j == 0 else None)
            drawn = True
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xlabel("requests served (whole server)")
    ax.set_ylabel("worker RSS (MB), one line per worker")
    ax.set_title(title)
    if xmax:
        ax.set_xlim(0, xmax)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def figure_table(v, w, ref_label, figure_label):
    """A group of group_throughput (bench/run.py) with its figure: its
    heading, table and ratio; returns the ratio (None if not measured),
    False when the group failed."""
    w(f"### {v.get('title')}\n")
    if "error" in v:
        w(f"Not measured: {v['error']}.\n")
        return False
    w(throughput_table(v.get("rows", []), ref_label))
    fig = v.get("figure") or {}
    rr = fig.get("ratio_runs") or []
    r = fig.get("ratio")
    w(f"\n**{figure_label}: {fmt_ratio(r)}** "
      f"(rounds: {', '.join(f'{x:.3f}' for x in rr) or '-'}).\n")
    return r


def lib_section(lib, params, img_dir, w, targets):
    """The library figures: ngx_mruby against lua-nginx-module doing
    the same work in the same rounds (bench/lib_*.rb and bench/lib_*.lua)."""
    w("## The standard library on nginx: ngx_mruby against "
      "lua-nginx-module\n")
    w("Two library figures. nginx, 2 workers, a content handler "
      "per request: ngx_mruby with its script cached (`cache`) and "
      "lua-nginx-module (Debian's `libnginx-mod-http-lua`, LuaJIT, "
      "`content_by_lua_file` with the code cache on) running the same work "
      "from `bench/lib_router.rb` / `.lua` and `bench/lib_json.rb` / `.lua`. "
      "The router matches 10 patterns (prefixes, an extension list, "
      "captures, a named group, `(?i)`) against "
      "`/api/v2/users/12345/posts/678.json` and prints every match's "
      "captures; mruby with `Regexp` (Oniguruma, `src/lib`), Lua with "
      "`ngx.re.match(uri, pattern, \"jo\")` (PCRE with its JIT, compiled "
      "once per worker). The JSON scripts parse and generate the same "
      "1,030-byte document (nested objects and arrays, UTF-8, escapes), "
      "mruby with `JSON` (`src/lib`), Lua with lua-cjson. Both answers are "
      "checked before measuring: the routers' byte for byte (against "
      "Python's `re` on the same patterns), the JSON documents as parsed "
      "(cjson orders keys by its hash table, writes `1` where Ruby writes "
      "`1.0` and escapes `/`). In every round the three configurations "
      "of a figure (`return 200`, Lua, mruby) are measured one after "
      "another in a rotated order; a ratio is the median over rounds of "
      "the ratios of the same round.\n")
    p = params or {}
    m = p.get("machine") or {}
    if p:
        w(f"Run: {p.get('date')}, commit {p.get('commit')}, "
          f"{p.get('rounds')} rounds of {p.get('seconds')} s, on "
          f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores.")
    others = max((r.get("others_cores", 0) for v in lib.values()
                  if isinstance(v, dict) for r in v.get("rows", [])),
                 default=0)
    if others > 0.1:
        w(f"Other work ran on the machine meanwhile (up to {others:.2f} "
          "cores, column \"others' CPU\"): a ratio compares runs of the "
          "same round, so both sides met the load, but not evenly; the "
          "instruction counts in the notes below do not depend on it.")
    w("")
    plot_rows = []
    for key in ("router", "json"):
        v = lib.get(key)
        if not v:
            continue
        title = v.get("title", key)
        r = figure_table(v, w, "`return 200`", "ngx_mruby / lua-nginx-module")
        if r is False:
            continue
        targets.append((f"nginx {title}: ngx_mruby / lua-nginx-module, same "
                        "run", f">= {LIB_TARGET}", fmt_ratio(r),
                        None if r is None else r >= LIB_TARGET))
        byk = rows_by_key(v.get("rows"))
        short = {"router": "router", "json": "JSON"}[key]
        for k, name in (("lua", "Lua"), ("mruby", "mruby")):
            if byk.get(k, {}).get("ratio") is not None:
                plot_rows.append({"label": f"{short}: {name} / return 200",
                                  "ratio": byk[k]["ratio"]})
        if r is not None:
            plot_rows.append({"label": f"{short}: mruby / Lua", "ratio": r})
    if plot_rows and plot_ratios(
            plot_rows, "nginx: the library against lua-nginx-module",
            os.path.join(img_dir, "lib_throughput.png")):
        w("![library throughput](img/lib_throughput.png)\n")


def typical_section(typical, params, w, targets):
    """bench/typical.rb against the same script in Lua on each server,
    in the same rounds as the server's reference."""
    w("## A typical script against Lua\n")
    w("`bench/typical.rb` reads five request headers through "
      "`r.headers_in`, increments a counter with `SharedDict#incr`, sets "
      "two response headers and answers a body built by interpolation; "
      "`bench/typical.lua` does the same on lua-nginx-module "
      "(`ngx.req.get_headers()`, `ngx.shared.DICT:incr`, `ngx.header`, "
      "`ngx.print`), `bench/typical_mod_lua.lua` on mod_lua (`LuaScope "
      "server`, `LuaCodeCache forever`; its counter is `r:ivm_get` / "
      "`r:ivm_set`, mod_lua having no dictionary shared between "
      "processes). wrk sends the five headers with every request. In "
      "every round the three configurations of a server (its reference, "
      "Lua, mruby) are measured one after another in a rotated order; a "
      "ratio is the median over rounds of the ratios of the same round.\n")
    p = params or {}
    if p:
        w(f"Run: {p.get('date')}, commit {p.get('commit')}, "
          f"{p.get('rounds')} rounds of {p.get('seconds')} s.\n")
    for key in ("nginx", "apache"):
        v = typical.get(key)
        if not v:
            continue
        lua, target = TYPICAL_TARGETS[key]
        r = figure_table(v, w, "`return 200`" if key == "nginx"
                         else "C module", f"mruby / {lua}")
        if r is False:
            continue
        targets.append((f"{key} typical script: mruby / {lua}, same run",
                        f">= {target}", fmt_ratio(r),
                        None if r is None else r >= target))


def render(results, doc_path, img_dir):
    os.makedirs(img_dir, exist_ok=True)
    m = results.get("machine", {})
    out = []
    w = out.append
    w("# Benchmarks\n")
    w("Generated by `make bench` (`bench/run.py`, rendering in "
      "`bench/render.py`, raw numbers in `bench/results.json`). Every "
      "throughput figure is a ratio to a reference measured in the same "
      "run: the C module `bench/mod_hello.c` for Apache, `return 200` for "
      "nginx.\n")
    w("## Method\n")
    p = results.get("apache_params") or results.get("nginx_params") or {}
    w(f"- Machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores, "
      f"Linux {m.get('kernel', '?')}; {m.get('apache', '')}, "
      f"{m.get('nginx', '')}, {m.get('mruby', '')}, {m.get('wrk', '')}.")
    if p:
        w(f"- Load: wrk on loopback, keep-alive, {p.get('connections')} "
          f"connections, {p.get('threads')} wrk thread(s) (wrk and the "
          f"server share the 2 cores; one wrk thread measured as fast as "
          f"two), {p.get('warmup')} s warm-up then {p.get('seconds')} s "
          f"measured per configuration, {p.get('rounds')} rounds; in each "
          f"round every configuration is measured right next to a run of "
          f"the reference of its own (the reference first in even rounds, "
          f"second in odd ones), every server started afresh, in a rotated "
          f"order; the table shows the median and every run.")
        if p.get("quick"):
            w("- **This was a quick smoke run (BENCH_QUICK=1): the numbers "
              "are indicative only.**")
    w("- Apache: event MPM, 2 children x 128 threads (each can hold every "
      "connection), KeepAlive On, no access log, LogLevel warn; each "
      "configuration loads only the modules "
      "it needs (the references run without mod_mruby). nginx: 2 workers, "
      "no access log.")
    w("- Ratios are paired: a configuration's req/s is divided by the "
      "req/s of the reference run next to it, seconds apart (this shared "
      "2-core VM drifts by several percent over the minutes a round takes); "
      "the table shows the median of those ratios and their range over the "
      "rounds. The reference row shows all its runs.")
    w("- Other work on the machine: before each measurement the runner "
      "waits (up to 90 s; 10 s in a quick run) until the CPU is idle, and "
      "during it counts the CPU used by processes other than the server "
      "and wrk. Above 0.10 cores the measurement is repeated (twice at "
      "most); the `others' CPU` column is the largest such figure among "
      "the kept runs.")
    w("- Every configuration answers `hello world\\n` (12 bytes); its first "
      "response is checked before it is measured, and a run with more than "
      "0.1% non-2xx responses or socket errors counts as failed. A "
      "configuration that fails to start is listed with the reason.\n")

    targets = []  # (figure, target, measured, ok)
    pending = []  # images to place after the current table
    titles = {"apache": "Apache: the mod_mruby paper's Table 2",
              "apache_close": "Apache without keep-alive", "nginx": "nginx",
              "fig8": "The mod_mruby paper's Fig. 8", "rss": "RSS over many requests",
              "memory": "Memory one interpreter adds",
              "lib": "The standard library on nginx",
              "typical": "A typical script against Lua"}
    for sec, title in titles.items():
        v = results.get(sec)
        if isinstance(v, dict) and set(v) == {"error"}:
            w(f"## {title}\n\nNot measured: the run failed with "
              f"`{v['error']}`.\n")
            results = dict(results)
            results[sec] = None

    # -- Apache Table 2 ------------------------------------------------------
    ap = results.get("apache")
    if ap:
        w("## Apache: the mod_mruby paper's Table 2 on this machine\n")
        w(throughput_table(ap, "C module"))
        w("")
        if plot_ratios(ap, "Apache (event MPM): ratio to the C module",
                       os.path.join(img_dir, "apache_throughput.png")):
            w("![Apache throughput](img/apache_throughput.png)\n")
        byk = rows_by_key(ap)
        for key, t in APACHE_TARGETS:
            r = byk.get(key, {})
            v = r.get("ratio")
            targets.append((f"Apache {r.get('label', key)}", f">= {t}",
                            fmt_ratio(v) if v is not None
                            else r.get("error", "-"),
                            None if v is None else v >= t))
        lua = [byk[k].get("ratio") for k in ("lua_once", "lua_server")
               if byk.get(k, {}).get("ratio") is not None]
        mr = [byk[k].get("ratio") for k, _ in APACHE_TARGETS
              if byk.get(k, {}).get("ratio") is not None]
        if lua:
            ok = (min(mr) > max(lua)) if len(mr) == len(APACHE_TARGETS) \
                else None
            targets.append(("Apache: every mod_mruby mode beats mod_lua's "
                            "best", f"> {max(lua):.3f}",
                            f"slowest mruby mode {min(mr):.3f}" if mr
                            else "-", ok))

    # -- Apache without keep-alive (the mod_mruby paper's ab) ----------------------------
    ac = results.get("apache_close")
    if isinstance(ac, list) and ac:
        w("### The same without keep-alive (the mod_mruby paper's load)\n")
        w("The mod_mruby paper measured with `ab -c 100 -n 100000` from another "
          "machine, a new connection per request. Here: wrk with "
          "`Connection: close`, so every request also pays a TCP "
          "handshake and close on the same 2 cores. Informative only; the "
          "targets above are judged with keep-alive.\n")
        w(throughput_table(ac, "C module"))
        w("")

    # -- nginx -------------------------------------------------------------
    ng = results.get("nginx")
    if ng:
        w("## nginx: the same table\n")
        w(throughput_table(ng, "`return 200`"))
        w("")
        if plot_ratios(ng, "nginx (2 workers): ratio to return 200",
                       os.path.join(img_dir, "nginx_throughput.png")):
            w("![nginx throughput](img/nginx_throughput.png)\n")
        byk = rows_by_key(ng)
        lua = byk.get("lua", {}).get("ratio")
        for key, t in NGINX_TARGETS:
            r = byk.get(key, {})
            v = r.get("ratio")
            ok = None if v is None else v >= t
            tt = f">= {t}"
            if key != "stat" and lua is not None:
                tt += f" and > lua ({lua:.3f})"
                ok = None if v is None else (v >= t and v > lua)
            targets.append((f"nginx {r.get('label', key)}", tt,
                            fmt_ratio(v) if v is not None
                            else r.get("error", "-"), ok))

    # -- Fig. 8 --------------------------------------------------------------
    f8 = results.get("fig8")
    if f8:
        w("## The mod_mruby paper's Fig. 8: worker RSS while serving requests\n")
        w("The script of the mod_mruby paper's Fig. 6/7 (`mrubyTranslateNameMiddle` "
          "setting `r.filename`) for every URI, Apache prefork MPM with 4 "
          "children (one interpreter each) and 4 wrk connections; the RSS of "
          "each child sampled every 0.1 s. Growth is counted from the first "
          "sample after 5% of the requests to the end.\n")
        series = {v.get("label", k): v.get("samples")
                  for k, v in f8.items()}
        if plot_rss(series,
                    "the mod_mruby paper's Fig. 8: RSS per Apache child",
                    os.path.join(img_dir, "fig8_rss.png")):
            w("![Fig. 8](img/fig8_rss.png)\n")
        w("| mode | requests | RSS growth of a child after warm-up |")
        w("|---|---:|---:|")
        for k, v in f8.items():
            s = v.get("samples") or []
            g = rss_growth(s) if s else None
            w(f"| {v.get('label', k)} | {s[-1][0] if s else 0:,} | "
              + (f"{g} kB" if g is not None else v.get("error", "-")) + " |")
        w("")

    # -- RSS over 1M ---------------------------------------------------------
    rss = results.get("rss")
    if rss:
        n = (results.get("rss_params") or {}).get("rss_requests", 0)
        w(f"## RSS over {n:,} requests\n")
        w("Each worker's RSS sampled every 0.5 s while wrk sends the "
          "configuration's hello request (the same configurations as the "
          "throughput tables, plus a status page to count requests). "
          "Growth is measured from the first sample after 5% of the "
          "requests to the end; the largest growth of any worker is shown.\n")
        w("- **apache**: prefork MPM, 4 children, 4 connections: each child "
          "has exactly one interpreter, so its RSS shows what serving "
          "requests does to an interpreter's process. This is the figure "
          "the target (< 1 MB) is judged on.")
        w("- **apache-event**: the event MPM of the throughput table (2 "
          "children x 128 threads), 100 connections, a shorter run. A "
          "child makes an interpreter when a script finds none idle, so it "
          "has as many as its threads ran scripts at the same moment; a "
          "step in the curve is a new interpreter, not a per-request "
          "growth. Shown for the memory a threaded server ends up using.")
        w("- **nginx**: 2 workers (one interpreter each), 100 connections.\n")
        w("| server | mode | requests | largest growth of a worker |")
        w("|---|---|---:|---:|")
        for fam in ("apache", "apache-event", "nginx"):
            series = {}
            for key, v in rss.items():
                if key.split("/")[0] != fam:
                    continue
                s = v.get("samples") or []
                g = v.get("growth_kb")
                notes = [v["error"]] if v.get("error") else []
                if v.get("stalls"):
                    notes.append(f"{v['stalls']} status requests timed out "
                                 "after 10 s")
                w(f"| {fam} | {v.get('label')} | {s[-1][0] if s else 0:,} | "
                  + (f"{g:,} kB" if g is not None else "-")
                  + (f" ({'; '.join(notes)})" if notes else "") + " |")
                series[v.get("label")] = s
                if "mruby" in v.get("label", "") and fam != "apache-event":
                    targets.append((f"RSS growth over {n:,} requests, {fam} "
                                    f"{v.get('label')}",
                                    f"< {RSS_LIMIT_KB} kB per worker",
                                    f"{g:,} kB" if g is not None
                                    else v.get("error", "-"),
                                    None if g is None or v.get("error")
                                    else g < RSS_LIMIT_KB))
            if plot_rss(series, f"{fam}: worker RSS",
                        os.path.join(img_dir, f"rss_{fam}.png")):
                series_png = f"img/rss_{fam}.png"
                pending.append(f"![RSS {fam}]({series_png})")
        w("")
        for line in pending:
            w(line + "\n")
        pending.clear()

    # -- interpreter memory --------------------------------------------------
    mem = results.get("memory")
    if mem:
        w("## Memory one interpreter adds to a process\n")
        run = next((v for v in mem.values()
                    if isinstance(v, dict) and "starts" in v), {})
        n = run.get("requests", 10)
        w(f"One Apache prefork child (ServerLimit 1), {n:,} requests for a "
          f"static file (and {n:,} for a cached mod_mruby handler where the "
          f"interpreter exists), median of {run.get('starts', 3)} starts. "
          "VmRSS is what "
          "the mod_mruby paper measured (a server process with and without mod_mruby: "
          "about 5,000 and 4,400 kB). From `/proc/PID/smaps`: the pages of "
          "mod_mruby's own files (`mod_mruby.so` with mruby linked in "
          "statically, and libhiredis) that the child has mapped, its "
          "anonymous memory (heap, anonymous mmaps, stack), and its private "
          "dirty memory: the pages no other process has, what each further "
          "child with its interpreter costs.\n")
        w("| child | VmRSS | mod_mruby's files | anonymous | private dirty |")
        w("|---|---:|---:|---:|---:|")
        names = {"plain": "Apache without mod_mruby",
                 "module": "mod_mruby loaded, no script run yet",
                 "interp": "mod_mruby loaded, interpreter created and used"}
        fields = ("rss", "module", "anon", "private_dirty")
        for k in ("plain", "module", "interp"):
            v = mem.get(k, {})
            if all(f in v for f in fields):
                w(f"| {names[k]} | " + " | ".join(f"{v[f]:,.0f} kB"
                                                   for f in fields) + " |")
            else:
                w(f"| {names[k]} | {v.get('error', 'not measured')} "
                  "| - | - | - |")
        if all(f in mem.get(k, {}) for k in ("plain", "module", "interp")
               for f in fields):
            d = {f: round(mem["interp"][f] - mem["plain"][f])
                 for f in fields}
            di = {f: round(mem["interp"][f] - mem["module"][f])
                  for f in fields}
            rest = d["rss"] - d["module"] - d["anon"]
            w(f"\nmod_mruby with its interpreter adds **{d['rss']} kB** of "
              f"VmRSS to a child (the mod_mruby paper: ~600 kB): {d['module']} kB are "
              "pages of mod_mruby's files, mostly code and read-only data, "
              "shared with every process that maps them; "
              f"{d['anon']:+} kB anonymous memory; {rest:+} kB pages of "
              "other libraries. Of all this, "
              f"**{d['private_dirty']} kB** is private to the child. "
              "Creating and using the interpreter alone adds "
              f"{di['rss']} kB of VmRSS, {di['private_dirty']} kB private.")
            targets.append(("memory one interpreter adds: VmRSS, module + "
                            "interpreter vs no module (the paper's measure)",
                            f"<= {INTERP_LIMIT_KB} kB", f"{d['rss']} kB",
                            d["rss"] <= INTERP_LIMIT_KB))
            targets.append(("memory one interpreter adds: private dirty "
                            "memory, module + interpreter vs no module",
                            f"<= {INTERP_LIMIT_KB} kB",
                            f"{d['private_dirty']} kB",
                            d["private_dirty"] <= INTERP_LIMIT_KB))
        w("")

    # -- limiter ---------------------------------------------------------------
    lim = results.get("limiter")
    if lim:
        w("## Access limiter: the access-limiter post's table\n")
        w("The scripts of `examples/access_limiter` (the access-limiter post's "
          "configuration: post_config and child_init scripts cached, the "
          "access checker and log transaction scripts per request, counting "
          "in-flight requests per file in a SharedDict) with a threshold no "
          "run reaches, on `<Location /limited>`; Apache event MPM as "
          "above, EnableMMAP Off. Fast page: a 12-byte static file. Slow "
          "page: the C module sleeping 20 ms (the access-limiter post used a PHP page; with "
          "100 connections it is bound by concurrency, so the limiter's "
          "cost hardly shows). `cache`, `stat`, `never` are the policies of "
          "the two per-request scripts.\n")
        if "error" in lim:
            w(f"Not measured: {lim['error']}.\n")
        else:
            for page, rows in lim.items():
                w(f"### {page} page\n")
                w(throughput_table(rows, "limiter off"))
                w("")
            byk = rows_by_key(lim.get("fast"))
            for key, t in LIMITER_TARGETS:
                r = byk.get(key, {})
                v = r.get("ratio")
                targets.append((f"{r.get('label', key)}, fast page, vs off",
                                f">= {t}", fmt_ratio(v) if v is not None
                                else r.get("error", "-"),
                                None if v is None else v >= t))
    inc = results.get("incr")
    if inc:
        w("## SharedDict#incr under contention\n")
        if "error" in inc:
            w(f"Not measured: {inc['error']}.\n")
            targets.append(("SharedDict incr, 2 processes", "<= 1 us",
                            inc["error"], None))
        else:
            w(f"A cached mod_mruby handler loops {inc['n']:,} times over "
              "`d.incr(\"k\", 1, init: 0)` (the cost of an empty loop of the "
              "same length subtracted); one request alone, then two at once "
              "in the two children of a prefork server.\n")
            w("| processes | ns per incr |")
            w("|---|---:|")
            w(f"| 1 | {inc['ns_1proc']:.0f} |")
            w(f"| 2 contending | "
              f"{', '.join(f'{x:.0f}' for x in inc['ns_2proc'])} |")
            w(f"\nFinal counter {inc['final']:,}, expected {3 * inc['n']:,}:"
              f" {inc['lost']} lost updates.\n")
            worst = max(inc["ns_2proc"])
            targets.append(("SharedDict incr, 2 processes contending",
                            f"<= {INCR_LIMIT_NS} ns", f"{worst:.0f} ns",
                            worst <= INCR_LIMIT_NS))
            targets.append(("lost updates in concurrent increments", "0",
                            str(inc["lost"]), inc["lost"] == 0))

    lib = results.get("lib")
    if lib:
        lib_section(lib, results.get("lib_params"), img_dir, w, targets)

    typical = results.get("typical")
    if typical:
        typical_section(typical, results.get("typical_params"), w, targets)

    if targets:
        w("## Targets\n")
        w("| figure | target | measured | |")
        w("|---|---|---|---|")
        for fig, t, v, ok in targets:
            w(f"| {fig} | {t} | {v} | {verdict(ok)} |")
        w("")

    if os.path.exists(NOTES):
        with open(NOTES) as f:
            w(f.read())

    text = "\n".join(out).rstrip() + "\n" + kept_blocks(doc_path)
    with open(doc_path, "w") as f:
        f.write(text)


def splice_block(doc_path, begin, end, block):
    """Puts block (from its begin marker to its end marker and a newline)
    in place of the page's block between those markers, or at its end."""
    with open(doc_path) as f:
        doc = f.read()
    if begin in doc:
        at = doc.index(begin)
        stop = doc.find(end, at)
        if stop < 0:
            raise ValueError(f"{doc_path}: {begin} without {end}")
        stop += len(end)
        if doc.startswith("\n", stop):
            stop += 1
        doc = doc[:at] + block + doc[stop:]
    else:
        doc = doc.rstrip("\n") + "\n\n" + block
    with open(doc_path, "w") as f:
        f.write(doc)


def kept_blocks(doc_path):
    """The blocks other benches write into the same page between their own
    markers (bench/coro.py: <!-- coro:begin --> ... <!-- coro:end -->),
    kept as they are."""
    try:
        with open(doc_path) as f:
            old = f.read()
    except OSError:
        return ""
    return "".join("\n" + m.group(0) for m in re.finditer(
        r"^<!-- (\w+):begin -->\n.*?^<!-- \1:end -->\n", old, re.M | re.S))

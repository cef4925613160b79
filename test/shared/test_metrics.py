"""Per-script metrics on real servers: counts summed over 2 nginx workers
and 2 Apache children, kept when a worker is killed, and an exposition
that Prometheus' own Python parser reads (prometheus_client)."""

import concurrent.futures
import json
import os
import re
import signal
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

RAISES = 'raise ArgumentError, "no such thing"\n'
HELLO = 'get_server_class.rputs "hello"\n'
STATUS = 'get_server_class.return get_server_class::HTTP_SERVICE_UNAVAILABLE\n'


def metrics_server(kind, apache, nginx, handlers, slow_log=None,
                   shared_dict=False):
    """A server with /metrics and one content handler file per location
    ({"/path": "ruby code"}), the slow-run log at slow_log if given;
    returns it and {path: script file}."""
    files, scripts = {}, {}
    for i, (loc, code) in enumerate(handlers.items()):
        files[f"h{i}.rb"] = code
        scripts[loc] = f"h{i}.rb"
    if kind == "apache":
        conf = ["<Location /metrics>\n    SetHandler mruby-metrics\n"
                "</Location>"]
        conf += [f"<Location {loc}>\n    mrubyHandlerMiddle {{dir}}/{f}\n"
                 "</Location>" for loc, f in scripts.items()]
        if slow_log:
            conf.append(f"mrubySlowLog {slow_log}")
        if shared_dict:
            conf.append("mrubySharedDict meet 64k")
        s = apache("\n".join(conf), files=files)
    else:
        locs = ["location /metrics { mruby_metrics; }"]
        locs += [f"location {loc} {{ mruby_content_handler {{dir}}/{f}; }}"
                 for loc, f in scripts.items()]
        if slow_log:
            locs.append(f"mruby_slow_log {slow_log};")
        s = nginx(("mruby_shared_dict meet 64k;\n" if shared_dict else "")
                  + "server {\n    listen 127.0.0.1:{port};\n"
                  + "\n".join(locs) + "\n}", workers=2, files=files)
    return s, {loc: os.path.join(s.dir, f) for loc, f in scripts.items()}


def phase_of(kind):
    return "handler" if kind == "apache" else "content"


def samples(server):
    """{(name, labels as a sorted tuple): value} of the exposition."""
    r = server.get("/metrics")
    assert r.status_code == 200, server.error_log()[-2000:]
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(smp, name, **labels):
    return smp.get((name, tuple(sorted(labels.items()))), 0)


def hit(server, path, n, status):
    """n GETs on new connections, so that they spread over the workers."""
    for _ in range(n):
        r = server.get(path, headers={"Connection": "close"})
        assert r.status_code == status


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_runs_and_exceptions_are_summed_over_workers(kind, apache, nginx):
    s, script = metrics_server(kind, apache, nginx, {"/raise": RAISES})
    assert len(s.worker_pids()) == 2
    hit(s, "/raise", 40, 500)

    smp = samples(s)
    labels = dict(server=kind, script=script["/raise"], phase=phase_of(kind))
    assert value(smp, "mruby_runs_total", **labels) == 40
    assert value(smp, "mruby_exceptions_total", **labels,
                 **{"class": "ArgumentError"}) == 40
    assert value(smp, "mruby_responses_5xx_total", **labels) == 40


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_killed_worker_keeps_the_others_counts(kind, apache, nginx):
    s, script = metrics_server(kind, apache, nginx, {"/raise": RAISES})
    hit(s, "/raise", 30, 500)
    labels = dict(server=kind, script=script["/raise"], phase=phase_of(kind))
    exc = dict(labels, **{"class": "ArgumentError"})

    victim = s.worker_pids()[0]
    os.kill(victim, signal.SIGKILL)
    for _ in range(100):
        if victim not in s.worker_pids() and len(s.worker_pids()) == 2:
            break
        time.sleep(0.1)

    # what the dead worker counted stays: a counter never goes down
    smp = samples(s)
    assert value(smp, "mruby_runs_total", **labels) == 30
    assert value(smp, "mruby_exceptions_total", **exc) == 30

    hit(s, "/raise", 10, 500)
    smp = samples(s)
    assert value(smp, "mruby_runs_total", **labels) == 40
    assert value(smp, "mruby_exceptions_total", **exc) == 40


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_exposition_parses_and_histogram_adds_up(kind, apache, nginx):
    s, script = metrics_server(kind, apache, nginx, {
        "/hello": HELLO, "/raise": RAISES, "/busy": STATUS})
    hit(s, "/hello", 12, 200)
    hit(s, "/raise", 3, 500)
    hit(s, "/busy", 2, 503)

    r = s.get("/metrics")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    assert families["mruby_run_seconds"].type == "histogram"
    assert families["mruby_runs"].type == "counter"

    for loc, runs, fails in (("/hello", 12, 0), ("/raise", 3, 3),
                             ("/busy", 2, 2)):
        labels = dict(server=kind, script=script[loc], phase=phase_of(kind))
        buckets = sorted(
            (float(x.labels["le"]), x.value)
            for x in families["mruby_run_seconds"].samples
            if x.name == "mruby_run_seconds_bucket"
            and all(x.labels[k] == v for k, v in labels.items()))
        counts = [c for _, c in buckets]
        assert buckets[-1][0] == float("inf")
        assert counts == sorted(counts), "buckets are cumulative"
        assert counts[-1] == runs
        count = [x.value for x in families["mruby_run_seconds"].samples
                 if x.name == "mruby_run_seconds_count"
                 and x.labels == labels]
        assert count == [runs]
        smp = samples(s)
        assert value(smp, "mruby_responses_5xx_total", **labels) == fails


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_json_has_the_same_figures(kind, apache, nginx):
    s, script = metrics_server(kind, apache, nginx, {"/raise": RAISES})
    hit(s, "/raise", 5, 500)

    r = s.get("/metrics?format=json")
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "application/json"
    doc = json.loads(r.text)
    assert doc["server"] == kind
    row, = [x for x in doc["scripts"] if x["script"] == script["/raise"]]
    assert row["phase"] == phase_of(kind)
    assert row["runs"] == 5
    assert row["exceptions"] == {"ArgumentError": 5}
    assert row["run_seconds_buckets"][-1][1] <= 5


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_metrics_refuses_post(kind, apache, nginx):
    s, _ = metrics_server(kind, apache, nginx, {})
    assert s.post("/metrics", data="x").status_code == 405


# 150 ms suspended, then a little Ruby
SLEEPS = 'S = get_server_class; S::Async.sleep 150; S.rputs "woke"\n'


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_time_waiting_is_counted_in_the_run_and_apart(kind, apache, nginx):
    s, script = metrics_server(kind, apache, nginx, {"/sleep": SLEEPS})
    hit(s, "/sleep", 2, 200)

    smp = samples(s)
    labels = dict(server=kind, script=script["/sleep"], phase=phase_of(kind))
    waited = value(smp, "mruby_wait_seconds_total", **labels)
    took = value(smp, "mruby_run_seconds_sum", **labels)
    assert 0.3 <= waited <= took
    # both runs took over 100 ms: none in the buckets up to 0.1
    assert (("mruby_run_seconds_bucket",
             tuple(sorted(dict(labels, le="0.1").items()))) in smp)
    assert value(smp, "mruby_run_seconds_bucket", **labels, le="0.1") == 0
    assert value(smp, "mruby_run_seconds_bucket", **labels, le="+Inf") == 2


WRITES = 'S = get_server_class; S.rputs "hello"; S.echo "ab"\n'
WRITES_AFTER_A_WAIT = ('S = get_server_class; S.rputs "x" * 100; '
                       'S::Async.sleep 10; S.rputs "y" * 20\n')


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_bytes_written_are_counted(kind, apache, nginx):
    """rputs and echo (with its newline), on the stack of the request and
    on a coroutine across a wait; JSON says the same."""
    s, script = metrics_server(kind, apache, nginx, {
        "/writes": WRITES, "/waits": WRITES_AFTER_A_WAIT})
    hit(s, "/writes", 6, 200)
    hit(s, "/waits", 3, 200)

    smp = samples(s)
    for path, n, size in (("/writes", 6, 8), ("/waits", 3, 120)):
        labels = dict(server=kind, script=script[path],
                      phase=phase_of(kind))
        assert value(smp, "mruby_written_bytes_total", **labels) == n * size

    doc = json.loads(s.get("/metrics?format=json").text)
    row, = [x for x in doc["scripts"] if x["script"] == script["/waits"]]
    assert row["bytes_written"] == 360


# 80 ms of Ruby, then 100 ms suspended
BUSY_THEN_SLEEPS = """S = get_server_class
t = Time.now
while Time.now - t < 0.08
end
S::Async.sleep 100
S.rputs "done"
"""


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_slow_runs_are_logged_once_each(kind, apache, nginx):
    s, script = metrics_server(kind, apache, nginx, {
        "/slow": BUSY_THEN_SLEEPS, "/hello": HELLO}, slow_log="50ms")
    hit(s, "/slow", 3, 200)
    hit(s, "/hello", 5, 200)

    pattern = re.compile(
        r"mruby: slow run of (\S+) in (\w+): ([\d.]+) ms "
        r"\(([\d.]+) ms in Ruby, ([\d.]+) ms waiting\), "
        r"over the slow-run log's 50 ms")
    for _ in range(50):
        lines = [m for m in map(pattern.search, s.error_log().splitlines())
                 if m]
        if len(lines) >= 3:
            break
        time.sleep(0.1)
    assert len(lines) == 3, s.error_log()[-3000:]
    for m in lines:
        assert m.group(1) == script["/slow"]
        assert m.group(2) == phase_of(kind)
        took, ruby, waited = (float(m.group(i)) for i in (3, 4, 5))
        assert ruby >= 80 and waited >= 100
        assert abs(took - ruby - waited) <= 0.2


REDIS = """S = get_server_class
r = Redis.new("127.0.0.1", S::Request.new.args.to_i, timeout: 2)
r.set("k", "a string")
begin
  r.incr("k")
rescue Redis::ReplyError
end
S.rputs r.get("k")
"""


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_redis_commands_and_errors_are_counted(kind, apache, nginx,
                                               redis_server):
    s, script = metrics_server(kind, apache, nginx, {"/redis": REDIS})
    for _ in range(4):
        r = s.get(f"/redis?{redis_server.port}")
        assert r.text == "a string", s.error_log()[-2000:]

    smp = samples(s)
    labels = dict(server=kind, script=script["/redis"], phase=phase_of(kind))
    assert value(smp, "mruby_redis_commands_total", **labels) == 12
    assert value(smp, "mruby_redis_errors_total", **labels) == 4


ONE_CHILD = """\
StartServers 1
ServerLimit 1
ThreadsPerChild 64
ThreadLimit 64
MinSpareThreads 1
MaxSpareThreads 128
MaxRequestWorkers 64
"""


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_live_edits_are_counted(kind, apache, nginx):
    """One worker process: the version compiled at startup is not a
    compile of the worker's; an edit is a compile and a reload; a syntax
    error a failed compile, and the last good version keeps serving."""
    if kind == "apache":
        s = apache("<Location /metrics>\n    SetHandler mruby-metrics\n"
                   "</Location>\n<Location /live>\n"
                   "    mrubyHandlerMiddle {dir}/live.rb\n</Location>",
                   mpm_conf=ONE_CHILD,
                   files={"live.rb": 'get_server_class.rputs "v1"\n'})
    else:
        s = nginx("location /metrics { mruby_metrics; }\n"
                  "location /live { mruby_content_handler {dir}/live.rb; }",
                  files={"live.rb": 'get_server_class.rputs "v1"\n'})
    labels = dict(server=kind, script=os.path.join(s.dir, "live.rb"),
                  phase=phase_of(kind))

    def counts():
        smp = samples(s)
        return [value(smp, f"mruby_{name}_total", **labels)
                for name in ("compiles", "reloads", "compile_failures",
                             "kept_last_good")]

    assert s.get("/live").text == "v1"
    assert counts() == [0, 0, 0, 0]

    s.write("live.rb", 'get_server_class.rputs "v2"\n')
    assert s.get_edited("/live", "v2").text == "v2"
    assert counts() == [1, 1, 0, 0]

    s.write("live.rb", 'get_server_class.rputs "v3" +\n')
    for _ in range(100):     # until a run has seen the change
        assert s.get("/live").text == "v2"
        if "the previous version is still served" in s.error_log():
            break
        time.sleep(0.05)
    assert counts() == [1, 1, 1, 1]


# Each run waits, on its coroutine, until 4 runs are in (5 s at most).
MEET = """S = get_server_class
d = S::SharedDict.new("meet")
d.incr("in", 1, init: 0)
100.times { break if d["in"] >= 4; S::Async.sleep 50 }
S.rputs d["in"].to_s
"""


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_workers_and_shared_dicts_are_reported(kind, apache, nginx):
    s, _ = metrics_server(kind, apache, nginx, {"/meet": MEET},
                          shared_dict=True)
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        answers = list(ex.map(
            lambda _: s.get("/meet", headers={"Connection": "close"}).text,
            range(4)))
    assert answers == ["4"] * 4, s.error_log()[-2000:]

    smp = samples(s)
    pids = {str(p) for p in s.worker_pids()}

    def by_worker(name):
        return {dict(k[1])["worker"]: v for k, v in smp.items()
                if k[0] == name}

    interps = by_worker("mruby_worker_interpreters")
    assert set(interps) == pids
    assert sum(interps.values()) >= 1
    assert set(by_worker("mruby_worker_coroutines").values()) == {0}
    # the 4 runs waited at the same time, wherever they ran
    assert sum(by_worker("mruby_worker_coroutines_peak").values()) == 4

    doc = json.loads(s.get("/metrics?format=json").text)
    assert {str(w["pid"]) for w in doc["workers"]} == pids

    meet = dict(server=kind, dict="meet")
    assert value(smp, "mruby_shared_dict_keys", **meet) == 1
    assert 0 < value(smp, "mruby_shared_dict_free_bytes", **meet) <= 65536
    assert value(smp, "mruby_shared_dict_evictions_total", **meet) == 0

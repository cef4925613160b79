"""Scripts share the interpreters of their process but not their state;
edits apply without a restart; threads run scripts in parallel."""

import concurrent.futures
import os
import time

import pytest
import requests

import harness

# One prefork child: every request runs in the same interpreter, so what
# one script leaves behind would be seen by the next.
ONE_CHILD = ("StartServers 1\nMinSpareServers 1\nMaxSpareServers 1\n"
             "ServerLimit 1\nMaxRequestWorkers 1\n")


def mruby_errors(log):
    return [line for line in log.splitlines() if "[mruby:error]" in line]


SCRIPT_A = """\
seen = [$iso_global.inspect, Object.const_defined?(:IsoConst).to_s,
        self.instance_variable_get(:@iso_ivar).inspect]
$iso_global = "from A"
IsoConst = "from A"
@iso_ivar = "from A"
def iso_method; end
Apache.rputs "A saw " + seen.join(" ")
"""

SCRIPT_B = """\
Apache.rputs "B saw " + [$iso_global.inspect,
  Object.const_defined?(:IsoConst).to_s,
  self.instance_variable_get(:@iso_ivar).inspect].join(" ")
"""


def one_interpreter_apache(apache, conf, files=None, **kw):
    return apache(conf, mpm="prefork", mpm_conf=ONE_CHILD, files=files,
                  **kw)


@pytest.mark.parametrize("policy", ["stat", "forever", "never"])
def test_top_level_state_does_not_leak(apache, policy):
    a = one_interpreter_apache(apache, f"""
mrubyCodeCache {policy}
<Location /a>
    mrubyHandlerMiddle {{dir}}/a.rb
</Location>
<Location /b>
    mrubyHandlerMiddle {{dir}}/b.rb
</Location>
""", files={"a.rb": SCRIPT_A, "b.rb": SCRIPT_B})
    pids = set()
    for _ in range(2):
        assert a.get("/a").text == "A saw nil false nil"
        assert a.get("/b").text == "B saw nil false nil"
        pids.update(a.worker_pids())
    assert len(pids) == 1


def test_inline_scripts_are_isolated_too(apache):
    a = one_interpreter_apache(apache, """
<Location /a>
    mrubyHandlerMiddleCode 'Apache.rputs $g.inspect; $g = 1; K = 1'
</Location>
<Location /b>
    mrubyHandlerMiddleCode 'Apache.rputs [$g.inspect, Object.const_defined?(:K)].inspect'
</Location>
""")
    assert a.get("/a").text == "nil"
    assert a.get("/a").text == "nil"
    assert a.get("/b").text == '["nil", false]'


def test_phases_of_one_request_share_nothing_at_top_level(apache):
    """Even within a request, a global set in fixups is gone by the
    handler: requests share through notes, not globals."""
    a = one_interpreter_apache(apache, """
<Location /p>
    mrubyFixupsMiddleCode '$x = 1; Apache::Request.new.notes["x"] = "1"'
    mrubyHandlerMiddleCode 'Apache.rputs [$x.inspect, Apache::Request.new.notes["x"]].inspect'
</Location>
""")
    assert a.get("/p").text == '["nil", "1"]'


def test_errors_leave_no_state_behind(apache):
    a = one_interpreter_apache(apache, """
<Location /fail>
    mrubyHandlerMiddleCode '$leak = 1; LEAK = 1; raise "x"'
</Location>
<Location /check>
    mrubyHandlerMiddleCode 'Apache.rputs [$leak.inspect, Object.const_defined?(:LEAK)].inspect'
</Location>
""")
    assert a.get("/fail").status_code == 500
    assert a.get("/check").text == '["nil", false]'


@pytest.mark.parametrize("mpm", ["event", "prefork"])
def test_stat_edit_applies_without_restart(apache, mpm):
    def version(v):
        return f'Apache.rputs "version {v} #{{{harness.PID_RB}}}"'

    def versions_and_pids(expect):
        rs = a.get_spread_edited(
            "/e", lambda r: r.text.rsplit(" ", 1)[0] == expect)
        answers = [r.text.rsplit(" ", 1) for r in rs]
        return {v for v, _ in answers}, {pid for _, pid in answers}

    a = apache("<Location /e>\nmrubyHandlerMiddle {dir}/e.rb\n</Location>",
               mpm=mpm, files={"e.rb": version(1)})
    assert versions_and_pids("version 1")[0] == {"version 1"}
    master, workers = a.master_pid(), set(a.worker_pids())
    for v in range(2, 6):
        a.write("e.rb", version(v))
        # every child process and thread sees the new version (once its
        # watcher thread has read the edit: docs/apache.md)
        seen, pids = versions_and_pids(f"version {v}")
        assert seen == {f"version {v}"}
        assert len(pids) >= 2
    # no restart: the same processes served every version
    assert a.master_pid() == master
    assert workers and workers <= set(a.worker_pids())


def test_same_size_same_second_edit_is_seen(apache):
    """An edit that keeps the size within the same second still counts
    (the file's identity is more than size and whole seconds)."""
    a = apache("<Location /e>\nmrubyHandlerMiddle {dir}/e.rb\n</Location>",
               files={"e.rb": 'Apache.rputs "AAAA"'})
    assert a.get("/e").text == "AAAA"
    a.write("e.rb", 'Apache.rputs "BBBB"')
    assert a.get_edited("/e", "BBBB").text == "BBBB"


def test_replaced_file_is_seen(apache):
    """Editors often write a new file and rename it over the old one."""
    a = apache("<Location /e>\nmrubyHandlerMiddle {dir}/e.rb\n</Location>",
               files={"e.rb": 'Apache.rputs "old"'})
    assert a.get("/e").text == "old"
    tmp = a.write("e.rb.new", 'Apache.rputs "renamed in"')
    os.rename(tmp, os.path.join(a.dir, "e.rb"))
    assert a.get_edited("/e", "renamed in").text == "renamed in"


def test_policies_on_edit(apache):
    """stat sees edits; forever (the cache flag) keeps the startup
    bytecode; never recompiles every time."""
    a = apache("""
<Location /stat>
    mrubyHandlerMiddle {dir}/p.rb
</Location>
<Location /cache>
    mrubyHandlerMiddle {dir}/p.rb cache
</Location>
<Location /never>
    mrubyCodeCache never
    mrubyHandlerMiddle {dir}/p.rb
</Location>
""", files={"p.rb": 'Apache.rputs "one"'})
    assert [a.get(p).text for p in ("/stat", "/cache", "/never")] == \
        ["one"] * 3
    a.write("p.rb", 'Apache.rputs "two!"')
    a.get_edited("/stat", "two!")
    assert [a.get(p).text for p in ("/stat", "/cache", "/never")] == \
        ["two!", "one", "two!"]


def test_code_cache_scope(apache):
    """mrubyCodeCache applies to the file scripts declared after it, from
    the nearest container, virtual host or main server."""
    a = apache("""
mrubyCodeCache forever
<Location /main>
    mrubyHandlerMiddle {dir}/p.rb
</Location>
<Location /dir>
    mrubyCodeCache stat
    mrubyHandlerMiddle {dir}/p.rb
</Location>
<VirtualHost 127.0.0.1:{port}>
    ServerName v.example
    mrubyCodeCache never
    <Location /vhost>
        mrubyHandlerMiddle {dir}/p.rb
    </Location>
</VirtualHost>
<VirtualHost 127.0.0.1:{port}>
    ServerName w.example
    <Location /vhost>
        mrubyHandlerMiddle {dir}/p.rb
    </Location>
</VirtualHost>
""", files={"p.rb": 'Apache.rputs "one"'})
    # the first virtual host is also the default one for 127.0.0.1
    a.write("p.rb", 'Apache.rputs "two!"')
    assert a.get("/main", headers={"Host": "w.example"}).text == "one"
    assert a.get_edited("/dir", "two!",
                        headers={"Host": "w.example"}).text == "two!"
    assert a.get("/vhost", headers={"Host": "v.example"}).text == "two!"
    assert a.get("/vhost", headers={"Host": "w.example"}).text == "one"


def rendezvous(n):
    """A location that answers "together" once n requests run its script at
    the same time (counted in the shared dictionary "meet"), or "alone"
    after 20 s of waiting: requests that must overlap are shown to, without
    timing them.  The script waits in the fixups phase, where a sleep holds
    its thread and interpreter (a content handler's would give them back on
    the event MPM); the handler prints what it found."""
    return ("mrubySharedDict meet 1m\n<Location /meet>\nmrubyFixupsMiddleCode"
            " 'd = Apache::SharedDict.new(\"meet\"); d.incr(\"in\", 1, "
            "init: 0); t = Time.now + 20; Apache.sleep 0.01 while "
            f"d[\"in\"] < {n} && Time.now < t; "
            "Apache::Request.new.notes[\"meet\"] = (d[\"in\"] >= "
            f"{n} ? \"together\" : \"alone\")'\n"
            "mrubyHandlerMiddleCode "
            "'Apache.rputs Apache::Request.new.notes[\"meet\"]'\n"
            "</Location>\n")


def test_64_scripts_run_at_once(apache):
    """64 requests to a script that waits for the others all meet inside
    it: no lock serializes scripts."""
    a = apache(rendezvous(64), mpm="event")
    fetch = lambda _: requests.get(a.url("/meet"), timeout=60)
    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        results = list(pool.map(fetch, range(64)))
    assert [r.text for r in results] == ["together"] * 64


def test_interpreter_is_reused(apache):
    """An interpreter lives across requests: what child_init put there is
    the same object every time."""
    a = one_interpreter_apache(apache, """
mrubyChildInitMiddleCode '$born = Apache::Scoreboard.new.pid.to_s + ":" + rand(1000000000).to_s'
<Location /born>
    mrubyHandlerMiddleCode 'Apache.rputs $born'
</Location>
""")
    seen = {a.get("/born").text for _ in range(5)}
    assert len(seen) == 1


# One event child with many threads, for counting its interpreters.
ONE_EVENT_CHILD = ("StartServers 1\nServerLimit 1\nThreadsPerChild 32\n"
                   "ThreadLimit 32\nMaxRequestWorkers 32\n"
                   "MinSpareThreads 1\nMaxSpareThreads 32\n")


def test_threads_share_as_many_interpreters_as_run_at_once(apache):
    """A threaded child makes as many interpreters as it runs scripts at
    once, not one per thread: requests one after another, each on a new
    connection (so on whichever thread the MPM picks), all run in one
    interpreter; eight overlapping requests need eight; after them, no new
    one is made.  child_init runs once per interpreter made."""
    a = apache("""
mrubyChildInitMiddleCode 'Apache.errlogger Apache::APLOG_NOTICE, "interpreter made"'
<Location /hello>
    mrubyHandlerMiddleCode 'Apache.rputs "hello"'
</Location>
""" + rendezvous(8), mpm="event", mpm_conf=ONE_EVENT_CHILD)

    def made():
        return a.error_log().count("interpreter made")

    for _ in range(40):
        assert requests.get(a.url("/hello"), timeout=10).text == "hello"
    assert made() == 1

    fetch = lambda _: requests.get(a.url("/meet"), timeout=60).text
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert list(pool.map(fetch, range(8))) == ["together"] * 8
    assert made() == 8

    for _ in range(40):
        assert requests.get(a.url("/hello"), timeout=10).text == "hello"
    assert made() == 8


KEEP_INIT = """\
$kept = {
  "request" => Apache::Request.new,
  "headers_in" => Apache::Headers_in.new,
  "notes" => Apache::Notes.new,
  "connection" => Apache::Connection.new,
  "finfo" => Apache::Finfo.new,
}
KEPT = []
{ "request" => -> { $kept["request"].uri },
  "headers_in" => -> { $kept["headers_in"]["Host"] },
  "notes" => -> { $kept["notes"]["n"] = "x" },
  "connection" => -> { $kept["connection"].remote_ip },
  "finfo" => -> { $kept["finfo"].size },
}.each do |name, use|
  begin
    use.call
    Apache.errlogger Apache::APLOG_NOTICE, "kept #{name}: no error"
  rescue RuntimeError => e
    Apache.errlogger Apache::APLOG_NOTICE, "kept #{name}: #{e.message}"
  end
end
"""

# Stores run-bound objects (and a closure over them) in the startup
# constant KEPT, during an output filter run and an authn run.
KEEP_FILTER = """\
f = Apache::Filter.new
r = Apache::Request.new
KEPT << f << Proc.new { r.uri + " " + r.headers_in["X-Id"].to_s }
"""

KEEP_AUTHN = """\
KEPT << Apache::AuthnProvider.new
Apache.return Apache::AuthnProvider::AUTH_GRANTED
"""

USE_KEPT = """\
out = []
out << $kept["request"].uri
out << $kept["headers_in"]["X-Id"].to_s
$kept["notes"]["n"] = "set"
out << Apache::Request.new.notes["n"]
out << KEPT[1].call
[KEPT[0], KEPT[2]].each do |obj|
  begin
    obj.respond_to?(:body) ? obj.body : obj.user
    out << "no error"
  rescue RuntimeError => e
    out << e.message
  end
end
Apache.rputs out.join("|")
"""


def test_objects_kept_past_their_request(apache):
    """Request, tables, Filter and AuthnProvider objects hold no pointer to
    the request they were made in: kept in a startup global or constant,
    they reach the request running now, and raise a clear error where there
    is no such request or run -- never a crash of the worker."""
    a = apache("""
mrubyChildInitMiddle {dir}/init.rb
<Location /f>
    mrubyOutputFilter {dir}/filter.rb
    SetOutputFilter mruby
</Location>
<Location /auth>
    AuthType Basic
    AuthName "kept"
    AuthBasicProvider mruby
    mrubyAuthnCheckPassword {dir}/authn.rb
    Require valid-user
</Location>
<Location /use>
    mrubyHandlerMiddle {dir}/use.rb
</Location>
""", mpm="prefork", mpm_conf=ONE_CHILD,
        files={"init.rb": KEEP_INIT, "filter.rb": KEEP_FILTER,
               "authn.rb": KEEP_AUTHN, "use.rb": USE_KEPT},
        docs={"f": "filtered", "auth": "authed"})
    for name in ("request", "headers_in", "notes", "connection", "finfo"):
        a.wait_log(f"kept {name}: no request: called outside a request")
    pid = a.worker_pids()
    assert a.get("/f", headers={"X-Id": "first"}).text == "filtered"
    assert a.get("/auth", auth=("u", "p")).text == "authed"
    for n in range(3):
        r = a.get("/use", headers={"X-Id": f"now{n}"})
        assert r.status_code == 200, a.error_log()[-2000:]
        assert r.text == "|".join([
            "/use", f"now{n}", "set", f"/use now{n}",
            "Apache::Filter is only available in an mrubyOutputFilter or "
            "mrubyInputFilter script",
            "Apache::AuthnProvider is only available in a script run as a "
            "mruby authn provider"])
    assert a.worker_pids() == pid
    assert mruby_errors(a.error_log()) == []


def test_blocks_kept_past_their_script_keep_their_variables(apache):
    """A block made at the top level of a script and kept (in a startup
    constant) still sees that script's variables after the script ended,
    after other scripts reused the VM stack, after the stack grew and after
    garbage collection; a child_init block keeps counting its own counter."""
    a = apache("""
mrubyChildInitMiddleCode 'KEPT = []; counter = 0; COUNT = -> { counter += 1 }'
<Location /keep>
    mrubyHandlerMiddleCode 'g = "kept value"; n = 42; KEPT << Proc.new { "#{g} #{n}" }; Apache.rputs "kept"'
</Location>
<Location /deep>
    mrubyHandlerMiddleCode 'def deep(n, a, b, c, d, e, f, g); n == 0 ? 0 : 1 + deep(n - 1, a, b, c, d, e, f, g); end; x = "other"; y = [1, 2]; Apache.rputs deep(300, 1, 2, 3, 4, 5, 6, 7).to_s'
</Location>
<Location /call>
    mrubyHandlerMiddleCode 'junk = Array.new(500) { |i| "junk" * i }; GC.start; Apache.rputs KEPT.map(&:call).inspect + " " + COUNT.call.to_s'
</Location>
""", mpm="prefork", mpm_conf=ONE_CHILD)
    assert a.get("/keep").text == "kept"
    assert a.get("/call").text == '["kept value 42"] 1'
    assert a.get("/deep").text == "300"
    assert a.get("/call").text == '["kept value 42"] 2'
    assert a.get("/keep").text == "kept"
    assert a.get("/call").text == '["kept value 42", "kept value 42"] 3'
    assert mruby_errors(a.error_log()) == []


NESTED_FILTER = """\
$from_filter = "global"
FROM_FILTER = "constant"
@from_filter = "ivar"
f = Apache::Filter.new
raise "filter broke" if f.body == "bad"
f.body = f.body.upcase
"""

NESTED_HANDLER = """\
r = Apache::Request.new
begin
  body = r.body
rescue RuntimeError => e
  body = "rescued: #{e.message}"
end
Apache.rputs [body, $from_filter, Object.const_defined?(:FROM_FILTER),
              @from_filter].inspect
"""

LEFT_BEHIND = """\
Apache.rputs [$from_filter, Object.const_defined?(:FROM_FILTER),
  Apache::Request.const_defined?(:FROM_FILTER), @from_filter].inspect
"""


def test_script_run_inside_another_is_still_top_level(apache):
    """An input filter script runs inside the handler script that reads
    r.body, in an interpreter of its own (the handler's is not idle): the
    handler does not see what the filter set, its top-level constants go to
    Object like any script's (not into Apache::Request, whose method was
    running), everything it set is gone after the request, and its error
    reaches the outer script as an exception it can rescue."""
    # info: the one-line error (at debug its frames get lines of their own)
    a = apache("""
<Location /in>
    mrubyInputFilter {dir}/in.rb
    SetInputFilter mruby
    mrubyHandlerMiddle {dir}/handler.rb
</Location>
<Location /left>
    mrubyHandlerMiddle {dir}/left.rb
</Location>
""", mpm="prefork", mpm_conf=ONE_CHILD, loglevel="info",
        files={"in.rb": NESTED_FILTER, "handler.rb": NESTED_HANDLER,
               "left.rb": LEFT_BEHIND})
    nothing = '[nil, false, false, nil]'
    assert a.get("/left").text == nothing
    for _ in range(2):
        r = a.post("/in", data=b"abc")
        assert r.text == '["ABC", nil, false, nil]'
        assert a.get("/left").text == nothing
    r = a.post("/in", data=b"bad")
    assert r.status_code == 200
    assert r.text == ('["rescued: error reading the request body '
                      '(HTTP status 500)", '
                      'nil, false, nil]')
    assert a.get("/left").text == nothing
    line, = mruby_errors(a.wait_log("filter broke"))
    assert "mrubyInputFilter: RuntimeError: filter broke" in line
    assert f"{a.dir}/in.rb:5" in line


def test_stat_script_edited_while_threads_run_it(apache):
    """Every thread of the event MPM runs a `stat` script while it is
    rewritten: each answer is one whole version, none fails, and the last
    version is what every thread serves in the end."""
    a = apache("<Location /e>\nmrubyHandlerMiddle {dir}/e.rb\n</Location>",
               mpm="event", files={"e.rb": 'Apache.rputs "version 0"'})
    versions = 12
    fetch = lambda _: requests.get(a.url("/e"), timeout=30)
    seen = set()
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        for v in range(1, versions + 1):
            pending = [pool.submit(fetch, i) for i in range(32)]
            # written aside and renamed in, as editors do: a reader never
            # meets a half-written file
            tmp = a.write("e.rb.new", f'Apache.rputs "version {v}"')
            os.rename(tmp, os.path.join(a.dir, "e.rb"))
            for f in pending:
                r = f.result()
                assert r.status_code == 200, a.error_log()[-2000:]
                seen.add(r.text)
        # each child serves the last version once its watcher thread has
        # read the rename (docs/apache.md)
        a.get_spread_edited("/e", f"version {versions}")
        last = [r.text for r in pool.map(fetch, range(64))]
    assert seen <= {f"version {v}" for v in range(versions + 1)}
    assert last == [f"version {versions}"] * 64
    assert mruby_errors(a.error_log()) == []


def test_many_handler_scripts_first_used_at_once(apache):
    """mruby-script files met for the first time by many threads at once:
    each is compiled once per process and each answers for itself."""
    n = 40
    a = apache("""
<Location /run/>
    SetHandler mruby-script
    mrubyHandlerEnable On
</Location>
<Location /cached/>
    SetHandler mruby-script
    mrubyHandlerEnable On
    mrubyCodeCache forever
</Location>
""", mpm="event",
        docs={**{f"run/s{i}.rb": f'Apache.rputs "script {i}"'
                 for i in range(n)},
              **{f"cached/s{i}.rb": f'Apache.rputs "cached {i}"'
                 for i in range(n)}})
    paths = [f"/run/s{i}.rb" for i in range(n)] + \
            [f"/cached/s{i}.rb" for i in range(n)]
    fetch = lambda p: requests.get(a.url(p), timeout=30).text
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        got = list(pool.map(fetch, paths * 2))
    want = [f"script {i}" for i in range(n)] + \
           [f"cached {i}" for i in range(n)]
    assert got == want * 2
    assert mruby_errors(a.error_log()) == []


def test_worker_mpm_serves_and_follows_edits(apache):
    """The worker MPM (threads, no event loop): scripts run, state stays
    apart, an edit applies."""
    a = apache("""
<Location /w>
    mrubyHandlerMiddle {dir}/w.rb
</Location>
""", mpm="worker", files={"w.rb": 'Apache.rputs "one #{$seen.inspect}"; '
                                   '$seen = 1'})
    assert {r.text for r in a.get_spread("/w", count=12)} == {"one nil"}
    a.write("w.rb", 'Apache.rputs "two"')
    assert {r.text for r in a.get_spread_edited("/w", "two", count=12)} \
        == {"two"}

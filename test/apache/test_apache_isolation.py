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

"""The time budget of a run (mruby_run_timeout, mrubyRunTimeout;
docs/security.md): a script that loops for ever, in Ruby or in a block
that C calls, is stopped once its budget is spent, whatever it rescues;
the request gets a 500, the error log one line naming where it looped and
for how long, and the same worker serves the next request.  In the content
phase, on a coroutine (a script that names sleep), in an earlier phase and
in a body filter, on nginx and on Apache's event and prefork MPMs.  A
graceful stop or reload during such a run ends once the run is stopped; a
run stuck inside C, which no check reaches, ends its worker, which the
server replaces."""

import datetime
import os
import re
import signal
import threading
import time

import pytest

from test_run_depth import servers as depth_servers

BUDGET_MS = 200

# expression, and what the log line names
CASES = {
    "loop": ("loop {}", "RunTimeout"),
    "while": ("while true; end", "RunTimeout"),
    "modifier_while": ("x += 1 while true", "RunTimeout"),
    "sort_by": ("[3, 1, 2].sort_by { |v| loop { x += v } }", "RunTimeout"),
    "times": ("10.times { |i| redo if i == 5 }", "RunTimeout"),
    "rescue_exception": ("begin; loop {}; rescue Exception; "
                         "x = 1; end", "RunTimeout"),
    "rescue_in_loop": ("loop { begin; loop {}; rescue Exception; end }",
                       "RunTimeout"),
    "ensure": ("begin; raise 'first'; ensure; loop {}; end", "RunTimeout"),
    "retry": ("begin; raise 'again'; rescue; retry; end", "RunTimeout"),
    # bounded by Oniguruma's retry limits (0.05 s), not by the budget
    "backtracking": ('("a" * 40 + "!") =~ /(a+)+$/', "RegexpError"),
    # bounded by the depth limit
    "recursion": ("def f; f; end; f", "SystemStackError"),
    # stopped in the loop, then loops again in its ensure: stopped once
    # more after the ensure's grace, with one log line
    "ensure_after_stop": ("begin; loop {}; ensure; x += 1 while true; end",
                          "RunTimeout"),
}
# each of the others inside an ensure clause, on the same line
CASES.update({
    f"in_ensure_{case}": (f"begin; x = 1; ensure; {expr}; end", named)
    for case, (expr, named) in list(CASES.items())
    if case in ("while", "modifier_while", "sort_by", "times", "retry",
                "backtracking", "recursion")})


def servers(kind, apache, nginx, expr, timeout=f"{BUDGET_MS}ms"):
    """test_run_depth's servers, expr on line 2 of thread.rb and line 3
    of coro.rb (after `sleep 0`), with a budget (None: no directive, the
    default of 1 s)."""
    return depth_servers(
        kind, apache, nginx, f"x = 0\n{expr}",
        apache_conf=f"mrubyRunTimeout {timeout}\n" if timeout else "",
        nginx_conf=f"mruby_run_timeout {timeout};\n" if timeout else "")


KINDS = ["nginx", "apache-event", "apache-prefork"]

# Scripts that try to turn the checks off before they loop: by the check's
# name on the classes a send to self would search, on every class there is
# (ObjectSpace), and by removing the stop's class.  One line each, so that
# the loop is at thread.rb:2.
UNCHECKS = {
    "remove_and_undef": (
        "class BasicObject; def method_missing(*); end; end; "
        "[:remove_method, :undef_method].each { |m| "
        "BasicObject.send(m, :'(run check)') rescue nil }; loop {}"),
    "alias_in_object": (
        "Object.send(:alias_method, :'(run check)', :itself); "
        "singleton_class.send(:alias_method, :'(run check)', :itself); "
        "loop {}"),
    "every_class": (
        "ObjectSpace.each_object(Class) { |c| "
        "c.send(:alias_method, :'(run check)', :itself) rescue nil }; "
        "ObjectSpace.each_object(BasicObject) { |o| "
        "o.extend(Module.new { alias_method :'(run check)', :itself }) "
        "if o.class.superclass == BasicObject rescue nil }; loop {}"),
    "stop_class_removed": (
        "get_server_class.send(:remove_const, :RunTimeout) rescue nil; "
        "loop {}"),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_runaway_script_is_stopped_with_500(kind, case, apache, nginx):
    expr, named = CASES[case]
    s = servers(kind, apache, nginx, expr)
    first = s.get("/probe")
    assert first.status_code == 200, s.error_log()[-2000:]
    pid = first.text.split(" ")[0]

    for path in ("/thread", "/coro", "/access", "/filter/doc"):
        t0 = time.monotonic()
        r = s.get(path)
        took = time.monotonic() - t0
        log = s.error_log()
        assert r.status_code == 500, (path, r.status_code, log[-3000:])
        # stopped by the budget, not by some other end; the upper bound
        # is loose: the machine is shared
        if named == "RunTimeout":
            assert took >= BUDGET_MS / 1000 * 0.9, (path, took)
        assert took < 10, (path, took)
        assert s.get("/probe").text == f"{pid} alive", (path, log[-3000:])

    log = s.error_log()
    lines = [ln for ln in log.splitlines() if named in ln]
    assert len(lines) >= 4, log[-3000:]
    if named == "RunTimeout":
        for ln in lines:
            assert f"time budget of {BUDGET_MS} ms is spent" in ln, ln
            assert "thread.rb:2" in ln or "coro.rb:3" in ln, ln
    assert "signal" not in log


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", sorted(UNCHECKS))
def test_a_script_cannot_turn_the_checks_off(kind, case, apache, nginx):
    s = servers(kind, apache, nginx, UNCHECKS[case])
    pid = s.get("/probe").text.split(" ")[0]

    for path in ("/thread", "/coro", "/access", "/filter/doc"):
        r = s.get(path, timeout=10)
        log = s.error_log()
        assert r.status_code == 500, (path, r.status_code, log[-3000:])
        assert s.get("/probe").text == f"{pid} alive", (path, log[-3000:])

    lines = [ln for ln in s.error_log().splitlines() if "RunTimeout" in ln]
    assert len(lines) == 4, s.error_log()[-3000:]
    for ln in lines:
        assert f"time budget of {BUDGET_MS} ms is spent" in ln, ln
        assert "thread.rb:2" in ln or "coro.rb:3" in ln, ln


@pytest.mark.parametrize("kind", KINDS)
def test_other_requests_are_served_during_a_runaway_run(kind, apache, nginx):
    # nginx runs a worker's requests one after the other: the probe waits
    # for the budget; Apache's other threads (event) or the next request
    # of the prefork child likewise, at most one budget late
    s = servers(kind, apache, nginx, "loop {}")
    pid = s.get("/probe").text.split(" ")[0]
    answers = []
    t = threading.Thread(target=lambda: answers.append(
        s.get("/thread").status_code))
    t.start()
    time.sleep(0.05)
    r = s.get("/probe", timeout=10)
    t.join(10)
    assert r.text == f"{pid} alive"
    assert answers == [500]


@pytest.mark.parametrize("kind", KINDS)
def test_time_waiting_is_not_counted(kind, apache, nginx):
    # 3 sleeps of 150 ms: 450 ms waiting, under a budget of 200 ms
    s = servers(kind, apache, nginx,
                "3.times { sleep 0.15 }\nget_server_class.rputs 'slept'")
    r = s.get("/coro")
    assert r.status_code == 200, s.error_log()[-3000:]
    assert r.text == "slept"


@pytest.mark.parametrize("kind", KINDS)
def test_budget_zero_is_none(kind, apache, nginx):
    s = servers(kind, apache, nginx,
                "t = Time.now\nwhile Time.now - t < 0.4; end\n"
                "get_server_class.rputs 'done'", timeout="0")
    r = s.get("/thread")
    assert r.status_code == 200, s.error_log()[-3000:]
    assert r.text == "done"


def start_runaway(s):
    """GET /thread in a thread of its own, begun 0.3 s ago: the thread and
    the list its status (or its connection's error) goes to."""
    answers = []

    def runaway():
        try:
            answers.append(s.get("/thread").status_code)
        except Exception as e:  # the connection may close without one
            answers.append(repr(e))

    t = threading.Thread(target=runaway)
    t.start()
    time.sleep(0.3)
    return t, answers


@pytest.mark.parametrize("kind", KINDS)
def test_graceful_stop_during_a_runaway_run(kind, apache, nginx):
    # the default budget, 1 s
    s = servers(kind, apache, nginx, "loop {}", timeout=None)
    assert s.get("/probe").status_code == 200
    t, answers = start_runaway(s)
    t0 = time.monotonic()
    # nginx: SIGQUIT; Apache: graceful-stop (SIGWINCH)
    os.kill(s.master_pid(), signal.SIGQUIT if kind == "nginx"
            else signal.SIGWINCH)
    s.proc.wait(timeout=30)
    took = time.monotonic() - t0
    t.join(30)
    # the run had 0.7 s of its budget left; before, the worker never saw
    # the stop
    assert took < 10, took
    assert answers == [500], (answers, s.error_log()[-3000:])


@pytest.mark.parametrize("kind", KINDS)
def test_graceful_reload_during_a_runaway_run(kind, apache, nginx):
    # the default budget, 1 s; nginx: SIGHUP, Apache: graceful (SIGUSR1).
    # The old worker ends once its run is stopped, and the new one serves
    s = servers(kind, apache, nginx, "loop {}", timeout=None)
    old = s.get("/probe").text.split(" ")[0]
    t, answers = start_runaway(s)
    t0 = time.monotonic()
    if kind == "nginx":
        s.reload()
    else:
        s.graceful()
    took = time.monotonic() - t0
    t.join(30)
    assert took < 10, took
    assert answers == [500], (answers, s.error_log()[-3000:])
    assert int(old) not in s.worker_pids()
    new = s.get("/probe").text.split(" ")[0]
    assert new != old
    assert s.get("/thread").status_code == 500
    assert "RunTimeout" in s.error_log()


@pytest.mark.parametrize("kind", KINDS)
def test_run_stuck_in_c_ends_its_worker(kind, apache, nginx):
    # opening a fifo no one writes blocks in open(2): C, no check
    s = servers(kind, apache, nginx,
                'File.open(File.dirname(__FILE__) + "/fifo") { |f| f.read }')
    os.mkfifo(os.path.join(s.dir, "fifo"))
    first = s.get("/probe")
    pid = first.text.split(" ")[0]

    try:
        r = s.get("/thread", timeout=30)
        status = r.status_code
    except Exception:  # the worker ended: no answer
        status = None
    assert status in (None, 500), status
    log = s.wait_log("still inside C", timeout=15)
    line = [ln for ln in log.splitlines() if "still inside C" in ln][0]
    assert "thread.rb:2" in line, line
    # made on the clock thread without the server's log function or libc's
    # time and stdio: a UTC stamp of its own, once
    m = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC\] \[mruby:alert\] "
                 r"\[pid (\d+)\] mruby: a run is still inside C \d+ ms after "
                 r"its time budget ended, at .*thread\.rb:2: ending this "
                 r"process", line)
    assert m, line
    stamp = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    assert abs((now - stamp).total_seconds()) < 120, (line, now)
    assert m.group(2) == pid, (line, pid)
    assert log.count("still inside C") == 1, log[-3000:]

    # a new worker serves
    deadline = time.monotonic() + 20
    while True:
        try:
            r = s.get("/probe")
            if r.status_code == 200 and r.text.split(" ")[0] != pid:
                break
        except Exception:
            pass
        assert time.monotonic() < deadline, s.error_log()[-3000:]
        time.sleep(0.2)


@pytest.mark.parametrize("kind", KINDS)
def test_backtracking_search_stops_within_the_budget(kind, apache, nginx):
    # each start position backtracks less than retry_limit_in_match, the
    # whole search more than 10^7 steps (0.5 s): the budget of 200 ms
    # lowers retry_limit_in_search to what it has left
    s = servers(kind, apache, nginx, '(("a" * 18 + "!") * 60) =~ /(a+)+$/')
    r = s.get("/thread")
    assert r.status_code == 500
    log = s.error_log()
    assert ("retry_limit_in_search), as few as the run's time budget left"
            in log), log[-3000:]

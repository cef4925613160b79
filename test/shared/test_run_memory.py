"""A run's memory budget (mruby_run_memory / mrubyRunMemory, 128 MiB unless
configured): a script that asks for more gets NoMemoryError, the request a
500 with one log line naming the script's file:line, and the worker goes
on serving with its memory back near where it was (docs/security.md).  Before the
budget, `"x" * 2**34` and `Array.new(2**31)` asked malloc for 16 and 32
GiB and an Array appended to forever grew until malloc failed (checked
under `ulimit -v`, so as not to take the machine)."""

import re

import pytest

import harness

from test_stack_limits import ONE_EVENT_CHILD, ONE_PREFORK_CHILD, PROBE

CASES = {
    "string": '"x" * 2**34',
    "array_new": "Array.new(2**31)",
    # in Arrays of 1,000 Strings of 10 kB: mruby 3.3 and 4.0 refuse an Array
    # past 131,072 entries (below)
    "append_forever": 'a = []; loop { a << (b = []); '
                      '1000.times { b << "x" * 10_000 } }',
    # its output grows with the square of the depth: past the budget long
    # before the machine stack of a thread runs out
    "json_square": "a = []; a << a; JSON.pretty_generate(a, max_nesting: false)",
}

WRAPS = {
    "plain": "{expr}\n",
    "ensure": "begin\n  x = 1\nensure\n  {expr}\nend\n",
    # a script that names sleep runs on a coroutine (not under prefork)
    "coroutine": "sleep 0\n{expr}\n",
}

# RSS a worker may keep above its level before the runs, an eighth of the
# budget the runs reached: what stays is not the runs' data but a one-time
# growth of the interpreter at the JSON case's depth (2.4 MB, the same
# after the second and third run; Apache event has up to four interpreters
# here: at most 7.2 MB measured on 2026-11-27), and the few pages glibc
# keeps after malloc_trim.
RSS_SLACK_KB = 16 * 1024

# mruby 3.3 and 4.0 refuse an Array of more than 131,072 entries before
# they allocate it (docs/stdlib.md): Array.new(2**31) is that error there
ARRAY_TOO_BIG = (harness.mruby_release_no() >= 30300
                 and {"array_new": "ArgumentError: array size too big"}
                 or {})


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1))


def one_worker(kind, apache, nginx, expr, memory_conf=""):
    """One worker whose runs have the memory budget of memory_conf and no
    time budget: on a loaded machine a run may take over the default 1 s
    to allocate 128 MiB, and then it is the time budget that stops it."""
    files = {"probe.rb": PROBE, "f.rb": WRAPS["plain"].format(expr=expr)}
    for wrap, code in WRAPS.items():
        files[f"{wrap}.rb"] = code.format(expr=expr)
    docs = {"filter/doc": "hello\n"}
    if kind.startswith("apache"):
        mpm = kind.split("-")[1]
        conf = "".join(f"<Location /{w}>\n    mrubyHandlerMiddle {{dir}}/{w}.rb"
                       f"\n</Location>\n" for w in ("probe",) + tuple(WRAPS))
        conf += ("<Location /filter/>\n    mrubyOutputFilter {dir}/f.rb\n"
                 "    SetOutputFilter mruby\n</Location>\n")
        return apache("mrubyRunTimeout 0\n" + memory_conf + conf, mpm=mpm, files=files, docs=docs,
                      mpm_conf=ONE_PREFORK_CHILD if mpm == "prefork"
                      else ONE_EVENT_CHILD)
    locs = "".join(f"    location = /{w} {{ mruby_content_handler "
                   f"{{dir}}/{w}.rb; }}\n" for w in ("probe",) + tuple(WRAPS))
    locs += "    location /filter/ { mruby_output_body_filter {dir}/f.rb; }\n"
    return nginx("server {\n    listen 127.0.0.1:{port};\n"
                 + "    mruby_run_timeout 0;\n" + memory_conf
                 + locs + "}", workers=1, files=files, docs=docs)


@pytest.mark.parametrize("kind", ["nginx", "apache-event", "apache-prefork"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_run_past_its_memory_budget_gets_500_and_the_worker_serves_on(
        kind, case, apache, nginx):
    s = one_worker(kind, apache, nginx, CASES[case])
    first = s.get("/probe")
    assert first.status_code == 200, s.error_log()[-2000:]
    pid = first.text.split(" ")[0]
    s.get("/probe")
    before = rss_kb(pid)

    # the script and the line of the expression in it
    paths = [("/plain", "plain.rb:1"), ("/ensure", "ensure.rb:4"),
             ("/filter/doc", "f.rb:1")]
    # on a coroutine's 256 KB the JSON case's depth ends at the stack
    # check (test_stack_limits.py) before its output reaches the budget
    if case != "json_square":
        paths.append(("/coroutine", "coroutine.rb:2"))
    for path, where in paths:
        # filling 128 MiB in blocks of 72 bytes takes seconds under ASan
        r = s.get(path, timeout=120)
        assert r.status_code == 500, (path, r.status_code,
                                      s.error_log()[-2000:])
        if case in ARRAY_TOO_BIG:
            s.wait_log(ARRAY_TOO_BIG[case])
            assert re.search(r"/" + re.escape(where) + r"\b",
                             s.error_log()), (path, s.error_log()[-2000:])
        else:
            s.wait_log("NoMemoryError: past the run's memory budget of "
                       f"134217728 bytes (")
            assert re.search(r"memory budget of 134217728 bytes \([^)]*/"
                             + re.escape(where) + r"\)", s.error_log()), \
                (path, s.error_log()[-2000:])
        assert s.get("/probe").text == f"{pid} alive"
        after = rss_kb(pid)
        # AddressSanitizer's quarantine holds freed blocks (256 MB)
        assert harness.ASAN or after < before + RSS_SLACK_KB, \
            (path, before, after)

    log = s.error_log()
    assert "signal" not in log and "Killed" not in log


KEEPS_2MB = ('s = "x" * 2_000_000\n'
             'get_server_class.rputs "kept #{s.size}"\n')


@pytest.mark.parametrize("kind", ["nginx", "apache"])
def test_the_budget_is_configured_per_location(kind, apache, nginx):
    """Set at the server level, inherited by a location, 0 (no budget) in
    another."""
    files = {"keeps.rb": KEEPS_2MB}
    if kind == "apache":
        s = apache("""
mrubyRunMemory 1048576
<Location /inherits>
    mrubyHandlerMiddle {dir}/keeps.rb
</Location>
<Location /unbounded>
    mrubyRunMemory 0
    mrubyHandlerMiddle {dir}/keeps.rb
</Location>
""", files=files)
    else:
        s = nginx("""
server {
    listen 127.0.0.1:{port};
    mruby_run_memory 1m;
    location /inherits { mruby_content_handler {dir}/keeps.rb; }
    location /unbounded {
        mruby_run_memory 0;
        mruby_content_handler {dir}/keeps.rb;
    }
}""", files=files)
    r = s.get("/unbounded")
    assert (r.status_code, r.text) == (200, "kept 2000000")
    assert s.get("/inherits").status_code == 500
    s.wait_log("NoMemoryError: past the run's memory budget of 1048576 "
               "bytes (")
    assert s.get("/unbounded").text == "kept 2000000"


def test_apache_refuses_a_budget_that_is_not_a_number_of_bytes(apache):
    a = apache("mrubyRunMemory 1m\n", start=False)
    rc, out = a.configtest()
    assert rc != 0
    assert ('mrubyRunMemory: expected a number of bytes (0 for no limit '
            'of ours), not "1m"') in out


@pytest.mark.parametrize("kind", ["nginx", "apache"])
def test_startup_scripts_have_a_budget_of_their_own(kind, apache, nginx):
    """A startup script may keep more than a request's budget (the tables
    every request shares), and one past its own budget (1 GiB) is stopped
    with NoMemoryError and its file:line; the server starts and serves."""
    files = {"keeps.rb": '$kept = "x" * 2_000_000\n',
             "huge.rb": 'x = 1\n"x" * 2**34\n',
             "read.rb": "get_server_class.rputs $kept.size.to_s\n"}
    if kind == "apache":
        s = apache("""
mrubyRunMemory 1048576
mrubyPostConfigFirst {dir}/keeps.rb
mrubyPostConfigMiddle {dir}/huge.rb
<Location /read>
    mrubyHandlerMiddle {dir}/read.rb
</Location>
""", files=files, mpm="prefork")  # a child has the parent's state by fork
    else:
        s = nginx("""
mruby_run_memory 1m;
mruby_init {dir}/keeps.rb;
mruby_init_worker {dir}/huge.rb;
server {
    listen 127.0.0.1:{port};
    location /read { mruby_content_handler {dir}/read.rb; }
}""", files=files)
    r = s.get("/read")
    assert (r.status_code, r.text) == (200, "2000000"), s.error_log()[-2000:]
    s.wait_log("NoMemoryError: past the run's memory budget of 1073741824 "
               "bytes (")
    assert re.search(r"memory budget of 1073741824 bytes \([^)]*/huge\.rb:2\)",
                     s.error_log()), s.error_log()[-2000:]

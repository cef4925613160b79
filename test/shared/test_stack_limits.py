"""Request data that would take the machine stack: a deeply nested pattern,
a pattern of 32,765 groups read by name, JSON nested without max_nesting.
Each runs on a coroutine's 256 KB stack (the script names sleep; not
under prefork, which waits on the process's stack) and on the thread's
own; the request gets an answer, the worker lives on and
serves the next request (docs/security.md).  Before the stack checks each
coroutine case killed the worker ("guard page hit", SIGSEGV), and
JSON.generate of a self-containing Array killed it on any stack."""

import pytest

ONE_PREFORK_CHILD = ("StartServers 1\nMinSpareServers 1\nMaxSpareServers 1\n"
                     "ServerLimit 1\nMaxRequestWorkers 1\n")
ONE_EVENT_CHILD = ("StartServers 1\nServerLimit 1\nThreadsPerChild 4\n"
                   "ThreadLimit 4\nMinSpareThreads 1\nMaxSpareThreads 4\n"
                   "MaxRequestWorkers 4\n")

# The worker process that answers (mruby has no Process.pid).
PID = 'File.open("/proc/self/stat") { |f| f.read }.split(" ")[0]'

SCRIPT = """\
Server = get_server_class
pid = {pid}
{wait}
begin
  v = ({expr})
  Server.rputs "#{{pid}} value #{{v.inspect[0, 40]}}"
rescue RegexpError, JSON::NestingError => e
  Server.rputs "#{{pid}} #{{e.class}}: #{{e.message[0, 90]}}"
end
"""

PROBE = 'Server = get_server_class\nServer.rputs "#{' + PID + '} alive"'

# expression: (answer on a coroutine, answer on the thread's stack)
CASES = {
    "nested_groups": (
        'Regexp.new("(" * 1500 + "a" + ")" * 1500) =~ "a"',
        ("RegexpError: pattern nests deeper than the machine stack left "
         "allows (parse depth limit", "value 0")),
    "group_by_name": (
        'Regexp.new("(?<x>a)" * 32765).match("a" * 32765)[:x]',
        ('value "a"', 'value "a"')),
    "json_generate_self_containing": (
        "a = []; a << a; JSON.generate(a, max_nesting: false)",
        ("JSON::NestingError: nesting of",
         "JSON::NestingError: nesting of")),
    "json_parse_deep": (
        'JSON.parse("[" * 100_000 + "]" * 100_000, max_nesting: false)',
        ("JSON::NestingError: nesting of",
         "JSON::NestingError: nesting of")),
}


def one_worker(kind, apache, nginx, scripts):
    """One worker process, so that every request runs in the same one;
    scripts: {"/path": code}."""
    files = {f"s{i}.rb": code for i, code in enumerate(scripts.values())}
    if kind.startswith("apache"):
        mpm = kind.split("-")[1]
        conf = "\n".join(f"<Location {loc}>\n    mrubyHandlerMiddle "
                         f"{{dir}}/s{i}.rb\n</Location>"
                         for i, loc in enumerate(scripts))
        return apache(conf, mpm=mpm, files=files,
                      mpm_conf=ONE_PREFORK_CHILD if mpm == "prefork"
                      else ONE_EVENT_CHILD)
    locs = "\n".join(f"location {loc} {{ mruby_content_handler "
                     f"{{dir}}/s{i}.rb; }}" for i, loc in enumerate(scripts))
    return nginx("server {\n    listen 127.0.0.1:{port};\n" + locs + "\n}",
                 workers=1, files=files)


@pytest.mark.parametrize("kind", ["nginx", "apache-event", "apache-prefork"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_request_data_cannot_take_the_machine_stack(kind, case, apache,
                                                    nginx):
    expr, (on_coroutine, on_thread) = CASES[case]
    if kind == "apache-prefork":
        on_coroutine = on_thread    # a script that waits blocks its process
    s = one_worker(kind, apache, nginx, {
        "/probe": PROBE,
        "/coroutine": SCRIPT.format(pid=PID, wait="sleep 0", expr=expr),
        "/thread": SCRIPT.format(pid=PID, wait="", expr=expr),
    })
    first = s.get("/probe")
    assert first.status_code == 200, s.error_log()[-2000:]
    pid = first.text.split(" ")[0]

    for path, expected in (("/coroutine", on_coroutine),
                           ("/thread", on_thread)):
        r = s.get(path)
        assert r.status_code == 200, (path, s.error_log()[-2000:])
        assert r.text.startswith(f"{pid} {expected}"), (path, r.text)
        assert s.get("/probe").text == f"{pid} alive"

    log = s.error_log()
    assert "guard page" not in log and "signal" not in log

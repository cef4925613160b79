"""Recursion without end, in Ruby and through methods that C calls back
(`to_s` by interpolation, `<=>` by sort, `hash` by a Hash): the run gets
SystemStackError, the request a 500 with one log line, and the worker
serves the next request, on the thread's own stack and on a coroutine's
(a script that names sleep; not under prefork, which waits on the
process's stack), in the content phase, an earlier phase and a body
filter (docs/security.md)."""

import pytest

from test_stack_limits import ONE_EVENT_CHILD, ONE_PREFORK_CHILD, PROBE

CASES = {
    "ruby": "def f(n); f(n + 1); end; f(0)",
    "to_s": 'class A; def to_s; "#{A.new}"; end; end; "#{A.new}"',
    "sort": ("class B; def <=>(o); [B.new, B.new].sort; 0; end; end; "
             "[B.new, B.new].sort"),
    # a Hash asks a key's hash once it has more than a few entries
    "hash": ("class H; def hash; h = {}; 20.times { |i| h[i] = i }; "
             "h[H.new] = 1; 1; end; end; H.new.hash"),
    "initialize": "class C; def initialize; C.new; end; end; C.new",
    "method_missing": ("class M; def method_missing(n, *a); M.new.x; end; "
                       "end; M.new.x"),
    "gsub_block": 'def g; "a".gsub(/a/) { g }; end; g',
    "inspect": "class I; def inspect; [I.new].inspect; end; end; p I.new",
    "define_method": ("class D; define_method(:d) { D.new.d }; end; "
                      "D.new.d"),
}


def servers(kind, apache, nginx, expr, apache_conf="", nginx_conf=""):
    """expr in thread.rb (the thread's stack) and after `sleep 0` in
    coro.rb (a coroutine where the server has one), run at /thread,
    /coro, /access (an access phase) and /filter/doc (a body filter);
    /probe answers "PID alive".  *_conf: directives before the locations
    (server config; nginx's http block)."""
    thread, coro = f"{expr}\n", f"sleep 0\n{expr}\n"
    files = {"probe.rb": PROBE, "thread.rb": thread, "coro.rb": coro}
    docs = {"filter/doc": "hello\n"}
    if kind.startswith("apache"):
        mpm = kind.split("-")[1]
        conf = apache_conf + f"""
<Location /probe>
    mrubyHandlerMiddle {{dir}}/probe.rb
</Location>
<Location /thread>
    mrubyHandlerMiddle {{dir}}/thread.rb
</Location>
<Location /coro>
    mrubyHandlerMiddle {{dir}}/coro.rb
</Location>
<Location /access>
    mrubyAccessCheckerMiddle {{dir}}/thread.rb
    mrubyHandlerMiddle {{dir}}/probe.rb
</Location>
<Location /filter/>
    mrubyOutputFilter {{dir}}/thread.rb
    SetOutputFilter mruby
</Location>
"""
        return apache(conf, mpm=mpm, files=files, docs=docs,
                      mpm_conf=ONE_PREFORK_CHILD if mpm == "prefork"
                      else ONE_EVENT_CHILD)
    return nginx(nginx_conf + """
server {
    listen 127.0.0.1:{port};
    location = /probe { mruby_content_handler {dir}/probe.rb; }
    location = /thread { mruby_content_handler {dir}/thread.rb; }
    location = /coro { mruby_content_handler {dir}/coro.rb; }
    location = /access {
        mruby_access_handler {dir}/coro.rb;
        mruby_content_handler {dir}/probe.rb;
    }
    location /filter/ { mruby_output_body_filter {dir}/thread.rb; }
}""", workers=1, files=files, docs=docs)


@pytest.mark.parametrize("kind", ["nginx", "apache-event", "apache-prefork"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_endless_recursion_is_a_system_stack_error_with_500(kind, case,
                                                           apache, nginx):
    s = servers(kind, apache, nginx, CASES[case])
    first = s.get("/probe")
    assert first.status_code == 200, s.error_log()[-2000:]
    pid = first.text.split(" ")[0]

    for path in ("/thread", "/coro", "/access", "/filter/doc"):
        r = s.get(path)
        assert r.status_code == 500, (path, r.status_code,
                                      s.error_log()[-3000:])
        assert s.get("/probe").text == f"{pid} alive", \
            (path, s.error_log()[-3000:])

    log = s.error_log()
    assert log.count("SystemStackError") >= 4, log[-3000:]
    assert "signal" not in log and "guard page" not in log

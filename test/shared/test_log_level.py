"""Server.log_level?(level): whether Server.errlogger(level, ...) would write
its line now, on both servers, following the level that applies to the
request (Apache's per-directory and per-module LogLevel, nginx's error_log
of the location).  And a server at its most verbose level serves on."""

import os
import re
import time

import pytest

# The answer for each level, as "debug=false info=true ..."
LEVELS = '''
Server = get_server_class
Server.rputs [[:debug, Server::LOG_DEBUG], [:info, Server::LOG_INFO],
              [:notice, Server::LOG_NOTICE], [:warn, Server::LOG_WARN],
              [:err, Server::LOG_ERR]].map { |name, level|
  "#{name}=#{Server.log_level?(level)}"
}.join(" ")
'''

# What each answer claims, checked against the log: a line per level
LOGGED = '''
Server = get_server_class
[[:debug, Server::LOG_DEBUG], [:info, Server::LOG_INFO],
 [:notice, Server::LOG_NOTICE], [:warn, Server::LOG_WARN]].each do |name, level|
  Server.errlogger level, "level #{name} #{Server.log_level?(level)}"
end
Server.rputs "done"
'''


def answers(text):
    return dict(pair.split("=") for pair in text.split())


def test_apache_follows_loglevel_of_the_request(apache):
    """LogLevel warn, with info in one location and mruby:debug in another;
    notice and above always pass, as Apache always logs them."""
    a = apache("""
<Location /warn>
    mrubyHandlerMiddle {dir}/levels.rb
</Location>
<Location /info>
    LogLevel info
    mrubyHandlerMiddle {dir}/levels.rb
</Location>
<Location /debug>
    LogLevel mruby:debug
    mrubyHandlerMiddle {dir}/levels.rb
</Location>
<Location /logged>
    mrubyHandlerMiddle {dir}/logged.rb
</Location>
""", files={"levels.rb": LEVELS, "logged.rb": LOGGED}, loglevel="warn")

    assert answers(a.get("/warn").text) == {
        "debug": "false", "info": "false", "notice": "true", "warn": "true",
        "err": "true"}
    assert answers(a.get("/info").text) == {
        "debug": "false", "info": "true", "notice": "true", "warn": "true",
        "err": "true"}
    assert answers(a.get("/debug").text)["debug"] == "true"

    assert a.get("/logged").text == "done"
    log = a.wait_log("level warn true")
    assert "level notice true" in log
    assert "level info" not in log and "level debug" not in log


def test_nginx_follows_error_log_of_the_location(nginx):
    """error_log warn, with info in one location."""
    n = nginx("""
location /warn { mruby_content_handler {dir}/levels.rb; }
location /info {
    error_log {dir}/logs/info.log info;
    mruby_content_handler {dir}/levels.rb;
}
location /logged { mruby_content_handler {dir}/logged.rb; }
""", files={"levels.rb": LEVELS, "logged.rb": LOGGED}, loglevel="warn")

    assert answers(n.get("/warn").text) == {
        "debug": "false", "info": "false", "notice": "false", "warn": "true",
        "err": "true"}
    assert answers(n.get("/info").text) == {
        "debug": "false", "info": "true", "notice": "true", "warn": "true",
        "err": "true"}

    assert n.get("/logged").text == "done"
    log = n.wait_log("level warn true")
    assert "level notice" not in log and "level info" not in log


def test_needs_one_argument(apache):
    a = apache("<Location /t>\n    mrubyHandlerMiddle {dir}/t.rb\n</Location>",
               files={"t.rb": "begin; Apache.log_level?; rescue ArgumentError"
                              " => e; Apache.rputs e.message; end"})
    assert "wrong number of arguments" in a.get("/t").text


def test_nginx_at_debug_level_waits_out_an_open_write(nginx):
    """A `stat` script rewritten by a writer that keeps it open: the file
    watch arms its quiet timer, whose debug line names the timer's
    connection; at error_log debug the worker serves on, the old version
    until the writer has been quiet, then the new one."""
    n = nginx("location /e { mruby_content_handler {dir}/e.rb; }",
              files={"e.rb": 'Nginx.rputs "old"'}, loglevel="debug")
    workers = n.worker_pids()
    assert n.get("/e").text == "old"

    with open(os.path.join(n.dir, "e.rb"), "w") as f:
        f.write('Nginx.rputs "new"')
        f.flush()
        assert n.get("/e").text == "old"
        time.sleep(0.8)
        assert n.get("/e").text == "new"

    assert n.worker_pids() == workers
    assert "exited on signal" not in n.error_log()


def test_nginx_debug_lines_name_the_timers_connections(nginx):
    """At error_log debug, nginx names each timer by the descriptor of the
    connection its event belongs to: a sleeping script's timer by the
    request's connection; the timer that gives back the stacks of a burst
    (more sleeping scripts than the worker keeps stacks for) has no
    connection, and -1."""
    n = nginx("location /s { mruby_content_handler_code "
              "'Nginx::Async.sleep 700; Nginx.rputs \"slept\"'; }",
              loglevel="debug")
    burst = n.get_spread("/s", count=80, concurrency=80)
    assert {r.text for r in burst} == {"slept"}
    log = n.wait_log("event timer add: -1: 1000:")
    fds = set(re.findall(r"accept: 127\.0\.0\.1:\d+ fd:(\d+)", log))
    sleeps = set(re.findall(r"event timer add: (-?\d+): 70[01]:", log))
    assert fds and sleeps and sleeps <= fds, (fds, sleeps)
    trims = set(re.findall(r"event timer add: (-?\d+): 1000:", log))
    assert trims == {"-1"}, trims


# Three frames: bar, foo, the top level
BACKTRACE = '''
Server = get_server_class
class Foo
  def foo
    Bar.new.bar
  end
end
class Bar
  def bar
    raise "intentional"
  end
end
Foo.new.foo
'''

BACKTRACE_CONF = {
    "apache": "<Location /bt>\n    mrubyHandlerMiddle {dir}/bt.rb\n"
              "</Location>",
    "nginx": "location /bt { mruby_content_handler {dir}/bt.rb; }",
}


@pytest.mark.parametrize("which", ["apache", "nginx"])
def test_backtrace_one_line_a_frame_at_debug(request, which):
    """At debug, a script's backtrace is logged one frame a line, at the
    error's level, before the error line, which says so; at info the error
    line holds it all.  One line a frame names the file: the original's
    test counts three."""
    factory = request.getfixturevalue(which)
    debug = factory(BACKTRACE_CONF[which], files={"bt.rb": BACKTRACE},
                    loglevel="debug")
    assert debug.get("/bt").status_code == 500
    log = debug.wait_log("RuntimeError: intentional (backtrace above)")
    lines = [line for line in log.splitlines() if "/bt.rb:" in line]
    assert len(lines) == 3, lines
    for i, (line, where) in enumerate(zip(lines, ("10:in bar", "5:in foo",
                                                  "13"))):
        assert f"mruby: backtrace {i + 1}/3: {debug.dir}/bt.rb:{where}" \
            in line, line
        assert "error" in line, line

    info = factory(BACKTRACE_CONF[which], files={"bt.rb": BACKTRACE},
                   loglevel="info")
    assert info.get("/bt").status_code == 500
    log = info.wait_log("RuntimeError: intentional (")
    lines = [line for line in log.splitlines() if "/bt.rb:" in line]
    assert len(lines) == 1 and "backtrace" not in lines[0], lines
    assert f"{info.dir}/bt.rb:10:in bar, {info.dir}/bt.rb:5:in foo" \
        in lines[0]

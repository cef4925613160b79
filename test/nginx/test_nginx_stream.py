"""ngx_mruby stream module: scripts in the access phase of TCP servers."""

import re
import socket

import pytest

from harness import read_until_closed


def talk(port):
    """Connects, reads until the server closes; b"" if it closed at once."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        return read_until_closed(s), s.getsockname()[1]


def stream_server(code, reply="x"):
    """A stream server on port2 with one mruby_stream_code directive per
    item of code (Ruby quoted for nginx); it replies reply if let in."""
    return """
server {
    listen 127.0.0.1:{port2};
    %s
    return "%s\\n";
}""" % ("\n    ".join("mruby_stream_code %s;" % c for c in code), reply)


STREAM = """
mruby_stream_init_worker_code '$allowed_port = {port2}';
mruby_stream_exit_worker_code 'Nginx::Stream.log Nginx::Stream::LOG_NOTICE, "stream worker exits"';
server {
    listen 127.0.0.1:{port2};
    listen 127.0.0.1:{port3};
    mruby_stream {dir}/stream.rb;
    return "served $server_port\\n";
}
"""

SCRIPT = """
c = Nginx::Stream::Connection.new
Nginx::Stream.log Nginx::Stream::LOG_NOTICE,
  "stream #{c.remote_ip}:#{c.remote_port} -> #{c.local_ip}:#{c.local_port}"
if c.local_port == $allowed_port
  Nginx.return Nginx::Stream::OK
else
  Nginx.return Nginx::Stream::ABORT
end
"""


def test_stream_handler_accepts_and_denies(nginx):
    n = nginx(stream_conf=STREAM, files={"stream.rb": SCRIPT})
    data, my_port = talk(n.port2)
    assert data == b"served %d\n" % n.port2
    n.wait_log("stream 127.0.0.1:%d -> 127.0.0.1:%d" % (my_port, n.port2))

    data, _ = talk(n.port3)
    assert data == b""  # denied: closed without a word
    n.wait_log("-> 127.0.0.1:%d" % n.port3)  # the script ran, and denied

    n.stop()
    assert "stream worker exits" in n.error_log()


def test_stream_handler_error_closes_and_logs(nginx):
    n = nginx(stream_conf=stream_server(["'raise \"stream broke\"'"]))
    data, _ = talk(n.port2)
    assert data == b""
    n.wait_log("mruby_stream: RuntimeError: stream broke")
    # the worker lives on
    data, _ = talk(n.port2)
    assert data == b""
    assert len(n.worker_pids()) == 1


def test_stream_syntax_error_fails_configtest(nginx):
    n = nginx(stream_conf=stream_server(["'def ('"]), start=False)
    rc, out = n.configtest()
    assert rc != 0 and n.conf_path in out


def test_stream_handler_given_twice_is_a_config_error(nginx):
    n = nginx(stream_conf=stream_server(["'a = 1'", "'b = 2'"]), start=False)
    rc, out = n.configtest()
    assert rc != 0
    assert re.search(r'"mruby_stream_code" directive is duplicate in '
                     + re.escape(n.conf_path), out), out


def test_stream_failing_init_worker_is_logged_and_worker_serves(nginx):
    n = nginx(stream_conf="mruby_stream_init_worker_code "
                          "'raise \"stream init_worker broke\"';"
                          + stream_server(["'Nginx.return Nginx::Stream::OK'"],
                                          "up"))
    data, _ = talk(n.port2)
    assert data == b"up\n"
    log = n.wait_log("stream init_worker broke")
    assert re.search(r"\[error\].* mruby: mruby_stream_init_worker: "
                     r"RuntimeError: stream init_worker broke", log), log


def test_stream_server_context_adds_listeners(nginx):
    """mruby_stream_server_context_code runs while the stream server block
    is read; Nginx::Stream.add_listener adds its listen sockets; a port
    the configuration listens on already is refused at config time."""
    n = nginx(stream_conf="""
server {
    mruby_stream_server_context_code 'Nginx::Stream.add_listener(address: "127.0.0.1:{port2}"); Nginx::Stream.add_listener({address: "127.0.0.1:{port3}"})';
    return "served $server_port\\n";
}""")
    assert talk(n.port2)[0] == b"served %d\n" % n.port2
    assert talk(n.port3)[0] == b"served %d\n" % n.port3

    n.stop()
    n.stream_conf = """
server {
    listen 127.0.0.1:{port2};
    mruby_stream_server_context_code 'Nginx::Stream.add_listener(address: "127.0.0.1:{port2}")';
    return "x";
}"""
    rc, out = n.configtest()
    assert rc != 0
    assert ('Nginx::Stream.add_listener: "127.0.0.1:%d" is listened on '
            'already' % n.port2) in out, out


RETARGET = """
mruby_stream_init_worker_code '$b = "127.0.0.1:{port3}"; $h = "127.0.0.1:{port}"';
upstream su { server 127.0.0.1:{port3}; }
server {
    listen 127.0.0.1:{port3};
    return "B\\n";
}
server {
    listen 127.0.0.1:{port2};
    mruby_stream {dir}/retarget.rb;
    proxy_pass su;
}
"""

# Each session sends the next one's upstream elsewhere: port3 (a stream
# server answering "B") and port (the http server), so sessions alternate.
RETARGET_SCRIPT = r'''
C = Nginx::Stream::Connection
c = C.new("su")
before = c.upstream_server
c.upstream_server = before == $b ? $h : $b
errors = [-> { C.new("nope") }, -> { c.upstream_server = "localhost:80" },
          -> { c.upstream_server = "127.0.0.1" }].map do |f|
  begin
    f.call
    "no error"
  rescue => e
    e.message
  end
end
Nginx::Stream.log Nginx::Stream::LOG_NOTICE, [
  "retarget #{before} -> #{c.upstream_server}", Nginx::Stream.module_name,
  c.remote_addr == C.remote_ip, c.local_addr == C.local_ip,
  C.local_port, C.remote_port == c.remote_port, C.local_ip_port,
  C.proxy_protocol_ip.inspect, c.stream_status, C.new.class,
  *errors].join("|")
C.stream_status = Nginx::Stream::OK
'''


def test_stream_connection_upstream_retarget(nginx):
    """Nginx::Stream::Connection.new(upstream)#upstream_server= sends the
    session to the new address; the class-method readers and stream_status
    work as in the original."""
    n = nginx(stream_conf=RETARGET, files={"retarget.rb": RETARGET_SCRIPT})
    replies = []
    for _ in range(2):
        with socket.create_connection(("127.0.0.1", n.port2), timeout=10) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            replies.append(read_until_closed(s))
    assert replies[0].startswith(b"HTTP/1.1 ")  # the http server on port
    assert replies[1] == b"B\n"
    p2, p3, p = n.port2, n.port3, n.port
    rest = ("|ngx_mruby|true|true|%d|true|127.0.0.1:%d|nil|-5|"
            "Nginx::Stream::Connection|"
            'Nginx::Stream::Connection: no stream upstream block "nope"|'
            'Nginx::Stream::Connection#upstream_server=: "localhost:80" is '
            'not an IP address with an optional port (no DNS lookup at '
            'request time)|'
            'Nginx::Stream::Connection#upstream_server=: "127.0.0.1" has no '
            'port' % (p2, p2))
    n.wait_log("retarget 127.0.0.1:%d -> 127.0.0.1:%d%s" % (p3, p, rest))
    n.wait_log("retarget 127.0.0.1:%d -> 127.0.0.1:%d%s" % (p, p3, rest))


def test_stream_log_converts_with_to_s(nginx):
    """As the original: Nginx::Stream.log/errlogger take any object."""
    n = nginx(stream_conf=stream_server([
        "'Nginx::Stream.log Nginx::Stream::LOG_NOTICE, 12345; "
        "Nginx::Stream.errlogger Nginx::Stream::LOG_NOTICE, [1, :a]'"]))
    assert talk(n.port2)[0] == b"x\n"
    n.wait_log("12345")
    n.wait_log("[1, :a]")


@pytest.mark.parametrize("budget,code,line", [
    ("mruby_run_timeout 150ms", "x = 0\nloop { x += 1 }",
     "RunTimeout: the run's time budget of 150 ms is spent"),
    ("mruby_run_memory 1m", 'x = "x" * (8 << 20)',
     "NoMemoryError: past the run's memory budget of 1048576 bytes")])
def test_stream_runaway_script_is_stopped_by_its_budget(nginx, budget, code,
                                                        line):
    # the budget at the stream block and in a server; the server after it
    # still answers
    stream = (f"{budget};\n"
              + stream_server([f"'{code}'"])
              + """
server {
    listen 127.0.0.1:{port3};
    mruby_stream_code 'Nginx.return Nginx::Stream::OK';
    return "next\\n";
}""")
    n = nginx(stream_conf=stream)
    data, _ = talk(n.port2)
    assert data == b""
    log = n.wait_log(line.split(":")[0])
    assert line in log, log[-2000:]
    data, _ = talk(n.port3)
    assert data == b"next\n"
    assert len(n.worker_pids()) == 1
